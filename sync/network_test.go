package sync

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// t0 is the first instant of every test.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testNet is a synchronous in-memory network of Nodes on a virtual clock,
// in the manner of etcd raft's test network: messages are queued with a
// delivery time (now + latency) and delivered by deliver or run; links can
// be cut one way, nodes isolated, messages dropped by a filter.
type testNet struct {
	t       testing.TB
	now     time.Time
	nodes   map[string]*Node
	names   []string
	latency time.Duration
	queue   []*netMsg
	seq     int
	// cut blocks messages from [0] to [1]; drop, when set, drops the
	// messages it returns true for.
	cut  map[[2]string]bool
	drop func(from, to string, env *peerv1.Envelope) bool
	// jitter, when set, adds to each message's latency a random delay below
	// maxJitter; a link stays one ordered queue (last holds its latest
	// delivery time), as the gRPC transport's are.
	jitter    *rand.Rand
	maxJitter time.Duration
	last      map[[2]string]time.Time
	// sent counts messages by body type; bytes their encoded size.
	sent    map[string]int
	bytes   int
	dropped int
	// skew is added to the network's time on each node's clock (see
	// nowOf): nil or missing, the node's clock is the network's.
	skew map[string]time.Duration
}

// cutBetween cuts every link between a member of a and a member of b, both
// ways: a silent partition (nothing is delivered, nothing is reported).
func (nw *testNet) cutBetween(a, b []string) {
	for _, m := range a {
		for _, o := range b {
			nw.cut[[2]string{m, o}] = true
			nw.cut[[2]string{o, m}] = true
		}
	}
}

// nowOf returns the network's time on node name's clock.
func (nw *testNet) nowOf(name string) time.Time { return nw.now.Add(nw.skew[name]) }

type netMsg struct {
	at   time.Time
	seq  int
	from string
	to   string
	env  *peerv1.Envelope
}

// netTransport is one node's Transport on a testNet.
type netTransport struct {
	net  *testNet
	from string
}

// Send implements Transport.
func (t *netTransport) Send(to string, env *peerv1.Envelope) { t.net.send(t.from, to, env) }

// newTestNet returns a network of nodes named names, all members, at t0.
// tweak, if not nil, adjusts each node's Config.
func newTestNet(t testing.TB, tweak func(*Config), names ...string) *testNet {
	t.Helper()
	nw := &testNet{
		t: t, now: t0, nodes: map[string]*Node{}, names: names,
		latency: time.Millisecond, cut: map[[2]string]bool{}, sent: map[string]int{},
	}
	for _, name := range names {
		nw.add(name, tweak)
	}
	for _, name := range names {
		nw.nodes[name].SetMembers(nw.now, names)
	}
	return nw
}

// add starts a node named name (not yet a member of anyone's view).
func (nw *testNet) add(name string, tweak func(*Config)) *Node {
	cfg := DefaultConfig()
	cfg.Self = name
	cfg.Incarnation = uint64(nw.now.UnixNano())
	cfg.HandoffWait = 0 // TestJoinedOwnerAsksPreviousOwnerFirst covers the wait
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := NewNode(cfg, &netTransport{net: nw, from: name})
	if err != nil {
		nw.t.Fatalf("NewNode(%s): %v", name, err)
	}
	nw.nodes[name] = n
	return n
}

func bodyName(env *peerv1.Envelope) string {
	switch env.Body.(type) {
	case *peerv1.Envelope_Flush:
		return "flush"
	case *peerv1.Envelope_FlushAck:
		return "ack"
	case *peerv1.Envelope_Push:
		return "push"
	case *peerv1.Envelope_Forward:
		return "forward"
	case *peerv1.Envelope_ForwardReply:
		return "reply"
	case *peerv1.Envelope_Handoff:
		return "handoff"
	case *peerv1.Envelope_HandoffAck:
		return "handoffack"
	case *peerv1.Envelope_Backup:
		return "backup"
	case *peerv1.Envelope_BackupAck:
		return "backupack"
	case *peerv1.Envelope_ClockProbe:
		return "clock"
	}
	return "?"
}

func (nw *testNet) send(from, to string, env *peerv1.Envelope) {
	if env.From != from || env.To != to {
		nw.t.Errorf("envelope from %q to %q sent by %s to %s", env.From, env.To, from, to)
	}
	nw.sent[bodyName(env)]++
	nw.bytes += proto.Size(env)
	if nw.cut[[2]string{from, to}] || nw.drop != nil && nw.drop(from, to, env) {
		nw.dropped++
		return
	}
	nw.seq++
	at := nw.now.Add(nw.latency)
	if nw.jitter != nil {
		link := [2]string{from, to}
		at = at.Add(time.Duration(nw.jitter.Int64N(int64(nw.maxJitter))))
		if last := nw.last[link]; at.Before(last) {
			at = last
		}
		nw.last[link] = at
	}
	nw.queue = append(nw.queue, &netMsg{at: at, seq: nw.seq, from: from, to: to, env: env})
}

