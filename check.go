package ringlimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/peer"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// pending is the core's view of one call: its requests, the slots for their
// answers and the channel done signals. It is pooled; a call abandoned on
// timeout is not returned to the pool, since the core may still write into
// it.
type pending struct {
	reqs  []check.Request
	resps []check.Response
	done  chan struct{} // buffered 1: signal never blocks
	fn    func()        // p.signal, bound once
	timer *time.Timer   // wait's, stopped between calls; nil until needed
	// gone is set when the call stops waiting: the core then skips it if it
	// has not reached it yet (peer.Driver.CheckUnless).
	gone atomic.Bool
}

func (p *pending) signal() { p.done <- struct{}{} }

var pendingPool = sync.Pool{New: func() any {
	p := &pending{done: make(chan struct{}, 1)}
	p.fn = p.signal
	return p
}}

func (p *pending) release() {
	clear(p.reqs) // drop the keys
	clear(p.resps)
	p.reqs, p.resps = p.reqs[:0], p.resps[:0]
	pendingPool.Put(p)
}

// errShuttingDown is returned to calls that arrive after Shutdown began.
var errShuttingDown = status.Error(codes.Unavailable, "ringlimit: node is shutting down")

// errOverloaded is returned to calls refused because the checks queued in
// front of the core hold too many items already (peer.ErrDriverBusy).
var errOverloaded = status.Error(codes.Unavailable, "ringlimit: node overloaded: too many checks queued")

// decide hands reqs to the core, through the driver's one order, and waits
// for the answers, which it writes to out[i]: the node's one path to its
// core, for the public APIs and the Checker alike. The error is a gRPC
// status error for the batch as a whole: Unavailable while shutting down,
// DeadlineExceeded or Canceled when ctx ends (or CheckTimeout passes)
// before the core answered (a call the core has not reached by then is not
// decided at all), Unavailable as well when the node sheds the call
// because too many checks are queued (peer.DriverConfig.MaxQueueItems).
func (n *Node) decide(ctx context.Context, reqs []check.Request, out []check.Response) error {
	if !n.gate.enter() {
		return errShuttingDown
	}
	defer n.gate.leave()
	if len(reqs) == 0 {
		return nil
	}
	p := pendingPool.Get().(*pending)
	p.reqs = append(p.reqs, reqs...)
	p.resps = append(p.resps[:0], make([]check.Response, len(reqs))...)
	if err := n.drv.CheckUnless(&p.gone, p.reqs, p.resps, p.fn); err != nil {
		p.release()
		if errors.Is(err, peer.ErrDriverBusy) {
			return errOverloaded
		}
		return errShuttingDown
	}
	if err := p.wait(ctx, n.cfg.API.CheckTimeout); err != nil {
		p.gone.Store(true)
		return err // p is abandoned to the core
	}
	copy(out, p.resps)
	p.release()
	return nil
}

// wait waits for the core's done, for at most timeout and while ctx lasts.
func (p *pending) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	// The pooled timer is reused: Reset of a stopped timer (Go 1.23's
	// timers) delivers no stale tick.
	if p.timer == nil {
		p.timer = time.NewTimer(timeout)
	} else {
		p.timer.Reset(timeout)
	}
	t := p.timer
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.C:
		return status.Error(codes.DeadlineExceeded, fmt.Sprintf("ringlimit: no answer within %v", timeout))
	}
}

// Check decides a batch of items, as the gRPC RateLimiter/Check method does
// (but not bound by Config.API.GRPCRulesOnly): the embedding form of the public
// API (package api). Each invalid item is answered with STATUS_ERROR and a
// message naming the field; the others are decided. The error, a gRPC
// status error, is for the call as a whole: InvalidArgument for no items or
// too many, Unavailable while shutting down, DeadlineExceeded or Canceled
// when ctx ends first. Check is safe for concurrent use.
func (n *Node) Check(ctx context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	return n.api.Check(ctx, req)
}

// decider is the public API's Backend: decide, with the decisions counted
// by the API itself (the Checker counts its own).
type decider struct{ n *Node }

// Check implements api.Backend.
func (d decider) Check(ctx context.Context, reqs []check.Request) ([]check.Response, error) {
	out := make([]check.Response, len(reqs))
	if err := d.n.decide(ctx, reqs, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckInto implements api.BackendInto.
func (d decider) CheckInto(ctx context.Context, reqs []check.Request, out []check.Response) error {
	return d.n.decide(ctx, reqs, out)
}

var _ api.BackendInto = decider{}

// gate counts calls in flight and, once closed, admits no more, so that
// Shutdown can wait for the calls already admitted. It is safe for
// concurrent use.
type gate struct {
	mu       sync.Mutex
	closed   bool          // guarded by mu
	inflight int           // guarded by mu
	drained  chan struct{} // closed when closed && inflight == 0
}

func newGate() *gate { return &gate{drained: make(chan struct{})} }

// enter admits a call unless the gate is closed.
func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inflight++
	return true
}

// leave ends a call admitted by enter.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if g.closed && g.inflight == 0 {
		close(g.drained)
	}
}

// close admits no more calls and returns a channel closed once the calls in
// flight have left. It may be called more than once.
func (g *gate) close() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		if g.inflight == 0 {
			close(g.drained)
		}
	}
	return g.drained
}

// isClosed reports whether close was called.
func (g *gate) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}
