package peer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Handler receives what the transport learns: envelopes from peers, and
// peers that could not be reached. *rlsync.Node satisfies it. Its methods are
// called from several goroutines at once (the gRPC handlers and one sender
// per peer) and must not block.
type Handler interface {
	// Step handles one envelope received from a peer at now. It takes
	// ownership of env.
	Step(now time.Time, env *peerv1.Envelope)
	// Unreachable reports that a Deliver RPC to peer failed at now; the
	// envelopes it carried were dropped.
	Unreachable(now time.Time, peer string)
}

// sizedHandler is a Handler that takes an envelope with its encoded size,
// which the transport measured already (the Driver, whose queue is bounded
// in bytes): it is not measured twice on the receiving path.
type sizedHandler interface {
	stepSized(env *peerv1.Envelope, size int64)
}

var (
	_ rlsync.Transport = (*Transport)(nil)
	_ sizedHandler     = (*Driver)(nil)
	_ Handler          = (*rlsync.Node)(nil)
)

// Transport carries envelopes between nodes over gRPC: it implements
// rlsync.Transport for sending and serves the peerv1.Peer service for
// receiving (RegisterServer).
//
// It keeps one gRPC connection per peer, dialled at the address the peer
// advertises in its gossip metadata (SetPeers), and one bounded send queue
// drained by one sender goroutine per peer, so a slow or dead peer delays no
// other. Each sender coalesces what is queued into one batch of up to
// MaxBatch envelopes and sends it as one message of a long-lived Stream RPC
// to the peer: batches are pipelined (a sender does not wait for the peer to
// process one before sending the next) and cost no call set-up each. A Send
// that does not complete within RPCTimeout (no flow-control window: the peer
// is stuck) fails. A peer that does not serve Stream is sent one Deliver RPC
// per batch instead. Envelopes to one peer are delivered in the order they
// were sent, or dropped.
//
// A failed batch is not retried: it is dropped, the stream is closed (the
// next batch opens a new one) and the Handler is told the peer is
// Unreachable. Batches sent on a stream just before it broke are lost
// without notice. Retrying here would be unsafe, because a batch that failed
// may have been delivered, and a second delivery of a non-idempotent message
// (a flush of hits) would count them twice; package sync retries, on Tick,
// what must be retried, with its own sequence numbers, and times out what
// goes unanswered.
//
// A Transport is safe for concurrent use.
type Transport struct {
	cfg      TransportConfig
	clock    Clock
	log      *slog.Logger
	metrics  *transportMetrics
	dialOpts []grpc.DialOption
	wg       sync.WaitGroup // the senders

	mu sync.RWMutex // guards the fields below
	// handler receives envelopes and failures; set by Start.
	handler Handler
	// ctx is the parent of the senders' contexts; cancel ends it. Set by
	// Start.
	ctx    context.Context
	cancel context.CancelFunc
	// closed is set by Close.
	closed bool
	// members holds the current members, this node included, each with
	// the incarnation its gossip metadata advertises (0: none). It is
	// replaced, never modified, so a reader may keep it after unlocking.
	members map[string]uint64
	// peers holds the link to every other member with a gRPC address.
	peers map[string]*link

	// queued is the encoded size, in bytes, of the envelopes in every
	// peer's send queue (bounded by MaxQueueBytes).
	queued atomic.Int64
}

// queuedEnv is an envelope in a send queue and its encoded size.
type queuedEnv struct {
	env  *peerv1.Envelope
	size int
}

// linkWindow is the flow-control window of a peer connection and of its
// stream, in bytes: a peer's whole send queue (MaxQueueBytes' default,
// 4 MiB) fits it, so a sender waits for the receiver's window only when
// the receiver falls behind.
const linkWindow = 4 << 20

// link is the connection to one peer and its send queue.
type link struct {
	name, addr string
	queue      chan queuedEnv
	// queued is the encoded size, in bytes, of the envelopes in queue
	// (at most MaxQueueBytes/2).
	queued   atomic.Int64
	conn     *grpc.ClientConn
	client   peerv1.PeerClient
	duration prometheus.Observer
	errors   prometheus.Counter
	// stop ends the link's sender; nil until it is started (under
	// Transport.mu).
	stop context.CancelFunc

	// The fields below belong to the link's sender goroutine.

	// stream is the open Stream RPC, nil when none is; cancelStream ends it.
	stream       peerv1.Peer_StreamClient
	cancelStream context.CancelFunc
	// watchdog cancels the stream when a Send outlasts RPCTimeout.
	watchdog *time.Timer
	// unary is set once the peer answered Stream with Unimplemented: every
	// batch then goes in a Deliver RPC of its own.
	unary bool
	// failing is set from a failed batch to the next delivered one, so that
	// only the first failure of a run is logged above debug.
	failing bool
}

