package sim

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/check"
)

// How a run advances. A message between two nodes takes at least the
// shortest link latency, the lookahead, to arrive. So nothing a node does at
// instant t can reach another node before t+lookahead, and the nodes can run
// the events of a window [t, t+lookahead) each on its own, in any order or
// at once, and reach the same state. A run is a sequence of such windows:
//
//  1. The cluster fires its own events (timeline actions, node starts and
//     stops, progress) that are due: these change membership and the
//     network, so they run alone, between windows.
//  2. It draws the client requests that arrive in the window and hands
//     each to the arrival list of the node the load balancer picks.
//  3. Each node fires its events in the window (ticks, deliveries, failed
//     sends, view changes, its client requests) in time order. A node
//     touches only what is its own (nodeRun); what it sends waits in its
//     outbox, and its answers to clients in its decision list. Beside the
//     nodes, the ideal limiter decides the window's requests (reference).
//  4. The cluster moves every outbox into the receivers' queues and counts
//     the decisions, node by node in index order.
//
// A window ends at the lookahead or at the cluster's next event, whichever
// is sooner. Every order in which nodes run gives the same result, and
// step 4 does not depend on it, so a run gives the same Result on one
// worker or many (TestWorkersDoNotChangeResults). Two events at one
// instant fire in a fixed order: the cluster's before the nodes', then
// within a node its queued events (by the order they were scheduled)
// before its client requests.

// nodeRun is the part of a simulated node that only it touches while the
// nodes of a window run.
type nodeRun struct {
	// q holds the events that fire at the node.
	q queue
	// arrivals holds the client requests handed to the node for the
	// current window, in time order; next is the first not yet handed on.
	arrivals []*pending
	next     int
	// now is the instant of the event the node is firing.
	now int64
	// rng draws the fate of the messages the node sends.
	rng *rand.Rand
	// order draws the order of the inputs due within the interleave window
	// (Options.Interleave); nil when it is off.
	order *rand.Rand
	// reordered counts the inputs the interleave applied out of time
	// order.
	reordered int64
	// out holds the deliveries of the messages sent in the window.
	out []*event
	// pend holds the node's pending-request records; free those not in
	// use; busy counts those in use.
	pend, free []*pending
	busy       int
	// decisions holds the answers given in the window.
	decisions []decision
	// traffic counts the messages sent, per metrics window.
	traffic []traffic
	// viewChanges and anomalies count what the metrics report for the run.
	viewChanges, anomalies int64
	// leaving is set when the node ticked while leaving: the cluster
	// checks its leave at the end of the window.
	leaving bool
	// sent counts the envelopes sent (see checkSize); sizeErr holds the
	// first size that did not match an envelope's encoding.
	sent    int64
	sizeErr error
}

// runUntil runs windows up to instant until, or until the traffic has
// ended and no request is pending, or an error.
func (c *Cluster) runUntil(until int64) {
	if c.workers > 1 && c.steps == nil {
		c.steps = newStepper(c, c.workers-1)
		defer func() {
			c.steps.stop()
			c.steps = nil
		}()
	}
	for c.err == nil {
		c.settle()
		t, ok := c.nextEvent()
		if !ok || t > until || (t > c.end && c.pending() == 0) {
			return
		}
		if at, ok := c.q.peek(); ok && at == t {
			e := c.q.pop()
			c.now = t
			c.dispatch(e)
			c.q.recycle(e)
			continue
		}
		end := min(t+c.lookahead, until+1)
		if at, ok := c.q.peek(); ok {
			end = min(end, at)
		}
		c.now = t
		c.arrive(end)
		c.stepNodes(end)
		c.now = end
		for _, s := range c.nodes {
			if s.leaving {
				s.leaving = false
				c.checkLeave(s)
			}
		}
	}
}

