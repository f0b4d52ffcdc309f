package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/ring"
)

// Epoch returns the instant virtual time starts from: what the nodes see as
// the time at the start of a run.
func Epoch() time.Time { return time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC) }

// The streams of the seeded generators: each concern draws from its own, so
// the arrivals are the same whatever the mode does to the network. Node i
// draws the fate of the messages it sends from stream streamNetwork+i<<8,
// so that nodes can run at once (step.go) and still draw in a fixed order.
const (
	streamArrivals = 1
	streamNetwork  = 2
	streamMembers  = 3
	streamOrder    = 4
)

// Variant is what a comparison varies between runs of one scenario.
type Variant struct {
	// Mode is the nodes' default consistency mode (every simulated request
	// asks for the default).
	Mode check.Mode
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
	// means runtime.GOMAXPROCS(0). Simulations share nothing, so the
	// results do not depend on it.
	Parallel int
	// Workers is the number of goroutines one simulation runs its nodes on
	// (the nodes of a simulated cluster run at once between the instants
	// they can affect each other: see step.go). Zero or less means
	// runtime.GOMAXPROCS(0) shared out among the simulations that run at
	// once. The results do not depend on it: one worker or many give the
	// same Result, byte for byte.
	Workers int
	// Interleave, when positive, lets a node's inputs that production can
	// receive in either order do so: a client request and a queued event
	// (a tick, a message, an unreachable report, a membership change) due
	// within Interleave of each other are applied in a seeded random order,
	// as a real node's driver takes them from different goroutines. Each is
	// applied at its own instant or later (the core never sees time go
	// back), and the events of one link keep their order, as on a gRPC
	// stream. Zero applies them in time order, queued events first at one
	// instant. The same seed still gives the same Result.
	Interleave time.Duration
}

// Cluster is one simulated cluster running one scenario under one variant:
// the real rlsync.Node of each member, driven by a virtual clock, a
// simulated network and simulated clients, next to an ideal limiter that
// sees the same requests. It runs on the caller's goroutine, which hands
// windows of node events to its workers (step.go); it is not safe for
// concurrent use. Distinct Clusters are independent.
type Cluster struct {
	sc      Scenario
	v       Variant
	epoch   time.Time
	seed    uint64
	limit   bucket.Limit
	ringCfg ring.Config
	// now is the virtual time of the cluster's own events (see step.go), in
	// nanoseconds since Epoch; end the end of the traffic; stop the latest
	// instant the run drains to.
	now, end, stop int64
	tick           int64
	// interleave is Options.Interleave, in nanoseconds.
	interleave int64
	// q holds the cluster's own events; each node has its queue.
	q queue
	// nextArrival is the instant of the next client request, or -1 when the
	// traffic has ended.
	nextArrival int64
	// lookahead is the shortest delay of a message between nodes: the
	// nodes run the events of a window this long independently (step.go).
	lookahead int64
	// workers is how many goroutines step the nodes of a window; steps
	// runs them when there is more than one.
	workers int
	steps   *stepper
	// minParallel is the fewest requests of a window run on the workers
	// (the constant minParallel; tests lower it).
	minParallel int
	// sizeCheck is how often a node checks the size of what it sends
	// (the constant sizeCheck; tests set 1).
	sizeCheck int64
	due       []*simNode // the nodes with events in the current window
	refs      []arrival  // the arrivals of the window, for the ideal limiter
	// parallelWindows counts the windows whose nodes ran at once.
	parallelWindows int64

	rngArr, rngMem *rand.Rand

	nodes  []*simNode
	byName map[string]int32
	net    *network
	wl     *workload
	met    *metrics
	acts   []actionState

	// adm, when set (the fault checker's runs), logs every admission with
	// its instant, per key (envelope.go).
	adm *admissionLog
	// tr, when set, writes one key's story (trace.go, SetTrace).
	tr *tracer

	requests int64
	progress func(Progress)
	err      error
}

// pending is a client request handed to a Node and not yet answered. Its
// slices and its done callback are made once and reused.
type pending struct {
	at    int64 // the instant it arrives
	node  int32
	gen   uint32
	key   int32
	win   int32
	hits  int64
	busy  bool
	reqs  []check.Request
	resps []check.Response
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
		end: int64(sc.Duration), tick: int64(cfg.TickInterval), workers: 1, minParallel: minParallel,
		sizeCheck: sizeCheck,
		rngArr:    rand.New(rand.NewPCG(seed, streamArrivals)),
		rngMem:    rand.New(rand.NewPCG(seed, streamMembers)),
		byName:    make(map[string]int32),
	}
	c.stop = c.end + 2*int64(time.Second) + 2*int64(cfg.RequestTimeout)
	windows := int((sc.Duration + sc.Window - 1) / sc.Window)
	c.met = newMetrics(windows, int64(sc.Window), sc.Workload.Keys)
	c.net = newNetwork(sc.Network)
	c.lookahead = c.net.minLatency()
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
	c.nextArrival = c.wl.start()
	if c.nextArrival >= c.end {
		c.nextArrival = -1
	}
	return c, nil
}

