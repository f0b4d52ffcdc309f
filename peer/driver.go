package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// ErrDriverStopped is returned for inputs offered to a Driver that is not
// running (before Start or after Close).
var ErrDriverStopped = errors.New("peer: the core's driver is not running")

// ErrDriverBusy is returned for a client check offered while the checks
// queued in front of the core already hold MaxQueueItems items: the node is
// overloaded, and sheds the call rather than let its queue grow.
var ErrDriverBusy = errors.New("peer: too many checks queued in front of the core")

// Driver applies every input of one coordination core (rlsync.Node) in one
// total order, from one goroutine it owns, as raft's node.run drives RawNode:
// client checks, envelopes from peers, unreachable reports, ticks, membership
// changes, the leave, and the reads of the core's state. Each input is
// applied whole before the next one starts, so no input can act on state
// another input changed under it (a check decided on a ring a membership
// change already replaced, say). The core needs no lock and has none.
//
// Producers (gRPC handlers, the transport's receivers and senders, the
// membership callback) put inputs on one of two bounded queues and return;
// a full queue blocks them, which is the node's back-pressure. Envelopes
// from peers have a queue of their own; client checks and every other
// input share the other, each queue applied in the order offered. Between
// the two the loop keeps the order offered too, except that a small check
// (up to PassItems items) may pass the envelopes queued before it, up to
// PassItems items of checks between two envelopes (driver_loop.go): a
// bystander's check waits behind at most one envelope however many are
// queued, while a flood's calls of many items keep their place behind the
// peer traffic queued before them, which is what holds the flood to the
// pace at which the flooded node's peers answer it (issue 16). Envelopes from
// peers are bounded in bytes as well (MaxQueueBytes): a receiver waits
// while those queued exceed it, and the peer's sender, held up by gRPC's
// flow control, drops what its own bounded queue cannot keep. Client checks
// are bounded in items (MaxQueueItems): beyond it a check is refused at once
// (ErrDriverBusy), and a check whose caller gave up waiting before the loop
// reached it is not decided (CheckUnless). The loop reads the
// clock as it applies each input, so the core sees time in the order it
// sees inputs. What the core sends (Transport.Send) and the done callbacks
// of checks run on the loop's goroutine and must not block.
//
// A Driver is safe for concurrent use. It implements Handler, so the
// Transport hands it what it receives.
type Driver struct {
	core     *rlsync.Node
	clock    Clock
	tick     time.Duration
	in       chan input // client checks and every input but envelopes
	peers    chan input // envelopes from peers
	heads    heads      // the loop's: the inputs taken from in and peers, not yet applied
	stop     chan struct{}
	finished chan struct{}
	started  atomic.Bool
	stopOnce sync.Once
	// afterTick, when set, runs on the loop after every Tick.
	afterTick func(now time.Time)
	maxBytes  int64
	maxItems  int64
	passItems int
	// items is the number of check items in the queue; skipped and shed
	// count the checks not decided because their caller had gone, and
	// those refused with ErrDriverBusy.
	items, skipped, shed atomic.Int64
	// seq numbers the inputs offered.
	seq atomic.Uint64

	mu sync.Mutex // guards the fields below
	// queued is the encoded size, in bytes, of the envelopes in the queue.
	queued int64
	// room, when not nil, is closed when queued falls (a Step waits on it).
	room chan struct{}

	// wait is the time inputs spent in the queue, by class (waitClasses);
	// waits are its observers, indexed by inputKind.
	wait  *prometheus.HistogramVec
	waits [inDo + 1]prometheus.Observer
}

var _ Handler = (*Driver)(nil)

// DriverConfig configures a Driver.
type DriverConfig struct {
	// Clock tells the time the core is given. Nil is SystemClock.
	Clock Clock
	// TickInterval is how often the core's Tick runs (rlsync.Config's
	// TickInterval). Required.
	TickInterval time.Duration
	// QueueLen is the capacity, in inputs, of each of the two queues in
	// front of the core (envelopes; everything else). Default 4096: far more than the calls a node has in flight, and
	// small enough that a stalled loop shows as back-pressure, not memory.
	QueueLen int
	// MaxQueueBytes bounds the envelopes from peers in the queue, by their
	// encoded size in bytes: Step waits while they would exceed it (one
	// envelope is always let in). Default 4 MiB: a queued envelope takes 3
	// to 7 times its encoded size in heap, so about 28 MiB at most (issue
	// 16: 4096 envelopes of up to 1000 items were otherwise unbounded in
	// bytes), and four of the largest batches a peer sends in one call.
	MaxQueueBytes int64
	// MaxQueueItems bounds the items of the client checks in the queue:
	// a check that would exceed it is refused with ErrDriverBusy (one check
	// is always let in). Default 32768: a queued item holds about 250 bytes
	// (its request and answer slots, 216 bytes, and its share of the call's
	// request), so about 8 MiB, and at the core's 1 to 2 µs an item about
	// 50 ms of its work. Under a flood the loop fell behind and calls that
	// had timed out stayed queued, 1000 items each, until the flooded node
	// was OOM-killed (issue 16).
	MaxQueueItems int64
	// PassItems is how many items a client check may hold and still be
	// applied before envelopes queued ahead of it, and how many items of
	// such checks may pass between two envelopes; a larger check keeps
	// its place in the order offered. Default 100: the calls of a
	// bystander (a few items) wait behind at most one envelope, not
	// behind MaxQueueBytes of them (under a key flood the queue of a
	// node beside the flooded one filled to 2 to 4 MiB and envelopes
	// waited there up to seconds, issue 16), while a flood's calls (1000
	// items) wait behind the peer traffic queued before them. With every
	// check passing envelopes in turn (no bound in items) the flooded
	// node was OOM-killed in 2 runs of 2: its calls no longer waited for
	// the replies to the traffic they had made.
	PassItems int
	// AfterTick, when set, is called on the loop's goroutine after each Tick,
	// with the core quiescent: it may read the core (HandedOff, Quorum) and
	// must not block.
	AfterTick func(now time.Time)
}