// nextEvent returns the instant of the earliest event of the cluster, of
// any node and of the next client request; ok is false when there is none.
func (c *Cluster) nextEvent() (t int64, ok bool) {
	t, ok = c.q.peek()
	if c.nextArrival >= 0 && (!ok || c.nextArrival < t) {
		t, ok = c.nextArrival, true
	}
	for _, s := range c.nodes {
		if at, ok2 := s.q.peek(); ok2 && (!ok || at < t) {
			t, ok = at, true
		}
	}
	return t, ok
}

// pending returns how many client requests wait for a node's answer.
func (c *Cluster) pending() int {
	n := 0
	for _, s := range c.nodes {
		n += s.busy
	}
	return n
}

// minParallel is the fewest client requests in a window for which
// stepNodes hands the window to the stepper's workers. A window of fewer
// is a few microseconds of work, less than the hand-over costs: at the
// standard scenarios' 10,000 requests/s a 500µs window holds about 5, at
// the benchmark's 100,000 about 50.
const minParallel = 32

// stepNodes runs every node's events before instant end, and the ideal
// limiter's decisions of the window's arrivals (reference): on the
// stepper's workers and this goroutine when there is more than one of
// these tasks and the window has at least c.minParallel requests.
func (c *Cluster) stepNodes(end int64) {
	due := c.due[:0]
	for _, s := range c.nodes {
		if len(s.arrivals) > 0 {
			due = append(due, s)
		} else if at, ok := s.q.peek(); ok && at < end {
			due = append(due, s)
		}
	}
	c.due = due
	tasks := len(due)
	if len(c.refs) > 0 {
		tasks++ // the ideal limiter's
	}
	if tasks > 1 && len(c.refs) >= c.minParallel && c.steps != nil {
		c.parallelWindows++
		c.steps.run(due, end)
		return
	}
	c.reference()
	for _, s := range due {
		c.stepNode(s, end)
	}
}

// stepNode fires s's events before instant end, in time order: at one
// instant, queued events before client requests; with an interleave
// window, a queued event and a client request due within it of each other
// in a random order (see Options.Interleave).
func (c *Cluster) stepNode(s *simNode, end int64) {
	for {
		var p *pending
		if s.next < len(s.arrivals) {
			p = s.arrivals[s.next]
		}
		at, ok := s.q.peek()
		ok = ok && at < end
		queued := ok && (p == nil || at <= p.at)
		if ok && p != nil && s.order != nil && c.interleave > 0 && abs64(at-p.at) <= c.interleave {
			inOrder := queued
			queued = s.order.IntN(2) == 0
			if queued != inOrder {
				s.reordered++
			}
		}
		if queued {
			e := s.q.pop()
			s.now = max(s.now, e.at)
			c.fire(s, e)
			s.q.recycle(e)
			continue
		}
		if p == nil {
			break
		}
		s.next++
		s.now = max(s.now, p.at)
		s.n.Check(c.clockOf(s, s.now), p.reqs, p.resps, p.done)
	}
	clear(s.arrivals)
	s.arrivals, s.next = s.arrivals[:0], 0
}

// fire fires one of s's events, at s.now.
func (c *Cluster) fire(s *simNode, e *event) {
	switch e.kind {
	case evTick:
		if s.gen != e.gen || !s.running() {
			return
		}
		s.n.Tick(c.clockOf(s, s.now))
		if s.state == stateLeaving {
			s.leaving = true
		}
		ev := s.q.newEvent()
		ev.at, ev.kind, ev.a, ev.gen = e.at+c.tick, evTick, e.a, e.gen
		s.q.push(ev)
	case evDeliver:
		c.deliver(s, e)
	case evUnreachable:
		c.unreachable(s, e)
	case evView:
		c.viewChange(s, e)
	default:
		c.err = fmt.Errorf("sim: event kind %d queued at node %s", e.kind, s.name)
	}
}