// deliver delivers, in time order, every message due by until (including
// those sent while delivering), leaving the clock at until.
func (nw *testNet) deliver(until time.Time) {
	for {
		i := -1
		for j, m := range nw.queue {
			if !m.at.After(until) && (i < 0 || m.at.Before(nw.queue[i].at) || m.at.Equal(nw.queue[i].at) && m.seq < nw.queue[i].seq) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		m := nw.queue[i]
		nw.queue = slices.Delete(nw.queue, i, i+1)
		if m.at.After(nw.now) {
			nw.now = m.at
		}
		if n := nw.nodes[m.to]; n != nil {
			n.Step(nw.nowOf(m.to), m.env)
		}
	}
	if until.After(nw.now) {
		nw.now = until
	}
}

// settle delivers until no message is left (each hop takes latency), with
// no Tick.
func (nw *testNet) settle() {
	for len(nw.queue) > 0 {
		first := nw.queue[0].at
		for _, m := range nw.queue {
			if m.at.Before(first) {
				first = m.at
			}
		}
		nw.deliver(first)
	}
}

// tick calls Tick on every node at the current time.
func (nw *testNet) tick() {
	for _, name := range nw.names {
		if n := nw.nodes[name]; n != nil {
			n.Tick(nw.nowOf(name))
		}
	}
}

// run advances the clock by d in steps of the tick interval, ticking every
// node and delivering messages.
func (nw *testNet) run(d time.Duration) {
	end := nw.now.Add(d)
	step := nw.nodes[nw.names[0]].cfg.TickInterval
	for nw.now.Before(end) {
		next := nw.now.Add(step)
		if next.After(end) {
			next = end
		}
		nw.deliver(next)
		nw.tick()
	}
}

// queued returns the names of the bodies queued from one node to another.
func (nw *testNet) queued(from, to string) []string {
	var out []string
	for _, m := range nw.queue {
		if m.from == from && m.to == to {
			out = append(out, bodyName(m.env))
		}
	}
	return out
}

// take removes and returns the messages queued from one node to another.
func (nw *testNet) take(from, to string) []*peerv1.Envelope {
	var out []*peerv1.Envelope
	nw.queue = slices.DeleteFunc(nw.queue, func(m *netMsg) bool {
		if m.from == from && m.to == to {
			out = append(out, m.env)
			return true
		}
		return false
	})
	return out
}

// isolate cuts every link to and from name; heal restores every link.
func (nw *testNet) isolate(name string) {
	for _, o := range nw.names {
		if o != name {
			nw.cut[[2]string{name, o}] = true
			nw.cut[[2]string{o, name}] = true
		}
	}
}

func (nw *testNet) heal() { clear(nw.cut) }

// withJitter makes every link's latency vary by up to max, drawn from seed.
func (nw *testNet) withJitter(seed uint64, max time.Duration) {
	nw.jitter = rand.New(rand.NewPCG(seed, seed))
	nw.maxJitter = max
	nw.last = map[[2]string]time.Time{}
}

// setMembers gives every listed node the membership names.
func (nw *testNet) setMembers(names []string, on ...string) {
	for _, o := range on {
		nw.nodes[o].SetMembers(nw.nowOf(o), names)
	}
}

// keyOwnedBy returns a key that the ring of members gives to owner.
func keyOwnedBy(t testing.TB, owner string, members ...string) string {
	t.Helper()
	r, err := ring.New(ring.DefaultConfig(), members...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if o, _ := r.Owner(k); o == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

// keyMoving returns a key owned by from among before and by to among after.
func keyMoving(t testing.TB, from, to string, before, after []string) string {
	t.Helper()
	rb, _ := ring.New(ring.DefaultConfig(), before...)
	ra, _ := ring.New(ring.DefaultConfig(), after...)
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if o, _ := rb.Owner(k); o != from {
			continue
		}
		if o, _ := ra.Owner(k); o == to {
			return k
		}
	}
	t.Fatalf("no key moving from %s to %s", from, to)
	return ""
}

// perMinute is a token bucket of n per minute, burst n.
func perMinute(n int64) bucket.Limit {
	return bucket.Limit{Algorithm: bucket.TokenBucket, Limit: n, Period: time.Minute}
}

// checkSync runs one request on n at now and returns its answer, failing if the
// answer needs the network.
func checkSync(t testing.TB, n *Node, now time.Time, r check.Request) check.Response {
	t.Helper()
	resps := make([]check.Response, 1)
	called := false
	n.Check(now, []check.Request{r}, resps, func() { called = true })
	if !called {
		t.Fatalf("%s: check of %q did not complete synchronously", n.cfg.Self, r.Key)
	}
	return resps[0]
}

// checkAnswered runs r on n at the network's time and delivers, ticking,
// until it is answered (a client that waits for each answer).
func (nw *testNet) checkAnswered(n *Node, r check.Request) check.Response {
	p := checkAsync(n, nw.nowOf(n.cfg.Self), r)
	for !p.done {
		nw.run(100 * time.Microsecond)
	}
	return p.resps[0]
}

// pending is a Check whose answer may come later.
type pending struct {
	resps []check.Response
	done  bool
}

func checkAsync(n *Node, now time.Time, reqs ...check.Request) *pending {
	p := &pending{resps: make([]check.Response, len(reqs))}
	n.Check(now, reqs, p.resps, func() {
		if p.done {
			panic("done called twice")
		}
		p.done = true
	})
	return p
}

// ownedState returns the tokens remaining in name's owned state of key, or
// -1 if it holds none.
func remainingOn(n *Node, now time.Time, key string) int64 {
	s := n.st.shardOf(key)
	e := n.st.lookup(s, key)
	if e == nil {
		return -1
	}
	d, _ := headOf(e).b.Clone().Take(now, 0)
	return d.Remaining
}

func isOwned(n *Node, key string) bool {
	s := n.st.shardOf(key)
	return n.st.lookupOwned(s, key) != nil
}