// NewTransport returns a Transport for cfg. It starts nothing and dials
// nothing: SetPeers records the peers, Start starts their senders.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := newTransportMetrics()
	if err := m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: cfg.RPCTimeout,
		}),
		// Fixed windows turn off gRPC's bandwidth-delay estimator, which
		// pings the peer for nearly every message received on a link that
		// is not saturated: two more frames, and a write and a wake-up on
		// each side, per batch (docs/bench.md "The gRPC windows").
		grpc.WithInitialWindowSize(linkWindow),
		grpc.WithInitialConnWindowSize(linkWindow),
	}, cfg.DialOptions...)
	clock := cfg.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	return &Transport{
		cfg:      cfg,
		clock:    clock,
		log:      discardLogger(cfg.Logger).With(slog.String("node", cfg.Self)),
		metrics:  m,
		dialOpts: opts,
		members:  map[string]uint64{},
		peers:    map[string]*link{},
	}, nil
}

// Send queues env for the peer named to and returns at once, as
// rlsync.Transport requires; it takes ownership of env. It drops env (and
// counts it) when to is not a known peer, is this node, or its queue is full,
// or after Close. Envelopes sent before Start wait in the queue.
func (t *Transport) Send(to string, env *peerv1.Envelope) {
	if env == nil {
		return
	}
	t.mu.RLock()
	reason := ""
	switch l, ok := t.peers[to]; {
	case t.closed:
		reason = dropClosed
	case to == t.cfg.Self:
		reason = dropSelf
	case !ok:
		reason = dropUnknownPeer
	default:
		size := proto.Size(env)
		if !t.reserve(l, size) {
			reason = dropQueueBytes
			break
		}
		select {
		case l.queue <- queuedEnv{env, size}:
		default:
			t.release(l, size)
			reason = dropQueueFull
		}
	}
	t.mu.RUnlock()
	if reason != "" {
		t.metrics.dropped.WithLabelValues(reason).Inc()
	}
}

// reserve counts size more bytes queued for l and reports whether they fit
// MaxQueueBytes (all the queues) and MaxQueueBytes/2 (l's); if not it
// counts nothing. An envelope larger than a queue's share fits an empty
// queue.
func (t *Transport) reserve(l *link, size int) bool {
	n := int64(size)
	if q := l.queued.Add(n); q > t.cfg.MaxQueueBytes/2 && q != n {
		l.queued.Add(-n)
		return false
	}
	if q := t.queued.Add(n); q > t.cfg.MaxQueueBytes && q != n {
		t.queued.Add(-n)
		l.queued.Add(-n)
		return false
	}
	return true
}

// release counts size bytes fewer queued for l.
func (t *Transport) release(l *link, size int) {
	l.queued.Add(-int64(size))
	t.queued.Add(-int64(size))
}

// SetPeers replaces the membership: members is the full list of live members
// (this node included), as Cluster's onChange reports it. A new peer gets a
// connection and a sender; a departed one's sender stops, its queued
// envelopes are dropped and its connection closed; a peer whose gRPC address
// changed is reconnected. Envelopes are accepted only from members, and
// from a member that advertises an incarnation only in that incarnation.
func (t *Transport) SetPeers(members []Member) {
	names := make(map[string]uint64, len(members))
	want := make(map[string]string, len(members))
	for _, m := range members {
		names[m.Name] = m.Incarnation
		if m.Name != t.cfg.Self && m.GRPCAddr != "" {
			want[m.Name] = m.GRPCAddr
		}
	}
	var stale []*link
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.members = names
	for name, l := range t.peers {
		if addr, ok := want[name]; !ok || addr != l.addr {
			stale = append(stale, l)
			delete(t.peers, name)
		}
	}
	for name, addr := range want {
		if _, ok := t.peers[name]; ok {
			continue
		}
		l, err := t.newLink(name, addr)
		if err != nil {
			t.log.Error("cannot connect to peer", "peer", name, "addr", addr, "err", err)
			continue
		}
		t.peers[name] = l
		if t.handler != nil {
			t.startLocked(l)
		}
	}
	t.mu.Unlock()
	for _, l := range stale {
		if l.stop != nil {
			l.stop() // its sender closes it on its way out
		} else {
			t.closeLink(l)
		}
	}
}