// settle moves every node's outbox into the receivers' queues and counts
// every node's decisions, node by node in index order.
func (c *Cluster) settle() {
	for _, s := range c.nodes {
		if s.sizeErr != nil && c.err == nil {
			c.err = s.sizeErr
		}
		for _, e := range s.out {
			c.nodes[e.b].q.push(e)
		}
		clear(s.out)
		s.out = s.out[:0]
		for i := range s.decisions {
			c.met.decided(int(s.idx), &s.decisions[i])
			c.traceDecision(s, &s.decisions[i]) // trace.go
		}
		s.decisions = s.decisions[:0]
	}
}

// acquire returns a free pending record of s, marked busy.
func (s *simNode) acquire() *pending {
	if len(s.free) == 0 {
		s.growPending()
	}
	n := len(s.free)
	p := s.free[n-1]
	s.free = s.free[:n-1]
	p.busy = true
	s.busy++
	return p
}

// pendingChunk is how many pending records growPending makes at once.
const pendingChunk = 64

// growPending adds pendingChunk free records, made from three slabs (the
// records, their requests, their responses) rather than three allocations
// each.
func (s *simNode) growPending() {
	ps := make([]pending, pendingChunk)
	reqs := make([]check.Request, pendingChunk)
	resps := make([]check.Response, pendingChunk)
	for i := range ps {
		p := &ps[i]
		p.reqs, p.resps = reqs[i:i+1:i+1], resps[i:i+1:i+1]
		p.done = func() { s.decided(p) }
		s.pend = append(s.pend, p)
	}
	// Free in reverse, so that records are handed out in the order made.
	for i := len(ps) - 1; i >= 0; i-- {
		s.free = append(s.free, &ps[i])
	}
}

// release returns p to the free list.
func (s *simNode) release(p *pending) {
	p.busy = false
	p.reqs[0], p.resps[0] = check.Request{}, check.Response{}
	s.busy--
	s.free = append(s.free, p)
}

// decided is the done callback of a request: it keeps the node's answer
// for the cluster to count. A second call for one request is an anomaly of
// the Node under test.
func (s *simNode) decided(p *pending) {
	if !p.busy {
		s.anomalies++
		return
	}
	s.decisions = append(s.decisions, newDecision(p, &p.resps[0], s.now))
	s.release(p)
}

// loseRequests counts the requests pending at s as lost: it went down and
// will never answer them.
func (c *Cluster) loseRequests(s *simNode) {
	for _, p := range s.pend {
		if p.busy {
			c.met.w[p.win].lost++
			s.release(p)
		}
	}
}

// stepper runs the nodes of a window on several goroutines: its workers
// and the caller's. Each takes the next node not yet taken until none is
// left, so a slow node does not hold the others back.
//
// A window is short (the lookahead: 500µs of simulated time by default,
// often tens of microseconds of work), so handing it over must cost less
// than waking a sleeping goroutine. Workers and caller therefore wait for
// each other by spinning on atomics, yielding the processor as they do,
// but not for long: a worker that has waited spinLimit rounds for a window
// parks on its channel, and the caller wakes it with a send; a caller that
// has waited spinLimit rounds for the workers to finish parks on done, and
// the last worker to finish wakes it. On a machine whose cores are busy
// with other work, the goroutine waited for may be off its core for a
// whole time slice of the operating system (milliseconds): an unbounded
// spin then burns that slice (it did: the benchmark's CPU per request was
// 1.4 to 1.7 times that of one worker with the machine loaded).
type stepper struct {
	c       *Cluster
	workers []*worker
	// window counts the windows handed out; a worker steps window k when
	// it sees window == k.
	window atomic.Uint64
	// busy counts the workers still stepping the current window.
	busy  atomic.Int32
	nodes []*simNode
	end   int64
	taken atomic.Int32
	// parked is set while the caller waits on done for the workers.
	parked atomic.Bool
	done   chan struct{}
	// spin is how many rounds the caller waits for the workers before it
	// parks (spinLimit; tests change it between windows).
	spin int
	// lastDone, if set, is called by the worker that finishes window
	// last, before it wakes a parked caller (woke false) and after it
	// did (woke true): tests delay that worker with it.
	lastDone func(window uint64, woke bool)
	// recovered holds what a worker recovered from a panic in a Node.
	mu        sync.Mutex
	recovered any
	quit      atomic.Bool
	wg        sync.WaitGroup
}

