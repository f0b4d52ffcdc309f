package sync

import (
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Clocks. Each node's driver passes its own clock as now; clocks of
// different machines differ. Timers (flush intervals, timeouts, lease TTLs)
// only measure durations on one node and run on that node's clock as given.
// Bucket states hold instants, and travel between nodes (flush answers,
// pushes, hand-offs, backups, the views a new owner rebuilds from): they
// run on cluster time, the median of the members' clocks as this node
// measures it, so that every node reads every state the same way and
// windows aligned to the clock (fixed window, sliding counter) have the
// same edges everywhere.
//
// Measuring. Every envelope carries the sender's clock (clock_ns), the
// correction it applies (clock_correction_ns) and the smallest recent
// (receipt - clock_ns) it measured on envelopes from the receiver
// (clock_seen_ns): the NTP estimate, from both directions. For a peer p,
// seen = (ours - p's) + delay p->us, and p's seen of us = (p's - ours) +
// delay us->p, so (p's seen - ours)/2 = p's clock - ours, to within half
// the difference of the two delays; taking the minimum of each over a
// window (clockWindow) drops queueing delays. The correction is the median
// of {0} and the offsets to the peers (one not measured yet counting as
// agreeing with the current correction), so every node's cluster
// time is the median of the members' clocks, to within the measurement
// error, and a single wrong clock among three or more does not move it.
//
// Steps. The correction follows the median only when it moved by more than
// clockStep (a fraction of MaxClockOffset): then every state this node
// holds is shifted by the change (bucket.Shift), so a step neither refills
// nor locks out a key. A node whose correction exceeds MaxClockOffset says
// so (ClockStatus, Metrics.ClockSkewed; the driver logs it and the node is
// not ready) and keeps deciding on cluster time.
//
// Receiving. States in an envelope are on the sender's cluster time. When
// the receiver's differs from it by more than clockStep (the sender has not
// measured its peers yet, or its estimate and ours disagree), the states
// are shifted by the difference as they are decoded: by the measured one,
// or, before any measurement, by (our time - the sender's) at receipt when
// that exceeds MaxClockOffset. The latter includes the one-way delay, which
// makes states look younger than they are: a receiver may under-admit by
// the delay's worth of refill, never over-admit.

// clockWindow is how long a minimum of the one-way measurements is kept:
// the estimate uses the current and the previous window's minimum, so it
// follows a clock that drifts or steps within two windows.
const clockWindow = 10 * time.Second

// clockProbeEvery is how long a node sends nothing to a peer not yet
// measured before it sends it a clock probe, so that every pair of members
// is measured within about two of these, with or without traffic. A peer
// measured gets one after clockWindow/2 of silence: two samples per window
// keep its minimum fed, at a tenth of the messages (a 30-node cluster at
// rest: 174 probes a second in all, not 870).
const clockProbeEvery = time.Second

// clockStampEvery is the least time between two envelopes to one peer that
// carry the clock fields (clock_ns and clock_seen_ns, about 20 bytes):
// enough measurements for the windowed minimum, a small cost per envelope.
// An envelope without them is read with the sender's last correction.
const clockStampEvery = 100 * time.Millisecond

// clockStepDiv sets clockStep = MaxClockOffset / clockStepDiv: the least
// change of the median that moves the correction and shifts the states.
const clockStepDiv = 16

// ClockStatus is what a Node knows of its clock against its peers'.
type ClockStatus struct {
	// Offset is this node's clock minus cluster time (the median of the
	// members' clocks as measured): positive when this clock runs ahead.
	// The node decides on its clock minus Offset.
	Offset time.Duration
	// Measured is the number of peers whose offset is measured; Peers the
	// number of current peers.
	Measured, Peers int
	// Bound is Config.MaxClockOffset.
	Bound time.Duration
	// Skewed reports |Offset| > Bound: this node's clock differs from its
	// peers' by more than the bound. Its decisions are still on cluster time.
	Skewed bool
	// Outlier reports Skewed while most members (more than half, this node
	// included) are within the bound: this node's clock is the wrong one.
	// With two members, or no such majority, a skewed node cannot tell
	// whether its clock or the others' is wrong, and Outlier is false.
	Outlier bool
}

// clockMin is a windowed minimum of one-way measurements.
type clockMin struct {
	start    int64 // when the current window started, this node's clock (ns)
	cur, old int64 // minimum of the current and previous windows
	hasCur   bool
	hasOld   bool
}

// add records v, measured at t.
func (m *clockMin) add(t, v int64) {
	if !m.hasCur || t-m.start >= int64(clockWindow) || t < m.start {
		m.old, m.hasOld = m.cur, m.hasCur
		m.start, m.cur, m.hasCur = t, v, true
		return
	}
	m.cur = min(m.cur, v)
}

// get returns the minimum over both windows.
func (m *clockMin) get() (int64, bool) {
	switch {
	case m.hasCur && m.hasOld:
		return min(m.cur, m.old), true
	case m.hasCur:
		return m.cur, true
	}
	return 0, false
}

// peerClock is this node's measure of one peer's clock.
type peerClock struct {
	// inc and epoch are the incarnation and clock epoch of the peer
	// measured.
	inc, epoch uint64
	// seen: (our clock at receipt - the peer's clock_ns), windowed minimum.
	seen clockMin
	// theirs is the peer's seen of us, from its latest envelope.
	theirs    int64
	hasTheirs bool
	// off is the peer's clock minus ours; has once both directions are in.
	off int64
	has bool
	// sent is when this node last sent the peer an envelope, and stamped
	// when it last sent one with the clock fields (its clock, ns).
	sent, stamped int64
	// corr is the peer's correction, from its latest stamped envelope;
	// diff, when !has, the shift its states took on that envelope.
	corr, diff int64
}

// nodeClock is a Node's clock correction.
type nodeClock struct {
	// corr is added to the driver's now to get cluster time (ns).
	corr int64
	// skewed is |corr| > MaxClockOffset, as last reported.
	skewed bool
	// rx is the shift applied to the states of the envelope being handled.
	rx time.Duration
	// now is the driver's time of the input being applied (ns), which
	// stamps the envelopes it sends.
	now int64
	// round is when tickClock last ran its round (ns).
	round int64
	// epoch counts the times this node's clock went back (clockJumped).
	epoch uint64
}

// enter records now, the time of an input about to be applied. A time
// earlier than the last input's by more than clockStep is the host's clock
// stepping back (the driver's inputs come in time order): see clockJumped.
func (n *Node) enter(now time.Time) {
	t := now.UnixNano()
	if n.clk.now == 0 {
		n.lease.floor = t - 1 // ownerlease.go: readings of a former life do not count
	}
	if n.clk.now != 0 && n.clk.now-t > n.clockStep() {
		n.clockJumped(time.Duration(t - n.clk.now))
		n.leaseClockStepped(t) // ownerlease.go
	}
	n.clk.now = t
}

// clockJumped handles this node's clock stepping by d (d < 0: back). The
// correction takes the step back out, so cluster time goes on where it was
// and no state moves; the measurements, which the step made wrong on both
// sides, start again: a new epoch tells the peers to measure this node
// afresh, and this node measures them afresh.
func (n *Node) clockJumped(d time.Duration) {
	n.clk.corr -= int64(d)
	n.clk.epoch++
	n.metrics.ClockSteps.Add(1)
	n.metrics.ClockOffsetNs.Store(-n.clk.corr)
	for _, p := range n.view.peers {
		p.clk = peerClock{inc: p.clk.inc, epoch: p.clk.epoch, corr: p.clk.corr, diff: p.clk.diff}
	}
}

// bt returns the cluster time of now: the time every bucket is read and
// written at.
func (n *Node) bt(now time.Time) time.Time {
	if n.clk.corr == 0 {
		return now
	}
	return now.Add(time.Duration(n.clk.corr))
}

// toLocal turns the instants of answers decided on cluster time (bucket
// states run on it) back to the driver's clock, which the caller reads
// them against: a ResetAt on cluster time, read against a host clock the
// correction sets apart (a node whose clock stepped back, or is skewed),
// would be off by the whole correction.
func (n *Node) toLocal(resps []check.Response) {
	if n.clk.corr == 0 {
		return
	}
	for i := range resps {
		if r := &resps[i]; !r.ResetAt.IsZero() {
			r.ResetAt = r.ResetAt.Add(-time.Duration(n.clk.corr))
		}
	}
}

// clockStep is the least change of the median that moves the correction.
func (n *Node) clockStep() int64 { return int64(n.cfg.MaxClockOffset / clockStepDiv) }

// stampClock sets the clock fields of env, about to be sent to p (nil: not
// a current peer) during the input being applied: on the first envelope
// to p, then at most once per clockStampEvery (and at once after a step).
func (n *Node) stampClock(p *peer, env *peerv1.Envelope) {
	t := n.clk.now
	if p == nil {
		env.ClockNs, env.ClockCorrectionNs, env.ClockEpoch = t, n.clk.corr, n.clk.epoch
		return
	}
	p.clk.sent = t
	if p.clk.stamped != 0 && t-p.clk.stamped < int64(clockStampEvery) && t >= p.clk.stamped {
		return
	}
	p.clk.stamped = t
	env.ClockNs, env.ClockCorrectionNs, env.ClockEpoch = t, n.clk.corr, n.clk.epoch
	env.ClockSeenNs, env.ClockSeen = p.clk.seen.get()
}

// clockProbeBody is a clock probe; echo asks for one back at once
// (confirm.go).
// takingOver names the failed members whose partitions the sender takes
// over (ownerlease.go).
type clockProbeBody struct {
	echo       bool
	takingOver []string
}

func (b clockProbeBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_ClockProbe{ClockProbe: &peerv1.ClockProbe{Echo: b.echo, TakingOver: b.takingOver}}
}

// tickClock sends a clock probe to every peer this node sent nothing to
// for clockProbeEvery (clockWindow/2 once measured), and once per probe
// round follows the median (a peer may have left the membership since).
func (n *Node) tickClock(now time.Time, v *view) {
	t := now.UnixNano()
	if t-n.clk.round < int64(clockProbeEvery) && t >= n.clk.round {
		return
	}
	n.clk.round = t
	names := make([]string, 0, len(v.peers))
	for name, p := range v.peers {
		every := int64(clockProbeEvery)
		if p.clk.has {
			every = int64(clockWindow / 2)
		}
		if t-p.clk.sent >= every || t < p.clk.sent {
			names = append(names, name)
		}
	}
	slices.Sort(names) // the order of sends is reproducible
	for _, name := range names {
		n.send(name, clockProbeBody{})
	}
	n.recorrect(v)
}

// observeClock measures p's clock from env, received at now, moves the
// correction when the median moved, and sets the shift of env's states.
func (n *Node) observeClock(now time.Time, v *view, p *peer, env *peerv1.Envelope) {
	n.clk.rx = 0
	pc := &p.clk
	if env.ClockNs == 0 {
		// Not stamped: read with the sender's last correction (an older
		// node never stamps: its states are read as they are).
		if env.Incarnation == pc.inc {
			n.setRx(n.peerDiff(pc))
		}
		return
	}
	t := now.UnixNano()
	switch {
	case env.Incarnation < pc.inc:
		return // from a process that has restarted since
	case env.Incarnation > pc.inc:
		*pc = peerClock{inc: env.Incarnation, epoch: env.ClockEpoch, sent: pc.sent, stamped: pc.stamped} // a restarted process: measure again
	case env.ClockEpoch != pc.epoch:
		*pc = peerClock{inc: pc.inc, epoch: env.ClockEpoch, sent: pc.sent, stamped: pc.stamped} // its clock went back: measure again
	}
	pc.corr = env.ClockCorrectionNs
	pc.seen.add(t, t-env.ClockNs)
	if env.ClockSeen {
		pc.theirs, pc.hasTheirs = env.ClockSeenNs, true
	}
	if seen, ok := pc.seen.get(); ok && pc.hasTheirs {
		if off := (pc.theirs - seen) / 2; !pc.has || off != pc.off {
			pc.off, pc.has = off, true
			n.recorrect(v)
		}
	}
	if !pc.has {
		pc.diff = t + n.clk.corr - (env.ClockNs + env.ClockCorrectionNs)
	}
	n.setRx(n.peerDiff(pc))
}

// peerDiff returns the shift of the states a peer sends: our cluster time
// minus its (its clock + its correction), measured, or before the peer is
// measured the difference seen on its latest stamped envelope, delay
// included. A difference within clockStep (measured) or MaxClockOffset
// (not measured) is none.
func (n *Node) peerDiff(pc *peerClock) int64 {
	if pc.has {
		if d := n.clk.corr - pc.corr - pc.off; abs64(d) > n.clockStep() {
			return d
		}
		return 0
	}
	if abs64(pc.diff) > int64(n.cfg.MaxClockOffset) {
		return pc.diff
	}
	return 0
}

// setRx sets the shift of the states of the envelope being handled.
func (n *Node) setRx(d int64) {
	n.clk.rx = time.Duration(d)
	if d != 0 {
		n.metrics.ClockRebased.Add(1)
	}
}

// recorrect moves the correction to the median of the measured offsets
// when it moved by more than clockStep, shifting every held state.
func (n *Node) recorrect(v *view) {
	// This node counts 0 (its own clock). A peer not measured yet counts
	// as on this node's cluster time (corr): until it is measured, it is
	// taken to agree, so that a node that measured only part of the members
	// does not follow the one it measured, and one that measures afresh
	// after its clock stepped (clockJumped) keeps its correction.
	offs := make([]int64, 1, len(v.peers)+1)
	for _, p := range v.peers {
		off := n.clk.corr
		if p.clk.has {
			off = p.clk.off
		}
		offs = append(offs, off)
	}
	slices.Sort(offs)
	k := len(offs)
	med := offs[k/2]
	if k%2 == 0 {
		med = offs[k/2-1] + (offs[k/2]-offs[k/2-1])/2
	}
	if d := med - n.clk.corr; abs64(d) > n.clockStep() {
		n.shiftAll(time.Duration(d))
		n.clk.corr = med
		n.metrics.ClockSteps.Add(1)
		for _, p := range v.peers {
			p.clk.stamped = 0 // the next envelope tells the new correction
		}
	}
	n.metrics.ClockOffsetNs.Store(-n.clk.corr)
	skewed := abs64(n.clk.corr) > int64(n.cfg.MaxClockOffset)
	n.clk.skewed = skewed
	if skewed {
		n.metrics.ClockSkewed.Store(1)
	} else {
		n.metrics.ClockSkewed.Store(0)
	}
}

// shiftAll shifts every bucket state this node holds by d: its store (owned,
// cached, local and share entries) and the backups it keeps for others.
func (n *Node) shiftAll(d time.Duration) {
	for i := range n.st.shards {
		s := &n.st.shards[i]
		for _, e := range s.own.all() {
			e.b.Shift(d)
		}
		for _, e := range s.view.all() {
			e.b.Shift(d)
		}
		for _, m := range []map[string]*localKey{s.local, s.share} {
			for _, e := range m {
				e.b.Shift(d)
			}
		}
	}
	for _, h := range n.dur.held {
		h.b.Shift(d)
	}
}

// rebase shifts b, decoded from the envelope being handled, to this node's
// cluster time, and returns it.
func (n *Node) rebase(b bucket.Bucket) bucket.Bucket {
	if n.clk.rx != 0 && b != nil {
		b.Shift(n.clk.rx)
	}
	return b
}

// rebaseAt moves t, an instant of the envelope being handled, to this
// node's cluster time.
func (n *Node) rebaseAt(t time.Time) time.Time {
	if n.clk.rx == 0 || t.IsZero() {
		return t
	}
	return t.Add(n.clk.rx)
}

// ClockStatus returns what the node knows of its clock against its peers'.
// Like every read of state, it is called from the driver's loop.
func (n *Node) ClockStatus() ClockStatus {
	st := ClockStatus{
		Offset: -time.Duration(n.clk.corr),
		Peers:  len(n.view.peers),
		Bound:  n.cfg.MaxClockOffset,
		Skewed: n.clk.skewed,
	}
	// Members within the bound of cluster time: this node if not skewed,
	// and each measured peer whose clock (ours + its offset) is within it.
	within := 0
	if !st.Skewed {
		within++
	}
	bound := int64(n.cfg.MaxClockOffset)
	for _, p := range n.view.peers {
		if p.clk.has {
			st.Measured++
			if abs64(p.clk.off-n.clk.corr) <= bound { // its clock minus cluster time
				within++
			}
		}
	}
	st.Outlier = st.Skewed && 2*within > st.Peers+1
	return st
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