func (t *Transport) newLink(name, addr string) (*link, error) {
	opts := t.dialOpts
	if t.cfg.Credentials != nil {
		// The peer's name is the TLS server name its certificate must bear.
		opts = append(slices.Clip(opts), grpc.WithAuthority(name))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	// Connect now, not on the first envelope: the TLS handshake of an
	// authenticated peer then happens when it joins, not in the way of the
	// first flush (at a loaded cluster's start that delay over-admitted).
	conn.Connect()
	return &link{
		name:     name,
		addr:     addr,
		queue:    make(chan queuedEnv, t.cfg.QueueLen),
		conn:     conn,
		client:   peerv1.NewPeerClient(conn),
		duration: t.metrics.rpcDuration.WithLabelValues(name),
		errors:   t.metrics.rpcErrors.WithLabelValues(name),
	}, nil
}

// Start starts delivering: to h the envelopes received and the failures to
// reach peers, and to the peers what Send queued. ctx bounds the life of the
// senders; Close stops them earlier. It may be called once.
func (t *Transport) Start(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("%w: nil Handler", ErrInvalidConfig)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return ErrClosed
	case t.handler != nil:
		return ErrAlreadyStarted
	}
	t.handler = h
	t.ctx, t.cancel = context.WithCancel(ctx)
	for _, l := range t.peers {
		t.startLocked(l)
	}
	return nil
}

// startLocked starts l's sender. t.mu must be held, and t started.
func (t *Transport) startLocked(l *link) {
	ctx, stop := context.WithCancel(t.ctx)
	l.stop = stop
	h := t.handler
	t.wg.Go(func() { t.sender(ctx, l, h) })
}

// sender delivers l's queue in batches until ctx ends, then closes l.
func (t *Transport) sender(ctx context.Context, l *link, h Handler) {
	defer t.closeLink(l)
	defer t.closeStream(l)
	batch := make([]*peerv1.Envelope, 0, t.cfg.MaxBatch)
	var next queuedEnv // taken from the queue but over the last batch's bytes
	for {
		if next.env == nil {
			select {
			case <-ctx.Done():
				return
			case next = <-l.queue:
				t.release(l, next.size)
			}
		}
		batch, next = t.fill(l, batch, next)
		t.deliver(ctx, l, h, batch)
		clear(batch)
		batch = batch[:0]
	}
}

// fill returns batch (empty) holding first and what is queued for l,
// without waiting, up to MaxBatch envelopes and MaxBatchBytes bytes, and
// the envelope taken that did not fit, if any. What it takes is no longer
// counted as queued.
func (t *Transport) fill(l *link, batch []*peerv1.Envelope, first queuedEnv) ([]*peerv1.Envelope, queuedEnv) {
	batch = append(batch, first.env)
	size := first.size
	for len(batch) < t.cfg.MaxBatch {
		select {
		case q := <-l.queue:
			t.release(l, q.size)
			if size+q.size > t.cfg.MaxBatchBytes {
				return batch, q
			}
			size += q.size
			batch = append(batch, q.env)
		default:
			return batch, queuedEnv{}
		}
	}
	return batch, queuedEnv{}
}

// deliver sends batch to l (see send). On failure the batch is dropped, not
// retried (see Transport), and h learns that the peer is unreachable, unless
// ctx ended: then the peer left or the transport closed.
func (t *Transport) deliver(ctx context.Context, l *link, h Handler, batch []*peerv1.Envelope) {
	start := t.clock.Now()
	err := t.send(ctx, l, &peerv1.DeliverRequest{Envelopes: batch})
	now := t.clock.Now()
	l.duration.Observe(now.Sub(start).Seconds())
	t.metrics.batchSize.Observe(float64(len(batch)))
	if err == nil {
		t.metrics.sent.Add(float64(len(batch)))
		if l.failing {
			l.failing = false
			t.log.Info("peer reachable again", "peer", l.name, "addr", l.addr)
		}
		return
	}
	l.errors.Inc()
	t.metrics.dropped.WithLabelValues(dropRPCError).Add(float64(len(batch)))
	if ctx.Err() != nil {
		return // not the peer's fault
	}
	switch code := status.Code(err); {
	case code != codes.Unavailable && code != codes.DeadlineExceeded && code != codes.Canceled:
		// The peer answered, but refused the batch: a bug or a
		// misconfiguration.
		t.log.Error("deliver refused", "peer", l.name, "envelopes", len(batch), "err", err)
	case !l.failing:
		// The first failure of a run: the peer's keys now go by the
		// partition policy for a while (rlsync.Config.UnreachableAfter).
		t.log.Warn("peer unreachable", "peer", l.name, "addr", l.addr, "envelopes", len(batch), "err", err)
	default:
		t.log.Debug("deliver failed", "peer", l.name, "envelopes", len(batch), "err", err)
	}
	l.failing = true
	h.Unreachable(now, l.name)
}

