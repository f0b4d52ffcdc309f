package sim

import (
	"fmt"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// linkParams are the properties of one directed link.
type linkParams struct {
	latency, jitter int64 // nanoseconds
	loss            float64
}

// network is the simulated network: directed links with latency, jitter and
// loss, and a matrix of cuts. Indices are node indices. It grows when nodes
// join. While the nodes of a window run at once (step.go), the cuts and the
// link properties are only read, and row from of last and reported belongs
// to node from.
type network struct {
	spec Network
	exp  bool // exponential jitter
	// cut[from][to] counts the faults that cut the link; zero is connected.
	cut [][]int32
	// link[from][to] holds the link's properties.
	link [][]linkParams
	// last[from][to] is the latest delivery time scheduled on the link,
	// which keeps a FIFO link in order.
	last [][]int64
	// reported[from][to] is set while an unreachability report is scheduled.
	reported [][]bool
}

func newNetwork(spec Network) *network {
	return &network{spec: spec, exp: spec.JitterDist == "exp"}
}

// minLatency returns the shortest latency of any link (at least 1ns): no
// message between two nodes arrives sooner after it was sent, since jitter
// only adds to it.
func (nw *network) minLatency() int64 {
	d := int64(nw.spec.Latency)
	for _, l := range nw.spec.Links {
		if l.Latency != 0 {
			d = min(d, int64(l.Latency))
		}
	}
	return max(d, 1)
}

// grow makes room for n nodes.
func (nw *network) grow(n int) {
	for len(nw.cut) < n {
		nw.cut = append(nw.cut, nil)
		nw.link = append(nw.link, nil)
		nw.last = append(nw.last, nil)
		nw.reported = append(nw.reported, nil)
	}
	for i := range n {
		for len(nw.cut[i]) < n {
			j := len(nw.cut[i])
			nw.cut[i] = append(nw.cut[i], 0)
			nw.link[i] = append(nw.link[i], nw.params(i, j))
			nw.last[i] = append(nw.last[i], 0)
			nw.reported[i] = append(nw.reported[i], false)
		}
	}
}

// params resolves the properties of the link i -> j: the defaults, then
// every matching override in order.
func (nw *network) params(i, j int) linkParams {
	p := linkParams{latency: int64(nw.spec.Latency), jitter: int64(nw.spec.Jitter), loss: nw.spec.Loss}
	match := func(sel string, k int) bool { return sel == "" || sel == "*" || sel == nodeName(k) }
	for _, l := range nw.spec.Links {
		if !match(l.From, i) || !match(l.To, j) {
			continue
		}
		if l.Latency != 0 {
			p.latency = int64(l.Latency)
		}
		if l.Jitter != 0 {
			p.jitter = int64(l.Jitter)
		}
		if l.Loss != 0 {
			p.loss = l.Loss
		}
	}
	return p
}

// connected reports whether the link i -> j carries messages now.
func (nw *network) connected(i, j int) bool { return i == j || nw.cut[i][j] == 0 }

// delay draws the transit time of one message on i -> j, or -1 when the
// message is lost.
func (nw *network) delay(rng *rand.Rand, i, j int) int64 {
	p := &nw.link[i][j]
	if p.loss > 0 && rng.Float64() < p.loss {
		return -1
	}
	d := p.latency
	if p.jitter > 0 {
		if nw.exp {
			d += int64(rng.ExpFloat64() * float64(p.jitter))
		} else {
			d += rng.Int64N(p.jitter)
		}
	}
	return d
}

// setCut adds delta to the cut count of i -> j, never below zero.
func (nw *network) setCut(i, j int, delta int32) {
	if i == j {
		return
	}
	nw.cut[i][j] = max(0, nw.cut[i][j]+delta)
}

// heal restores every link.
func (nw *network) heal() {
	for i := range nw.cut {
		clear(nw.cut[i])
	}
}

// cachedSize sizes the envelopes a node sends. A Node never modifies a
// message once sent (rlsync.Transport), and the parts of one are often
// sent again (a key's state pushed to every peer that holds the key, a
// flush resent), so the size protobuf cached in a part the last time it
// was sized is still its size: UseCachedSize reads it instead of walking
// the part again. The numbers are the same as proto.Size's: every
// sizeCheck-th envelope a node sends is sized afresh and encoded, and a
// difference ends the run (checkSize).
var cachedSize = proto.MarshalOptions{UseCachedSize: true}

// sizeCheck is how often a node checks the size of what it sends against
// a fresh sizing and an encoding (one envelope in sizeCheck; tests check
// every one).
const sizeCheck = 1024

// checkSize checks that n, the cached size of env, is the size of env's
// encoding, and keeps the first difference for the cluster (settle).
func (s *simNode) checkSize(env *peerv1.Envelope, n int) {
	b, err := proto.Marshal(env)
	switch {
	case err != nil:
		s.sizeErr = fmt.Errorf("sim: node %s sent an envelope that does not encode: %w", s.name, err)
	case len(b) != n:
		s.sizeErr = fmt.Errorf("sim: node %s sent an envelope of %d bytes sized %d from the sizes cached "+
			"in its parts: a message modified after it was sent (rlsync.Transport)", s.name, len(b), n)
	}
}

// endpoint is one node's rlsync.Transport: it stamps the sender and hands the
// message to the cluster's network. It belongs to one incarnation of the
// node; sends from an older one are dropped.
type endpoint struct {
	c   *Cluster
	idx int32
	gen uint32
}

var _ rlsync.Transport = (*endpoint)(nil)

// Send implements rlsync.Transport: it counts the message and schedules its
// delivery, or drops it and, unless the network is Silent, schedules an
// Unreachable report to the sender. It touches only what belongs to the
// sender: the delivery waits in the sender's outbox until the window ends
// (step.go).
func (e *endpoint) Send(to string, env *peerv1.Envelope) {
	c := e.c
	from := c.nodes[e.idx]
	if from.gen != e.gen || !from.running() {
		return
	}
	t := &from.traffic[c.met.win(from.now)]
	t.messages++
	n := cachedSize.Size(env)
	if from.sent++; from.sent%c.sizeCheck == 0 {
		from.checkSize(env, n)
	}
	t.bytes += int64(n)
	j, ok := c.byName[to]
	if !ok {
		return // a name the cluster never had: nothing to report it to
	}
	i, nw := int(e.idx), c.net
	switch dst := c.nodes[j]; {
	case !dst.running():
		c.reportUnreachable(from, int(j), int64(nw.spec.Refused))
		return
	case !nw.connected(i, int(j)):
		c.reportUnreachable(from, int(j), int64(nw.spec.Timeout))
		return
	}
	d := nw.delay(from.rng, i, int(j))
	if d < 0 {
		return
	}
	at := from.now + d
	if !nw.spec.Reorder {
		at = max(at, nw.last[i][j])
		nw.last[i][j] = at
	}
	ev := from.q.newEvent()
	ev.at, ev.kind, ev.a, ev.b, ev.gen, ev.env = at, evDeliver, e.idx, j, c.nodes[j].gen, env
	from.out = append(from.out, ev)
}

// reportUnreachable schedules one Unreachable report to s about node j,
// after delay, unless one is pending already or the network is Silent.
func (c *Cluster) reportUnreachable(s *simNode, j int, delay int64) {
	if c.net.spec.Silent || c.net.reported[s.idx][j] {
		return
	}
	c.net.reported[s.idx][j] = true
	ev := s.q.newEvent()
	ev.at, ev.kind, ev.a, ev.b, ev.gen = s.now+delay, evUnreachable, s.idx, int32(j), s.gen
	s.q.push(ev)
}

// deliver hands a message that has crossed the network to its receiver,
// unless the receiver restarted or went down meanwhile or the link was cut
// while the message was in flight.
func (c *Cluster) deliver(dst *simNode, ev *event) {
	if dst.gen != ev.gen || !dst.running() || !c.net.connected(int(ev.a), int(ev.b)) {
		return
	}
	dst.n.Step(c.clockOf(dst, dst.now), ev.env)
}

// unreachable tells a sender that a send failed.
func (c *Cluster) unreachable(src *simNode, ev *event) {
	c.net.reported[ev.a][ev.b] = false
	if src.gen != ev.gen || !src.running() {
		return
	}
	src.n.Unreachable(c.clockOf(src, src.now), c.nodes[ev.b].name)
}
