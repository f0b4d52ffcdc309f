package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ringlimit/ringlimit/ring"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// nodeState is where a simulated node is in its life.
type nodeState uint8

const (
	// stateDown: not running; messages to it are refused.
	stateDown nodeState = iota
	// stateUp: running, serving clients, a member.
	stateUp
	// stateLeaving: Leave was called; it hands off its keys, serves no
	// clients, and is still a member.
	stateLeaving
	// stateDeparted: hand-off done and leave announced; it still runs
	// (answers messages) until it goes down a moment later.
	stateDeparted
)

// simNode is one node of the simulated cluster, across its restarts.
type simNode struct {
	idx   int32
	name  string
	state nodeState
	// gen counts starts and stops, so that events scheduled for an earlier
	// incarnation (ticks, deliveries, reports) are recognised and dropped.
	gen uint32
	n   *rlsync.Node
	// weight is the node's share of the load balancer.
	weight float64
	// graceful is set when the node last went away by a graceful leave.
	graceful bool
	// leaveAt is when the current Leave started.
	leaveAt int64
	// restartAfter is how long after going down the node starts again; -1
	// keeps it down.
	restartAfter int64
	// skew is added to the simulation's time on this node's clock (ns; a
	// "clock" event).
	skew int64

	// Membership as this node sees it, by subject index: believed is its
	// view, target what the view will become once gossip arrives, and
	// pairGen a generation that invalidates scheduled view changes.
	believed, target []bool
	pairGen          []uint32
	// heardLeave, by subject index, is set when this node heard that
	// subject's last graceful leave: it could reach the leaver, directly or
	// through a third member, when the leave was announced (or it started
	// after it, and its seed told it). One that could not sees the leaver
	// fail instead, as memberlist reports a member whose leave never
	// reached it (its leaving metadata unseen: peer's NotifyLeave).
	heardLeave []bool

	// nodeRun is what the node touches while the nodes of a window run.
	nodeRun
}

func (s *simNode) running() bool { return s.state != stateDown }
func (s *simNode) present() bool { return s.state == stateUp || s.state == stateLeaving }
func (s *simNode) serving() bool { return s.state == stateUp }

// addNode appends a new node, down, and returns its index.
func (c *Cluster) addNode(weight float64) int32 {
	i := int32(len(c.nodes))
	s := &simNode{idx: i, name: nodeName(int(i)), weight: weight, restartAfter: -1}
	s.rng = rand.New(rand.NewPCG(c.seed, streamNetwork+uint64(i)<<8))
	if c.interleave > 0 {
		s.order = rand.New(rand.NewPCG(c.seed, streamOrder+uint64(i)<<8))
	}
	s.traffic = make([]traffic, len(c.met.w))
	c.nodes = append(c.nodes, s)
	c.byName[s.name] = i
	c.net.grow(len(c.nodes))
	c.met.grow(len(c.nodes), s.name)
	for _, o := range c.nodes {
		for len(o.believed) < len(c.nodes) {
			o.believed = append(o.believed, false)
			o.target = append(o.target, false)
			o.pairGen = append(o.pairGen, 0)
			o.heardLeave = append(o.heardLeave, false)
		}
	}
	c.wl.reweigh(c.nodes)
	return i
}