// send sends req to l as the next message of l's stream, opening one when
// none is open, or in a Deliver RPC of its own when the peer has no Stream.
// It fails when the stream cannot be opened or the message not handed to
// gRPC within RPCTimeout, or when the stream has failed; the stream is then
// closed. Only l's sender calls it.
func (t *Transport) send(ctx context.Context, l *link, req *peerv1.DeliverRequest) error {
	if l.unary {
		callCtx, cancel := context.WithTimeout(ctx, t.cfg.RPCTimeout)
		defer cancel()
		_, err := l.client.Deliver(callCtx, req)
		return err
	}
	var err error
	if l.stream == nil {
		sctx, cancel := context.WithCancel(ctx)
		l.cancelStream = cancel
		l.watchdog = time.AfterFunc(t.cfg.RPCTimeout, cancel)
		l.stream, err = l.client.Stream(sctx)
		if err == nil {
			err = t.awaitHeader(l.stream)
		}
		if err == nil {
			err = l.stream.Send(req)
		}
	} else {
		l.watchdog.Reset(t.cfg.RPCTimeout)
		err = l.stream.Send(req)
	}
	fired := !l.watchdog.Stop()
	if err == io.EOF { // the stream ended: its status says why
		_, err = l.stream.CloseAndRecv()
		if err == nil {
			err = status.Error(codes.Unavailable, "peer: the peer ended the stream")
		}
	}
	if err == nil && !fired {
		return nil
	}
	t.closeStream(l)
	if err == nil {
		return nil // sent, but the watchdog fired meanwhile: the next batch opens a new stream
	}
	if status.Code(err) == codes.Unimplemented {
		// A node without Stream refused the stream before reading anything:
		// this batch was not delivered, so it may go again, by Deliver.
		t.log.Info("peer has no Stream RPC: sending it one Deliver per batch", "peer", l.name)
		l.unary = true
		return t.send(ctx, l, req)
	}
	return err
}

// awaitHeader waits for the header that a node serving Stream sends as it
// opens the stream, so that a node without Stream (which ends the stream
// with Unimplemented and no header) is known before a batch is lost on it.
func (t *Transport) awaitHeader(st peerv1.Peer_StreamClient) error {
	md, err := st.Header()
	if err == nil && md == nil { // ended without a header: the status says why
		if _, err = st.CloseAndRecv(); err == nil {
			err = status.Error(codes.Unavailable, "peer: the peer ended the stream")
		}
	}
	return err
}

// closeStream ends l's stream, if one is open. Only l's sender calls it.
func (t *Transport) closeStream(l *link) {
	if l.stream == nil {
		return
	}
	l.watchdog.Stop()
	l.cancelStream()
	l.stream, l.cancelStream = nil, nil
}

// closeLink closes l's connection and drops (and counts) what is left in its
// queue. It forgets the peer's metric series unless a link to a peer of that
// name remains (its address changed).
func (t *Transport) closeLink(l *link) {
	if err := l.conn.Close(); err != nil {
		t.log.Debug("closing peer connection", "peer", l.name, "err", err)
	}
	n := 0
	for {
		select {
		case q := <-l.queue:
			t.release(l, q.size)
			n++
			continue
		default:
		}
		break
	}
	t.mu.RLock()
	_, still := t.peers[l.name]
	reason := dropPeerGone
	if t.closed {
		reason = dropClosed
	}
	t.mu.RUnlock()
	if n > 0 {
		t.metrics.dropped.WithLabelValues(reason).Add(float64(n))
	}
	if !still {
		t.metrics.forgetPeer(l.name)
	}
}

// Close stops the senders, waits for them to exit, drops what is still
// queued and closes every connection. Send drops whatever comes later, and
// the server rejects further calls with Unavailable. It does not stop the
// grpc.Server the service is registered on. It is safe to call more than
// once.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	cancel := t.cancel
	var idle []*link // links whose sender never started
	for _, l := range t.peers {
		if l.stop == nil {
			idle = append(idle, l)
		}
	}
	t.peers = map[string]*link{}
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	t.wg.Wait()
	for _, l := range idle {
		t.closeLink(l)
	}
	return nil
}
