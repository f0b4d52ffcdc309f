package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/ring"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Epoch returns the instant virtual time starts from: what the nodes see as
// the time at the start of a run.
func Epoch() time.Time { return time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC) }

// The streams of the seeded generators: each concern draws from its own, so
// the arrivals are the same whatever the mode does to the network.
const (
	streamArrivals = 1
	streamNetwork  = 2
	streamMembers  = 3
)

// Variant is what a comparison varies between runs of one scenario.
type Variant struct {
	// Mode is the nodes' default consistency mode (every simulated request
	// asks for the default).
	Mode rlsync.Mode
	// Flush is the flush interval; zero keeps the scenario's (or the
	// default of rlsync.DefaultConfig).
	Flush time.Duration
}

// String returns "mode" or "mode/flush".
func (v Variant) String() string {
	if v.Flush == 0 {
		return v.Mode.String()
	}
	return v.Mode.String() + "/" + v.Flush.String()
}

// Progress reports how far a run has got. It is passed to Options.Progress
// once per simulated second.
type Progress struct {
	// Scenario and Variant identify the run.
	Scenario string
	Variant  Variant
	// Now is the simulated time reached, Duration the simulated time of the
	// whole run.
	Now, Duration time.Duration
	// Requests counts the client requests simulated so far.
	Requests int64
}

// Options tunes a run without changing what it simulates.
type Options struct {
	// Seed seeds every random choice: the same scenario, variant and seed
	// give the same Result, byte for byte.
	Seed uint64
	// Progress, if set, is called once per simulated second, from the
	// goroutine of the run. It must not block for long. Compare, running
	// several simulations at once, calls it from each of their goroutines:
	// it must then be safe for concurrent use.
	Progress func(Progress)
	// Parallel is the number of simulations Compare runs at once; zero
	// means runtime.GOMAXPROCS(0). Each simulation runs on one goroutine
	// and shares nothing with the others, so the results do not depend on
	// it.
	Parallel int
}

// Cluster is one simulated cluster running one scenario under one variant:
// the real rlsync.Node of each member, driven by a virtual clock, a
// simulated network and simulated clients, next to an ideal limiter that
// sees the same requests. It runs on the caller's goroutine and is not safe
// for concurrent use; distinct Clusters are independent.
type Cluster struct {
	sc      Scenario
	v       Variant
	epoch   time.Time
	seed    uint64
	limit   bucket.Limit
	ringCfg ring.Config
	// now is the virtual time, in nanoseconds since Epoch; end the end of
	// the traffic; stop the latest instant the run drains to.
	now, end, stop int64
	tick           int64
	q              queue

	rngArr, rngNet, rngMem *rand.Rand

	nodes  []*simNode
	byName map[string]int32
	net    *network
	wl     *workload
	met    *metrics
	acts   []actionState

	// pend holds every pending-request record; free those not in use.
	pend, free []*pending
	busy       int
	requests   int64
	anomalies  int64
	progress   func(Progress)
	err        error
}

// pending is a client request handed to a Node and not yet answered. Its
// slices and its done callback are made once and reused.
type pending struct {
	node  int32
	gen   uint32
	key   int32
	win   int32
	hits  int64
	busy  bool
	reqs  []rlsync.Request
	resps []rlsync.Response
	done  func()
}

// NewCluster returns a cluster for sc (with its defaults filled in) under
// v, seeded with seed. It starts the initial nodes at virtual time zero.
func NewCluster(sc Scenario, v Variant, seed uint64) (*Cluster, error) {
	sc = sc.WithDefaults()
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	cfg, err := sc.Sync.Config("n1", v.Mode, v.Flush)
	if err != nil {
		return nil, fmt.Errorf("%w %q: variant %v: %w", ErrScenario, sc.Name, v, err)
	}
	limit, _ := sc.Limit.Bucket()
	c := &Cluster{
		sc: sc, v: v, seed: seed, limit: limit, ringCfg: cfg.Ring, epoch: Epoch(),
		end: int64(sc.Duration), tick: int64(cfg.TickInterval),
		rngArr: rand.New(rand.NewPCG(seed, streamArrivals)),
		rngNet: rand.New(rand.NewPCG(seed, streamNetwork)),
		rngMem: rand.New(rand.NewPCG(seed, streamMembers)),
		byName: make(map[string]int32),
	}
	c.stop = c.end + 2*int64(time.Second) + 2*int64(cfg.RequestTimeout)
	windows := int((sc.Duration + sc.Window - 1) / sc.Window)
	c.met = newMetrics(windows, int64(sc.Window), sc.Workload.Keys)
	c.net = newNetwork(sc.Network, c.rngNet)
	c.wl = newWorkload(sc.Workload, c.rngArr)
	for i := range sc.Nodes {
		c.addNode(c.wl.weight(i))
	}
	for _, s := range c.nodes {
		s.state = stateUp // present from the start: every view is complete
	}
	for i := range c.nodes {
		if err := c.startNode(int32(i)); err != nil {
			return nil, err
		}
	}
	c.scheduleActions()
	ev := c.q.newEvent()
	ev.at, ev.kind = c.wl.start(), evArrival
	c.q.push(ev)
	for i := range lookahead {
		c.prefetchFar(c.wl.peek(i).key)
		c.prefetchNear(c.wl.peek(i).key)
	}
	return c, nil
}