// inputKind says which of an input's fields are set.
type inputKind uint8

const (
	inCheck inputKind = iota
	inStep
	inUnreachable
	inDo
)

// input is one input to the core.
type input struct {
	kind  inputKind
	reqs  []check.Request
	resps []check.Response
	done  func()
	gone  *atomic.Bool // a check's: its caller stopped waiting
	env   *peerv1.Envelope
	size  int64 // env's encoded size
	peer  string
	fn    func(now time.Time)
	at    time.Time // when it was queued
	seq   uint64    // the order it was offered in, from 1
}

// waitClasses label the queue wait of each inputKind (the label "input" of
// ringlimit_core_queue_wait_seconds).
var waitClasses = [inDo + 1]string{inCheck: "check", inStep: "peer", inUnreachable: "other", inDo: "other"}

// NewDriver returns a Driver of core. It starts nothing.
func NewDriver(core *rlsync.Node, cfg DriverConfig) (*Driver, error) {
	if core == nil {
		return nil, errors.New("peer: NewDriver needs a core")
	}
	if cfg.TickInterval <= 0 {
		return nil, fmt.Errorf("peer: driver TickInterval %v must be positive", cfg.TickInterval)
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.QueueLen < 0 {
		return nil, fmt.Errorf("peer: driver QueueLen %d must be positive", cfg.QueueLen)
	}
	if cfg.MaxQueueBytes == 0 {
		cfg.MaxQueueBytes = 4 << 20
	}
	if cfg.MaxQueueBytes < 0 {
		return nil, fmt.Errorf("peer: driver MaxQueueBytes %d must be positive", cfg.MaxQueueBytes)
	}
	if cfg.MaxQueueItems == 0 {
		cfg.MaxQueueItems = 32768
	}
	if cfg.MaxQueueItems < 0 {
		return nil, fmt.Errorf("peer: driver MaxQueueItems %d must be positive", cfg.MaxQueueItems)
	}
	if cfg.PassItems == 0 {
		cfg.PassItems = 100
	}
	if cfg.PassItems < 0 {
		return nil, fmt.Errorf("peer: driver PassItems %d must be positive", cfg.PassItems)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	d := &Driver{
		core:      core,
		clock:     cfg.Clock,
		tick:      cfg.TickInterval,
		in:        make(chan input, cfg.QueueLen),
		peers:     make(chan input, cfg.QueueLen),
		stop:      make(chan struct{}),
		finished:  make(chan struct{}),
		afterTick: cfg.AfterTick,
		maxBytes:  cfg.MaxQueueBytes,
		maxItems:  cfg.MaxQueueItems,
		passItems: cfg.PassItems,
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ringlimit_core_queue_wait_seconds",
			Help: "Time inputs waited in the queue in front of the coordination core, by input (check: client checks; peer: envelopes from peers; other).",
			// 50µs to about 2.3 s in steps of √2.
			Buckets: prometheus.ExponentialBuckets(50e-6, 1.4142135623730951, 32),
		}, []string{"input"}),
	}
	for k, class := range waitClasses {
		d.waits[k] = d.wait.WithLabelValues(class)
	}
	return d, nil
}

// Collectors returns the driver's metrics: the time inputs wait in its
// queue, by class (ringlimit_core_queue_wait_seconds), and the encoded
// bytes of the envelopes queued (ringlimit_core_queue_peer_bytes).
func (d *Driver) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.wait, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlimit_core_queue_peer_bytes",
		Help: "Encoded bytes of the envelopes from peers queued in front of the coordination core (bounded by MaxQueueBytes).",
	}, d.queuedBytes)}
}

// queuedBytes returns the encoded bytes of the envelopes queued.
func (d *Driver) queuedBytes() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return float64(d.queued)
}

// Start starts the loop. It runs until Close (or ctx ends); Start may be
// called once.
func (d *Driver) Start(ctx context.Context) {
	if d.started.Swap(true) {
		return
	}
	go d.run(ctx)
}

// Close stops the loop and waits for it to exit. Inputs already queued are
// applied first; inputs offered afterwards are refused. Close before Start
// returns at once; Close may be called more than once.
func (d *Driver) Close() {
	d.stopOnce.Do(func() { close(d.stop) })
	if d.started.Load() {
		<-d.finished
	}
}