// worker is one goroutine of a stepper.
type worker struct {
	parked atomic.Bool
	wake   chan struct{}
}

// A waiting goroutine reads the atomics it waits on in a tight loop, and
// yields the processor every yieldEvery reads; it parks after spinLimit
// reads (some tens of microseconds).
const (
	yieldEvery = 64
	spinLimit  = 1 << 12
)

// newStepper starts workers goroutines that step c's nodes.
func newStepper(c *Cluster, workers int) *stepper {
	st := &stepper{c: c, done: make(chan struct{}, 1), spin: spinLimit}
	for range workers {
		w := &worker{wake: make(chan struct{}, 1)}
		st.workers = append(st.workers, w)
		st.wg.Go(func() { st.loop(w) })
	}
	return st
}

// loop steps each window handed out until the stepper stops.
func (st *stepper) loop(w *worker) {
	var seen uint64
	for {
		for spins := 1; st.window.Load() == seen && !st.quit.Load(); spins++ {
			if spins%yieldEvery == 0 {
				runtime.Gosched()
			}
			if spins < spinLimit {
				continue
			}
			w.parked.Store(true)
			if st.window.Load() == seen && !st.quit.Load() {
				<-w.wake // run or stop sends only after parked is cleared
			} else if !w.parked.CompareAndSwap(true, false) {
				<-w.wake // the caller cleared it first, and sends
			}
			spins = 0
		}
		if st.quit.Load() {
			return
		}
		seen = st.window.Load()
		if r := st.work(); r != nil {
			st.mu.Lock()
			if st.recovered == nil {
				st.recovered = r
			}
			st.mu.Unlock()
		}
		if st.busy.Add(-1) == 0 {
			if st.lastDone != nil {
				st.lastDone(seen, false)
			}
			if st.parked.CompareAndSwap(true, false) {
				st.done <- struct{}{}
				if st.lastDone != nil {
					st.lastDone(seen, true)
				}
			}
		}
	}
}

// run steps nodes up to instant end and returns when all are done. A panic
// in a Node under test, on any goroutine, panics here.
func (st *stepper) run(nodes []*simNode, end int64) {
	st.nodes, st.end = nodes, end
	st.taken.Store(0)
	st.busy.Store(int32(len(st.workers)))
	st.window.Add(1)
	for _, w := range st.workers {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	r := st.work()
	for spins := 1; st.busy.Load() > 0; spins++ {
		if spins%yieldEvery == 0 {
			runtime.Gosched()
		}
		if spins < st.spin {
			continue
		}
		st.parked.Store(true)
		if st.busy.Load() > 0 {
			<-st.done // the last worker sends only after parked is cleared
		} else if !st.parked.CompareAndSwap(true, false) {
			<-st.done // that worker cleared it first, and sends
		}
		// The wake may come from the last worker of the previous window,
		// which this caller saw finish (busy 0) before that worker cleared
		// parked: busy says whether this window is done.
		spins = 0
	}
	if r == nil {
		st.mu.Lock()
		r = st.recovered
		st.mu.Unlock()
	}
	if r != nil {
		panic(r)
	}
}

// work steps nodes until none is left, and returns what it recovered from
// a panic, if any.
func (st *stepper) work() (recovered any) {
	defer func() { recovered = recover() }()
	for {
		switch i := int(st.taken.Add(1)) - 1; {
		case i < len(st.nodes):
			st.c.stepNode(st.nodes[i], st.end)
		case i == len(st.nodes):
			st.c.reference()
		default:
			return nil
		}
	}
}

// stop ends the workers.
func (st *stepper) stop() {
	st.quit.Store(true)
	for _, w := range st.workers {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	st.wg.Wait()
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