// SetInterleave sets the window within which a node applies its client
// requests and its queued events in a seeded random order (see
// Options.Interleave). Call it before Run.
func (c *Cluster) SetInterleave(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: interleave %v must not be negative", ErrScenario, d)
	}
	c.interleave = int64(d)
	for i, s := range c.nodes {
		s.order = rand.New(rand.NewPCG(c.seed, streamOrder+uint64(i)<<8))
	}
	return nil
}

// Reordered returns how many of the nodes' inputs the interleave window
// applied out of time order so far (see Options.Interleave).
func (c *Cluster) Reordered() int64 {
	var n int64
	for _, s := range c.nodes {
		n += s.reordered
	}
	return n
}

// time returns the cluster's virtual time as a time.Time.
func (c *Cluster) time() time.Time { return c.at(c.now) }

// clockOf returns the instant t nanoseconds after the epoch on node s's
// clock, which a "clock" event may have set apart from the simulation's.
func (c *Cluster) clockOf(s *simNode, t int64) time.Time { return c.at(t + s.skew) }

// at returns the instant t nanoseconds after the epoch.
func (c *Cluster) at(t int64) time.Time { return c.epoch.Add(time.Duration(t)) }

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
	for _, s := range c.nodes {
		c.loseRequests(s)
	}
	return c.result(), nil
}

// dispatch fires one of the cluster's own events, at c.now.
func (c *Cluster) dispatch(e *event) {
	switch e.kind {
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

// arrive draws the client requests that arrive before instant until and
// has the load balancer hand each to a node, which will see it in its turn
// (stepNode). The ideal limiter decides them later, apart (reference).
func (c *Cluster) arrive(until int64) {
	for c.nextArrival >= 0 && c.nextArrival < until {
		at := c.nextArrival
		a := c.wl.take()
		node := c.wl.node(c.nodes, a.u)
		w := c.met.win(at)
		c.refs = append(c.refs, arrival{at: at, key: int32(a.key), win: int32(w), hits: a.hits})
		c.requests++
		if node < 0 {
			c.met.w[w].unserved++
		} else {
			s := c.nodes[node]
			p := s.acquire()
			p.at, p.node, p.gen, p.key, p.win, p.hits = at, int32(node), s.gen, int32(a.key), int32(w), a.hits
			p.reqs[0] = check.Request{Key: c.wl.keyName(a.key), Hits: a.hits, Limit: c.limit}
			s.arrivals = append(s.arrivals, p)
		}
		c.nextArrival = a.next
		if a.next >= c.end {
			c.nextArrival = -1
		}
	}
}

// arrival is a client request of the current window, as the ideal limiter
// sees it.
type arrival struct {
	at       int64
	key, win int32
	hits     int64
}

// reference has the ideal limiter decide the arrivals of the window, in
// arrival order, and counts them. It touches the metrics of arrivals and
// of keys, which nothing else touches while the nodes run, so it runs
// beside them (stepNodes).
func (c *Cluster) reference() {
	for i := range c.refs {
		a := &c.refs[i]
		ks := &c.met.keys[a.key]
		now := c.at(a.at)
		b := ks.ref
		if b == nil {
			b, _ = bucket.NewIn(&ks.sp, c.limit, now) // the limit was validated
			ks.ref = b
		}
		d, err := b.Take(now, a.hits)
		if err != nil {
			c.met.refErrors++
		}
		c.met.arrival(int(a.win), int(a.key), a.hits, err == nil && d.Allowed)
	}
	c.refs = c.refs[:0]
}

// result assembles the Result from the measurements.
func (c *Cluster) result() *Result {
	m := c.met
	var anomalies int64
	for _, s := range c.nodes {
		for w, t := range s.traffic {
			m.w[w].messages += t.messages
			m.w[w].bytes += t.bytes
		}
		m.viewChanges += s.viewChanges
		anomalies += s.anomalies
	}
	m.finish()
	cfg, _ := c.sc.Sync.Config("n1", c.v.Mode, c.v.Flush)
	r := &Result{
		Scenario: c.sc.Name, Description: c.sc.Description, Mode: c.v.Mode.String(), Flush: Duration(cfg.FlushInterval), Seed: c.seed,
		Nodes: c.sc.Nodes, Duration: c.sc.Duration, Window: c.sc.Window, Limit: describeLimit(c.limit),
		LimitRate:   float64(c.limit.Limit) / c.limit.Period.Seconds(),
		ViewChanges: m.viewChanges, ReferenceErrors: m.refErrors, Anomalies: anomalies,
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