// apply applies one input at the time the loop reads now.
func (d *Driver) apply(x input) {
	now := d.clock.Now()
	d.waits[x.kind].Observe(now.Sub(x.at).Seconds())
	switch x.kind {
	case inCheck:
		d.items.Add(-int64(len(x.reqs)))
		if x.gone != nil && x.gone.Load() {
			d.skipped.Add(1)
			x.done()
			return
		}
		d.core.Check(now, x.reqs, x.resps, x.done)
	case inStep:
		d.core.Step(now, x.env)
		d.release(x.size)
	case inUnreachable:
		d.core.Unreachable(now, x.peer)
	case inDo:
		x.fn(now)
	}
}

// offer queues x, or reports ErrDriverStopped once the driver is closed.
func (d *Driver) offer(x input) error {
	select {
	case <-d.stop:
		return ErrDriverStopped
	default:
	}
	x.at = d.clock.Now()
	x.seq = d.seq.Add(1)
	q := d.in
	if x.kind == inStep {
		q = d.peers
	}
	select {
	case q <- x:
		return nil
	case <-d.stop:
		return ErrDriverStopped
	}
}

// Check queues a client check: the core decides reqs into resps (see
// rlsync.Node.Check) and calls done, on the loop, once every answer is
// written. done must not block. On ErrDriverStopped done is never called.
func (d *Driver) Check(reqs []check.Request, resps []check.Response, done func()) error {
	return d.CheckUnless(nil, reqs, resps, done)
}

// CheckUnless is Check for a caller that may stop waiting: if gone (when
// not nil) holds true when the loop reaches the check, the core does not
// decide it (its hits are not counted, its answers not written) and done
// is called at once. It reports ErrDriverBusy, and queues nothing, when the
// checks queued hold MaxQueueItems items already.
func (d *Driver) CheckUnless(gone *atomic.Bool, reqs []check.Request, resps []check.Response, done func()) error {
	n := int64(len(reqs))
	if q := d.items.Add(n); q > d.maxItems && q != n {
		d.items.Add(-n)
		d.shed.Add(1)
		return ErrDriverBusy
	}
	err := d.offer(input{kind: inCheck, reqs: reqs, resps: resps, done: done, gone: gone})
	if err != nil {
		d.items.Add(-n)
	}
	return err
}

// ChecksSkipped returns the number of checks not decided because their
// caller had stopped waiting (CheckUnless).
func (d *Driver) ChecksSkipped() int64 { return d.skipped.Load() }

// ChecksShed returns the number of checks refused with ErrDriverBusy.
func (d *Driver) ChecksShed() int64 { return d.shed.Load() }

// Step queues an envelope received from a peer (Handler). The instant is
// the loop's, read when the envelope is applied; at is ignored. An envelope
// offered after Close is dropped.
//
// Step waits while the envelopes queued exceed MaxQueueBytes (or until
// Close).
func (d *Driver) Step(_ time.Time, env *peerv1.Envelope) {
	d.stepSized(env, int64(proto.Size(env)))
}

// stepSized is Step for an envelope of size encoded bytes (sizedHandler).
func (d *Driver) stepSized(env *peerv1.Envelope, size int64) {
	if !d.reserve(size) {
		return
	}
	if d.offer(input{kind: inStep, env: env, size: size}) != nil {
		d.release(size)
	}
}

// reserve waits until size more bytes of envelopes fit MaxQueueBytes (at
// once when none are queued), counts them and reports true; or reports
// false once the driver is closed.
func (d *Driver) reserve(size int64) bool {
	for {
		d.mu.Lock()
		if d.queued == 0 || d.queued+size <= d.maxBytes {
			d.queued += size
			d.mu.Unlock()
			return true
		}
		if d.room == nil {
			d.room = make(chan struct{})
		}
		room := d.room
		d.mu.Unlock()
		select {
		case <-room:
		case <-d.stop:
			return false
		}
	}
}

// release counts size bytes of envelopes fewer queued and wakes the Steps
// waiting for room.
func (d *Driver) release(size int64) {
	d.mu.Lock()
	d.queued -= size
	if d.room != nil {
		close(d.room)
		d.room = nil
	}
	d.mu.Unlock()
}

// Unreachable queues the report that a delivery to peer failed (Handler).
func (d *Driver) Unreachable(_ time.Time, peer string) {
	_ = d.offer(input{kind: inUnreachable, peer: peer})
}

// Do applies fn on the loop, in order with every other input, at the time
// now the loop reads, and waits until it has run (or ctx ends). fn may use
// the core freely and must not block. Membership changes, the leave and
// every read of the core's state go through Do.
func (d *Driver) Do(ctx context.Context, fn func(now time.Time)) error {
	ran := make(chan struct{})
	if err := d.offer(input{kind: inDo, fn: func(now time.Time) { fn(now); close(ran) }}); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.finished:
		select {
		case <-ran:
			return nil
		default:
			return ErrDriverStopped
		}
	}
}