// startNode starts node i with a new incarnation. Its view is the current
// truth (a joining node learns the membership from its seed before it
// serves); the others learn of it through gossip.
func (c *Cluster) startNode(i int32) error {
	s := c.nodes[i]
	cfg, err := c.sc.Sync.Config(s.name, c.v.Mode, c.v.Flush)
	if err != nil {
		return err
	}
	// A later life of a node has a greater incarnation, as with the start
	// time in nanoseconds a real node's driver passes (node.go): peers
	// tell a restart from a stray message of an earlier life by it
	// (sync's Step: resendHandoffs, peerRestarted). Before, a random draw:
	// half the restarts had a smaller incarnation, which peers took for
	// the old life's, and a restarted owner was not sent the hand-offs it
	// had missed while down (leased seed 235: n3 decided a key on a fresh
	// bucket until n2's hand-off came by its retry). The life's number
	// takes the top 8 bits, so this holds for 256 lives (128 restarts, far
	// beyond a schedule's); past them the simulation stops with an error
	// rather than break it.
	if s.gen >= 1<<8 {
		return fmt.Errorf("sim: %s started a 257th life: its incarnation would not grow", s.name)
	}
	cfg.Incarnation = uint64(s.gen)<<56 | c.rngMem.Uint64()>>8
	cfg.Admitted = func(key string, hits int64, at time.Time) { c.admitted(s, key, hits, at) }
	// A node started after the cluster's first nodes (a restart, or a
	// join through seeds) starts into a cluster that ran before it.
	cfg.Joining = s.gen > 0 || c.now > 0
	s.gen++
	s.now = c.now
	n, err := rlsync.NewNode(cfg, &endpoint{c: c, idx: i, gen: s.gen})
	if err != nil {
		return fmt.Errorf("sim: starting %s: %w", s.name, err)
	}
	s.n, s.state, s.graceful, s.restartAfter = n, stateUp, false, -1
	for j, o := range c.nodes {
		a := c.actual(int(i), j)
		s.believed[j], s.target[j] = a, a
		s.pairGen[j]++
		s.heardLeave[j] = o.graceful // its seed tells it who left
	}
	s.n.SetMembership(c.clockOf(s, c.now), c.view(s), c.failedView(s))
	c.traceNode(s, c.now, "start")
	ev := s.q.newEvent()
	ev.at, ev.kind, ev.a, ev.gen = c.now+c.rngMem.Int64N(c.tick), evTick, i, s.gen
	s.q.push(ev)
	c.reviewMembership()
	return nil
}

// stopNode takes node i down: its pending client requests are lost, its
// in-flight messages are dropped on arrival.
func (c *Cluster) stopNode(i int32) {
	s := c.nodes[i]
	if !s.running() {
		return
	}
	s.state, s.n = stateDown, nil
	c.traceNode(s, c.now, "stop")
	s.gen++
	c.loseRequests(s)
	c.reviewMembership()
	if s.restartAfter >= 0 {
		ev := c.q.newEvent()
		ev.at, ev.kind, ev.a = c.now+s.restartAfter, evStart, i
		c.q.push(ev)
	}
}

// leaveNode starts a graceful leave of node i: the load balancer stops
// sending to it and the Node hands off its keys.
func (c *Cluster) leaveNode(i int32) {
	s := c.nodes[i]
	if !s.serving() {
		return
	}
	s.state, s.leaveAt, s.now = stateLeaving, c.now, c.now
	s.n.Leave(c.clockOf(s, c.now))
	c.traceNode(s, c.now, "leave")
	c.checkLeave(s)
}

// checkLeave finishes a leave once the hand-off is done (or has taken too
// long): the leave is announced and the node goes down shortly after, long
// enough for the announcement to reach every member.
func (c *Cluster) checkLeave(s *simNode) {
	if s.state != stateLeaving || (!s.n.HandedOff() && c.now-s.leaveAt < int64(c.sc.Membership.LeaveTimeout)) {
		return
	}
	for _, o := range c.nodes {
		if o.running() {
			o.heardLeave[s.idx] = c.actual(int(o.idx), int(s.idx))
		}
	}
	s.state, s.graceful = stateDeparted, true
	c.reviewMembership()
	m := c.sc.Membership
	ev := c.q.newEvent()
	ev.at, ev.kind, ev.a, ev.gen = c.now+int64(m.Notify+max(0, m.Spread)), evDown, s.idx, s.gen
	c.q.push(ev)
}

// connected2 reports whether i and j reach each other directly both ways.
func (c *Cluster) connected2(i, j int) bool {
	return c.net.connected(i, j) && c.net.connected(j, i)
}