// time returns the virtual time as a time.Time.
func (c *Cluster) time() time.Time { return c.epoch.Add(time.Duration(c.now)) }

// Run runs the scenario to its end, and then until every request handed to
// a node is answered (or a few seconds more at most), and returns the
// measurements. progress, if not nil, is called once per simulated second.
func (c *Cluster) Run(progress func(Progress)) (*Result, error) {
	c.progress = progress
	if progress != nil {
		ev := c.q.newEvent()
		ev.at, ev.kind = int64(time.Second), evProgress
		c.q.push(ev)
	}
	c.runUntil(c.stop)
	if c.err != nil {
		return nil, fmt.Errorf("sim: scenario %q, %v, seed %d: %w", c.sc.Name, c.v, c.seed, c.err)
	}
	for _, p := range c.pend {
		if p.busy {
			c.met.w[p.win].lost++
			c.release(p)
		}
	}
	return c.result(), nil
}

// runUntil fires events up to instant until, or until the traffic has
// ended and no request is pending, or an error.
func (c *Cluster) runUntil(until int64) {
	for c.err == nil {
		at, ok := c.q.peek()
		if !ok || at > until || (at > c.end && c.busy == 0) {
			return
		}
		e := c.q.pop()
		c.now = e.at
		c.dispatch(e)
		c.q.recycle(e)
	}
}

// dispatch fires one event.
func (c *Cluster) dispatch(e *event) {
	switch e.kind {
	case evArrival:
		c.arrive()
	case evTick:
		s := c.nodes[e.a]
		if s.gen != e.gen || !s.running() {
			return
		}
		s.n.Tick(c.time())
		if s.state == stateLeaving {
			c.checkLeave(s)
		}
		if s.gen == e.gen {
			ev := c.q.newEvent()
			ev.at, ev.kind, ev.a, ev.gen = e.at+c.tick, evTick, e.a, e.gen
			c.q.push(ev)
		}
	case evDeliver:
		c.deliver(e)
	case evUnreachable:
		c.unreachable(e)
	case evView:
		c.viewChange(e)
	case evAction:
		if err := c.act(e.idx, e.gen); err != nil {
			c.err = err
		}
	case evStart:
		i := e.a
		if i < 0 {
			i = c.addNode(1)
		}
		if !c.nodes[i].running() {
			if err := c.startNode(i); err != nil {
				c.err = err
			}
		}
	case evDown:
		if s := c.nodes[e.a]; s.gen == e.gen {
			c.stopNode(e.a)
		}
	case evProgress:
		c.progress(Progress{Scenario: c.sc.Name, Variant: c.v, Now: time.Duration(c.now),
			Duration: time.Duration(c.end), Requests: c.requests})
		if next := e.at + int64(time.Second); next <= c.end {
			ev := c.q.newEvent()
			ev.at, ev.kind = next, evProgress
			c.q.push(ev)
		}
	}
}

// arrive simulates one client request: the ideal limiter decides it at
// once, the load balancer hands it to a node, and the next arrival is
// scheduled.
func (c *Cluster) arrive() {
	a := c.wl.take()
	c.prefetchFar(c.wl.peek(lookahead - 1).key)
	c.prefetchNear(c.wl.peek(lookahead / 2).key)
	key, hits := a.key, a.hits
	ks, name := &c.met.keys[key], c.wl.keys[key]
	node := c.wl.node(c.nodes, a.u)
	w := c.met.win(c.now)
	now := c.time()
	b := ks.ref
	if b == nil {
		b, _ = bucket.New(c.limit, now) // the limit was validated
		ks.ref = b
	}
	d, err := b.Take(now, hits)
	if err != nil {
		c.met.refErrors++
	}
	c.met.arrival(w, key, hits, err == nil && d.Allowed)
	c.requests++
	if node < 0 {
		c.met.w[w].unserved++
	} else {
		p := c.acquire()
		p.node, p.gen, p.key, p.win, p.hits = int32(node), c.nodes[node].gen, int32(key), int32(w), hits
		p.reqs[0] = rlsync.Request{Key: name, Hits: hits, Limit: c.limit}
		c.nodes[node].n.Check(now, p.reqs, p.resps, p.done)
	}
	if t := a.next; t < c.end {
		ev := c.q.newEvent()
		ev.at, ev.kind = t, evArrival
		c.q.push(ev)
	}
}

// With a uniform choice among 100,000 keys or more, nearly every arrival
// is of a key whose memory has left the caches since its last arrival: its
// netting slots and reference bucket, its name (which the node hashes and
// compares) and the slice entry that points to the name. Each is read after
// the one that points to it, so without help every arrival waits for a
// chain of cache misses. The workload draws its arrivals lookahead ahead
// (workload.take), and the simulator prefetches their memory in two steps:
// the arrival lookahead-1 ahead, the lines whose addresses it can compute
// (prefetchFar); the one lookahead/2 ahead, the lines those point to, now
// in the cache (prefetchNear). Prefetching changes no result.

