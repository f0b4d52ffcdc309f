package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// ErrDriverStopped is returned for inputs offered to a Driver that is not
// running (before Start or after Close).
var ErrDriverStopped = errors.New("peer: the core's driver is not running")

// Driver applies every input of one coordination core (rlsync.Node) in one
// total order, from one goroutine it owns, as raft's node.run drives RawNode:
// client checks, envelopes from peers, unreachable reports, ticks, membership
// changes, the leave, and the reads of the core's state. Each input is
// applied whole before the next one starts, so no input can act on state
// another input changed under it (a check decided on a ring a membership
// change already replaced, say). The core needs no lock and has none.
//
// Producers (gRPC handlers, the transport's receivers and senders, the
// membership callback) put inputs on one bounded queue and return; a full
// queue blocks them, which is the node's back-pressure. Envelopes from
// peers are bounded in bytes as well (MaxQueueBytes): a receiver waits
// while those queued exceed it, and the peer's sender, held up by gRPC's
// flow control, drops what its own bounded queue cannot keep. The loop reads the
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
	in       chan input
	stop     chan struct{}
	finished chan struct{}
	started  atomic.Bool
	stopOnce sync.Once
	// afterTick, when set, runs on the loop after every Tick.
	afterTick func(now time.Time)
	maxBytes  int64

	mu sync.Mutex // guards the fields below
	// queued is the encoded size, in bytes, of the envelopes in the queue.
	queued int64
	// room, when not nil, is closed when queued falls (a Step waits on it).
	room chan struct{}
}

var _ Handler = (*Driver)(nil)

// DriverConfig configures a Driver.
type DriverConfig struct {
	// Clock tells the time the core is given. Nil is SystemClock.
	Clock Clock
	// TickInterval is how often the core's Tick runs (rlsync.Config's
	// TickInterval). Required.
	TickInterval time.Duration
	// QueueLen is the capacity, in inputs, of the queue in front of the
	// core. Default 4096: far more than the calls a node has in flight, and
	// small enough that a stalled loop shows as back-pressure, not memory.
	QueueLen int
	// MaxQueueBytes bounds the envelopes from peers in the queue, by their
	// encoded size in bytes: Step waits while they would exceed it (one
	// envelope is always let in). Default 4 MiB: a queued envelope takes 3
	// to 7 times its encoded size in heap, so about 28 MiB at most (issue
	// 16: 4096 envelopes of up to 1000 items were otherwise unbounded in
	// bytes), and four of the largest batches a peer sends in one call.
	MaxQueueBytes int64
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
	env   *peerv1.Envelope
	size  int64 // env's encoded size
	peer  string
	fn    func(now time.Time)
}

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
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	return &Driver{
		core:      core,
		clock:     cfg.Clock,
		tick:      cfg.TickInterval,
		in:        make(chan input, cfg.QueueLen),
		stop:      make(chan struct{}),
		finished:  make(chan struct{}),
		afterTick: cfg.AfterTick,
		maxBytes:  cfg.MaxQueueBytes,
	}, nil
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

// run is the loop: one input at a time, in the order the queue holds them,
// and Tick every TickInterval.
func (d *Driver) run(ctx context.Context) {
	defer close(d.finished)
	t := time.NewTicker(d.tick)
	defer t.Stop()
	for {
		select {
		case x := <-d.in:
			d.apply(x)
		case <-t.C:
			now := d.clock.Now()
			d.core.Tick(now)
			if d.afterTick != nil {
				d.afterTick(now)
			}
		case <-d.stop:
			d.drain()
			return
		case <-ctx.Done():
			d.stopOnce.Do(func() { close(d.stop) })
			d.drain()
			return
		}
	}
}

// drain applies what is queued when the loop stops.
func (d *Driver) drain() {
	for {
		select {
		case x := <-d.in:
			d.apply(x)
		default:
			return
		}
	}
}

// apply applies one input at the time the loop reads now.
func (d *Driver) apply(x input) {
	now := d.clock.Now()
	switch x.kind {
	case inCheck:
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
	select {
	case d.in <- x:
		return nil
	case <-d.stop:
		return ErrDriverStopped
	}
}

// Check queues a client check: the core decides reqs into resps (see
// rlsync.Node.Check) and calls done, on the loop, once every answer is
// written. done must not block. On ErrDriverStopped done is never called.
func (d *Driver) Check(reqs []check.Request, resps []check.Response, done func()) error {
	return d.offer(input{kind: inCheck, reqs: reqs, resps: resps, done: done})
}

// Step queues an envelope received from a peer (Handler). The instant is
// the loop's, read when the envelope is applied; at is ignored. An envelope
// offered after Close is dropped.
//
// Step waits while the envelopes queued exceed MaxQueueBytes (or until
// Close).
func (d *Driver) Step(_ time.Time, env *peerv1.Envelope) {
	size := int64(proto.Size(env))
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