// actual reports whether j is, right now, a member that i would see once
// gossip converges: j is present and i can probe it, directly or through a
// third member (memberlist's indirect probes), unless views are static.
func (c *Cluster) actual(i, j int) bool {
	if i == j {
		return true
	}
	if !c.nodes[j].present() {
		return false
	}
	if c.sc.Membership.Static || c.connected2(i, j) {
		return true
	}
	for k, o := range c.nodes {
		if k != i && k != j && o.present() && c.connected2(i, k) && c.connected2(k, j) {
			return true
		}
	}
	return false
}

// reviewMembership compares every running node's target view with the truth
// and schedules the gossip that will bring its view there: a join, a
// graceful leave or a healed link after Notify, a crash or a cut after
// Detect, each plus a random Spread.
func (c *Cluster) reviewMembership() {
	m := c.sc.Membership
	for i, s := range c.nodes {
		if !s.running() {
			continue
		}
		for j, o := range c.nodes {
			a := c.actual(i, j)
			if a == s.target[j] {
				continue
			}
			s.target[j] = a
			s.pairGen[j]++
			d := int64(m.Notify)
			if !a && !s.left(o) {
				d = int64(m.Detect)
			}
			if m.Spread > 0 {
				d += c.rngMem.Int64N(int64(m.Spread))
			}
			ev := s.q.newEvent()
			ev.at, ev.kind, ev.a, ev.b, ev.gen = c.now+d, evView, int32(i), int32(j), s.pairGen[j]
			s.q.push(ev)
		}
	}
}

// viewChange applies a gossip-delivered change of one member in one view.
func (c *Cluster) viewChange(s *simNode, ev *event) {
	if !s.running() || s.pairGen[ev.b] != ev.gen || s.believed[ev.b] == s.target[ev.b] {
		return
	}
	s.believed[ev.b] = s.target[ev.b]
	s.viewChanges++
	s.n.SetMembership(c.clockOf(s, s.now), c.view(s), c.failedView(s))
	c.traceNode(s, s.now, "view")
}

// left reports whether o is gone by a graceful leave that s heard of
// (heardLeave): s then sees it leave, not fail.
func (s *simNode) left(o *simNode) bool {
	return o.graceful && !o.present() && s.heardLeave[o.idx]
}

// view returns the members s believes in, itself included.
func (c *Cluster) view(s *simNode) []string {
	var v []string
	for j, b := range s.believed {
		if b || j == int(s.idx) {
			v = append(v, c.nodes[j].name)
		}
	}
	return v
}

// failedView returns the nodes s does not believe in that did not leave
// gracefully as far as s heard (left): crashed, out of its reach (a cut),
// or gone by a leave announced while s could not reach them. The Node
// keeps those it had seen in its quorum baseline; a graceful leave it
// heard of is not a failure.
func (c *Cluster) failedView(s *simNode) []string {
	var f []string
	for j, b := range s.believed {
		if o := c.nodes[j]; !b && j != int(s.idx) && !s.left(o) {
			f = append(f, o.name)
		}
	}
	return f
}

// owner returns the index of the node that owns key 0 on the ring of the
// members present now, or -1.
func (c *Cluster) owner() int32 {
	var names []string
	for _, s := range c.nodes {
		if s.present() {
			names = append(names, s.name)
		}
	}
	r, err := ring.New(c.ringCfg, names...)
	if err != nil {
		return -1
	}
	o, err := r.Owner(c.wl.keyName(0))
	if err != nil {
		return -1
	}
	return c.byName[o]
}

// pick resolves a node selector to a node index, or -1.
func (c *Cluster) pick(sel string) int32 {
	switch sel {
	case "owner":
		return c.owner()
	case "random":
		var up []int32
		for _, s := range c.nodes {
			if s.present() {
				up = append(up, s.idx)
			}
		}
		if len(up) == 0 {
			return -1
		}
		return up[c.rngMem.IntN(len(up))]
	}
	if i, ok := c.byName[sel]; ok {
		return i
	}
	return -1
}