// prefetchFar prefetches key's netting slots and the slice entry of its name.
func (c *Cluster) prefetchFar(key int) {
	prefetch(unsafe.Pointer(&c.met.keys[key]))
	prefetch(unsafe.Pointer(&c.wl.keys[key]))
}

// prefetchNear prefetches key's reference bucket and the bytes of its name.
func (c *Cluster) prefetchNear(key int) {
	if b := c.met.keys[key].ref; b != nil {
		// The second word of an interface value points to its data.
		prefetch((*[2]unsafe.Pointer)(unsafe.Pointer(&b))[1])
	}
	prefetch(unsafe.Pointer(unsafe.StringData(c.wl.keys[key])))
}

// acquire returns a free pending record, marked busy.
func (c *Cluster) acquire() *pending {
	var p *pending
	if n := len(c.free); n > 0 {
		p = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		c.growPending()
		n := len(c.free)
		p = c.free[n-1]
		c.free = c.free[:n-1]
	}
	p.busy = true
	c.busy++
	return p
}

// pendingChunk is how many pending records growPending makes at once.
const pendingChunk = 64

// growPending adds pendingChunk free records, made from three slabs (the
// records, their requests, their responses) rather than three allocations
// each.
func (c *Cluster) growPending() {
	ps := make([]pending, pendingChunk)
	reqs := make([]rlsync.Request, pendingChunk)
	resps := make([]rlsync.Response, pendingChunk)
	for i := range ps {
		p := &ps[i]
		p.reqs, p.resps = reqs[i:i+1:i+1], resps[i:i+1:i+1]
		p.done = func() { c.decided(p) }
		c.pend = append(c.pend, p)
	}
	// Free in reverse, so that records are handed out in the order made.
	for i := len(ps) - 1; i >= 0; i-- {
		c.free = append(c.free, &ps[i])
	}
}

// release returns p to the free list.
func (c *Cluster) release(p *pending) {
	p.busy = false
	p.reqs[0], p.resps[0] = rlsync.Request{}, rlsync.Response{}
	c.busy--
	c.free = append(c.free, p)
}

// decided is the done callback of a request: it records the node's answer.
// A second call for one request is an anomaly of the Node under test.
func (c *Cluster) decided(p *pending) {
	if !p.busy {
		c.anomalies++
		return
	}
	c.met.decided(int(p.win), int(p.key), int(p.node), p.hits, &p.resps[0])
	c.release(p)
}

// loseRequests counts the requests pending at node i as lost: it went down
// and will never answer them.
func (c *Cluster) loseRequests(i int32) {
	for _, p := range c.pend {
		if p.busy && p.node == i {
			c.met.w[p.win].lost++
			c.release(p)
		}
	}
}

// result assembles the Result from the measurements.
func (c *Cluster) result() *Result {
	m := c.met
	m.finish()
	cfg, _ := c.sc.Sync.Config("n1", c.v.Mode, c.v.Flush)
	r := &Result{
		Scenario: c.sc.Name, Mode: c.v.Mode.String(), Flush: Duration(cfg.FlushInterval), Seed: c.seed,
		Nodes: c.sc.Nodes, Duration: c.sc.Duration, Window: c.sc.Window, Limit: describeLimit(c.limit),
		LimitRate:   float64(c.limit.Limit) / c.limit.Period.Seconds(),
		ViewChanges: m.viewChanges, ReferenceErrors: m.refErrors, Anomalies: c.anomalies,
	}
	r.Phases = append(r.Phases, m.phase("all", 0, c.end))
	if iv, ok := c.sc.Disruption(); ok {
		r.Disruption = &iv
		for _, p := range []PhaseStats{
			m.phase("before", 0, int64(iv.Start)),
			m.phase("during", int64(iv.Start), int64(iv.End)),
			m.phase("after", int64(iv.End), c.end),
		} {
			if p.Requests > 0 {
				r.Phases = append(r.Phases, p)
			}
		}
		after, conv, ok := m.convergence(int64(iv.End), c.end, c.sc.Tolerance)
		if ok {
			d := Duration(after)
			r.Convergence, r.Converged = &d, conv
		}
	}
	s := &r.Series
	for _, ws := range m.w {
		s.Admitted = append(s.Admitted, ws.admitted)
		s.Ideal = append(s.Ideal, ws.ideal)
		s.HotRequested = append(s.HotRequested, ws.hotHits)
		s.HotAdmitted = append(s.HotAdmitted, ws.hotAdm)
		s.HotIdeal = append(s.HotIdeal, ws.hotIdeal)
	}
	s.Nodes, s.HotByNode = m.names, m.nodeHot
	return r
}

// describeLimit renders a limit as "token_bucket 500/1s burst 500".
func describeLimit(l bucket.Limit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %d/%v", l.Algorithm, l.Limit, l.Period)
	if l.Burst != 0 {
		fmt.Fprintf(&b, " burst %d", l.Burst)
	}
	return b.String()
}
