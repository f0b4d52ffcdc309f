package sync

import (
	"math"
	"slices"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The ownership lease bounds how long a node cut off from the majority
// goes on deciding as an owner. Failure detection is not symmetric: in a
// silent 3 | 2 split, the owner of a key on the minority side whose backup
// target is on its own side kept deciding the key (its fence fed by that
// target's acknowledgements, fence.go) for the second or more before it
// saw itself a minority, while the majority took the key over from the
// backup it held: two owners spending one bucket (e2e's TestSilentSplit,
// +18 to +22 tokens over the envelope in 2 runs of 7). Nothing bounded how
// long a cut-off owner decided.
//
// A node decides as owner in owner and leased mode (its own checks,
// forwarded checks, lease grants, and the policy's debts drained into its
// keys, charge.go) only while it holds the lease: a majority of its quorum
// baseline, itself included, as in confirm.go,
//
//	(1 + peers echoing) * 2 > baseline
//
// has echoed back a reading of its clock taken at t_s with
//
//	t_s + OwnerLeaseTTL > now
//
// Both instants are readings of this node's own clock (the raw clock the
// driver passes, clock_ns, before any correction): the lease needs no
// agreement between clocks, only that each runs at about the rate of real
// time. The echo rides on the envelopes (clock_echo_ns: the latest clock_ns
// the sender received from the receiver), so traffic renews the lease at no
// cost. When the lease would lapse within OwnerLeaseTTL/2 and this node
// wanted it in the last OwnerLeaseTTL, it asks the peers whose echo is
// stale for one (ClockProbe{echo}, answered at once, as confirm.go's),
// again every RequestTimeout/2 while they stay stale.
//
// A check that finds no lease is not rejected: it waits, like a check
// waiting on its fence (fence.go, holdFenced: at most RequestTimeout/2),
// for the echoes that renew it, then is decided; only when they do not come
// does it go by the request's partition policy, degraded (a forwarded one
// is answered not-owner). A fresh or restarted node has no lease until its
// first echoes come back: its first check waits one round trip. A node
// alone on its ring (a baseline of one) needs no echo.
//
// The taker's side is in confirm.go: a partition taken over from a failed
// member is decided by its new owner only OwnerLeaseTTL (and a sixteenth
// of it for clock rates) after the takeover is confirmed. The argument: the
// old owner's last renewal was echoed by a majority of the baseline, and
// the confirmation heard from a majority since the change, so some member
// did both. In a symmetric cut that member's echo left before the cut,
// which came before the failure detection that began the takeover; so the
// old owner's reading t_s precedes the confirmation C, and its lease lapses
// at t_s + OwnerLeaseTTL, before C + OwnerLeaseTTL, by its clock and by the
// taker's, to within their rates. A member that reaches both sides (an
// asymmetric cut) could echo the old owner after answering the taker; so
// every echo request names the members its sender counts failed
// (ClockProbe.taking_over), a receiver stops echoing them until the
// sender names them no more (peer.withheldBy: the sender's request naming
// fewer is sent again until it is echoed, tickLift), even across their
// leaving its membership and coming back (newPeer: a member it sees back
// before the sender does stays withheld from while the sender, live to
// it, names it), and never echoes a member it
// counts failed itself (its envelopes are dropped); and the confirmation
// counts a peer only once it echoes a reading taken at or after the
// change, which it sends only after taking the request in
// (TestAsymmetricCutThirdNodeWithholdsEcho). docs/consistency.md,
// "Ownership lease", states the argument and its assumptions.
//
// Clock steps: readings taken before this node's clock stepped back (of an
// earlier clock epoch, clock.go), or before this process started
// (ownerLease.floor), do not count.

// leaseMarginDiv sets the taker's margin for clock rates: it waits
// OwnerLeaseTTL + OwnerLeaseTTL/leaseMarginDiv after the confirmation.
const leaseMarginDiv = 16

// ownerLease is a Node's ownership lease (see above). Instants are this
// node's own clock, Unix ns.
type ownerLease struct {
	// until is when the lease lapses: the need-th latest echo of the live
	// peers plus OwnerLeaseTTL; 0 when there are not enough echoes,
	// math.MaxInt64 when none is needed.
	until int64
	// floor: echoes of readings at or before it count for nothing (taken
	// before this process started); 0 once the clock stepped back.
	floor int64
	// used is when an owner decision last wanted the lease.
	used int64
	// asked is when echo requests were last sent to renew it.
	asked int64
	// lift holds the peers sent an echo request naming fewer members than
	// before (announceReturns), by name, with the reading it carried: one
	// that withheld its echoes from a member for this node's sake goes on
	// until it takes such a request in, so the request is sent again every
	// RequestTimeout (tickLift) until the peer echoes that reading or a
	// later one.
	lift map[string]int64
	// named holds, by sender, the members its latest echo request named
	// as taken over (withhold): a peer that comes back into this node's
	// membership while a live sender still names it is withheld from at
	// once (newPeer), not echoed afresh until that sender sees it back.
	named map[string][]string
}

// leaseNeed returns how many peers must echo for a lease: the least h
// with (1+h)*2 > baseline.
func (n *Node) leaseNeed() int { return n.currentQuorum().Baseline / 2 }

// relapse recomputes when the lease lapses, from the echoes of v's peers.
// It is called when an echo rises, the membership or the baseline changes,
// or the clock steps.
func (n *Node) relapse(v *view) {
	need := n.leaseNeed()
	if need == 0 {
		n.lease.until = math.MaxInt64
		return
	}
	echoes := make([]int64, 0, len(v.peers))
	for _, p := range v.peers {
		if !p.gone && p.echoIn > n.lease.floor {
			echoes = append(echoes, p.echoIn)
		}
	}
	if len(echoes) < need {
		n.lease.until = 0
		return
	}
	slices.Sort(echoes)
	n.lease.until = echoes[len(echoes)-need] + int64(n.cfg.OwnerLeaseTTL)
}

// hasLease reports whether this node holds its ownership lease at now.
func (n *Node) hasLease(now time.Time) bool { return now.UnixNano() < n.lease.until }

// wantLease reports whether this node holds its lease at now, as an owner
// decision about to be taken needs it, and asks for echoes when it lapses
// within OwnerLeaseTTL/2 (or has lapsed).
func (n *Node) wantLease(now time.Time, v *view) bool {
	t := now.UnixNano()
	n.lease.used = t
	if n.lease.until == math.MaxInt64 {
		return true
	}
	if n.lease.until-t < int64(n.cfg.OwnerLeaseTTL/2) {
		n.askLease(now, v)
	}
	return t < n.lease.until
}

// askLease sends an echo request to each live peer whose echo is stale
// (lapses within OwnerLeaseTTL/2), at most once per RequestTimeout/2. The
// request carries a fresh clock reading, whose echo renews the lease.
func (n *Node) askLease(now time.Time, v *view) {
	t := now.UnixNano()
	if n.lease.asked != 0 && t-n.lease.asked < int64(n.cfg.RequestTimeout/2) && t >= n.lease.asked {
		return
	}
	n.lease.asked = t
	var names []string
	for _, name := range v.names {
		p := v.peers[name]
		if p == nil || p.gone {
			continue
		}
		if p.echoIn > n.lease.floor && p.echoIn+int64(n.cfg.OwnerLeaseTTL/2) > t {
			continue
		}
		p.clk.stamped = 0 // the request carries a reading (clock.go)
		n.metrics.LeaseEchoRequests.Add(1)
		if names == nil {
			names = n.takenOver()
		}
		n.send(name, clockProbeBody{echo: true, takingOver: names})
	}
}

// tickLease renews the lease ahead of its lapse while this node decided as
// owner in the last OwnerLeaseTTL, or has checks waiting (see above).
func (n *Node) tickLease(now time.Time, v *view) {
	if n.lease.until == math.MaxInt64 || n.lease.used == 0 || len(v.peers) == 0 {
		return
	}
	t := now.UnixNano()
	if t-n.lease.used > int64(n.cfg.OwnerLeaseTTL) && len(n.fen.waiting) == 0 {
		return
	}
	if n.lease.until-t < int64(n.cfg.OwnerLeaseTTL/2) {
		n.askLease(now, v)
	}
}

// leaseFields takes the lease fields of env, received from p, a peer of v,
// at now: the reading of p's clock to echo back, and p's echo of this
// node's. An echo that renews a lapsed lease decides the checks that
// waited for it. (An echo of a reading a former life of this process took
// is below its floor.)
func (n *Node) leaseFields(now time.Time, v *view, p *peer, env *peerv1.Envelope) {
	if env.ClockNs != 0 {
		p.echoOut, p.echoEpoch = env.ClockNs, env.ClockEpoch
	}
	e := env.ClockEchoNs
	if r, ok := n.lease.lift[p.name]; ok && e >= r && env.ClockEchoEpoch == n.clk.epoch {
		delete(n.lease.lift, p.name) // it took the lifting request in
	}
	if e <= n.lease.floor || e <= p.echoIn || e > now.UnixNano() || env.ClockEchoEpoch != n.clk.epoch || v.peers[p.name] != p {
		return
	}
	had, was := n.hasLease(now), p.echoIn
	p.echoIn = e
	n.heardFrom(now, v, p, was) // confirm.go
	n.relapse(v)
	if !had && n.hasLease(now) && len(n.fen.waiting) > 0 {
		n.tickFenced(now, v) // fence.go: the checks held for the lease
	}
}

// peerReborn forgets what this node echoes to p and what p echoed, p
// having restarted: its new process holds none of this node's readings,
// and its readings from before are not its new process's.
func (p *peer) peerReborn() { p.echoOut, p.echoSent, p.echoIn = 0, 0, 0 }

// stampEcho sets env's echo of p's latest reading, when p sent one not
// echoed yet and this node does not withhold it (see above).
func stampEcho(p *peer, env *peerv1.Envelope) {
	if p == nil || len(p.withheldBy) > 0 || p.echoOut == p.echoSent {
		return
	}
	env.ClockEchoNs, env.ClockEchoEpoch = p.echoOut, p.echoEpoch
	p.echoSent = p.echoOut
}

// leaseClockStepped voids the echoes of readings taken before this node's
// clock stepped back (clock.go, clockJumped, a new epoch): on the new clock
// they would look more recent than they are. The lease is renewed by the
// echoes of readings of the new epoch.
func (n *Node) leaseClockStepped(t int64) {
	n.lease.floor = 0 // a former life's readings are of epoch 0, this one's now are not
	for _, p := range n.view.peers {
		p.echoIn = 0
	}
	n.view.restartConfirm(t) // confirm.go
	n.relapse(n.view)
}

// takenOver returns the members whose partitions this node may hold as
// taken over, sorted: those its quorum counts failed, forgotten or not
// (quorum.go). Its echo requests name them (ClockProbe.taking_over).
func (n *Node) takenOver() []string {
	var out []string
	for m := range n.quorum.failed {
		out = append(out, m)
	}
	for m := range n.quorum.forgotten {
		out = append(out, m)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// withhold applies an echo request from member from naming names as taken
// over (ClockProbe.taking_over): the peers of v named stop getting echoes
// from this node while any member names them; those from named before and
// no longer get them again (from sees them again). The names are kept by
// sender (ownerLease.named): a peer that leaves this node's membership and
// comes back is withheld from by the live senders still naming it
// (newPeer).
func (n *Node) withhold(v *view, from string, names []string) {
	if len(names) > 0 {
		if n.lease.named == nil {
			n.lease.named = map[string][]string{}
		}
		n.lease.named[from] = slices.Clone(names)
	} else {
		delete(n.lease.named, from)
	}
	for _, p := range v.peers {
		named := slices.Contains(names, p.name)
		i := slices.Index(p.withheldBy, from)
		switch {
		case named && i < 0:
			p.withheldBy = append(p.withheldBy, from)
		case !named && i >= 0:
			p.withheldBy = slices.Delete(p.withheldBy, i, i+1)
		}
	}
}

// announceReturns sends every live peer of v an echo request naming the
// members this node still counts taken over, when one it counted is back
// (prev held it, takenOver no longer does): the peers that withheld their
// echoes from it for this node's sake echo it again.
func (n *Node) announceReturns(now time.Time, v *view, prev []string) {
	if len(prev) == 0 {
		return
	}
	names := n.takenOver()
	back := false
	for _, m := range prev {
		if !slices.Contains(names, m) {
			back = true
			break
		}
	}
	if !back {
		return
	}
	if n.lease.lift == nil {
		n.lease.lift = map[string]int64{}
	}
	for _, name := range v.names {
		if p := v.peers[name]; p != nil && !p.gone {
			n.sendLift(now, p, names)
		}
	}
}

// sendLift sends p an echo request naming names, the members this node
// counts taken over, and notes it to be sent again until p echoes its
// reading (ownerLease.lift).
func (n *Node) sendLift(now time.Time, p *peer, names []string) {
	p.clk.stamped = 0 // the request carries a reading, which p echoes once it took it in
	n.lease.lift[p.name] = now.UnixNano()
	n.send(p.name, clockProbeBody{echo: true, takingOver: names})
}

// tickLift sends the lifting requests of announceReturns again, every
// RequestTimeout, to the live peers of v that have not echoed them: a
// request lost to a cut, or dropped by a peer that did not count this
// node a member when it came (a flapping link: n3, back, lifted n2's
// withholding of n1 while n2 still counted n3 failed; n2 went on
// withholding, and once n3 was down for good n1, with n2 up, had no
// lease: TestWithholdingLiftedAfterNamerReturns). A peer not in v is
// asked once it is again; names are the members this node counts taken
// over now.
func (n *Node) tickLift(now time.Time, v *view) {
	if len(n.lease.lift) == 0 {
		return
	}
	t := now.UnixNano()
	var names []string
	asked := false
	for _, name := range v.names {
		r, ok := n.lease.lift[name]
		p := v.peers[name]
		if !ok || p == nil || p.gone || (t-r < int64(n.cfg.RequestTimeout) && t >= r) {
			continue
		}
		if !asked {
			names, asked = n.takenOver(), true
		}
		n.sendLift(now, p, names)
	}
}

// newPeer returns a peer for member name, which enters the membership of
// nv: withheld from by the live members of nv whose latest echo request
// named it as taken over (ownerLease.named). Its coming back here does not
// end their takeover: a member that still counts it failed holds its
// partitions until it sees it back and lifts the withholding
// (announceReturns); echoing it before then would let it renew its lease
// and decide on its own state the keys that member took over (the fault
// checker's owner seed 535: n1 saw n4 back first and echoed it, and n4
// admitted on k5 before n3, which had taken k5 over, handed it back).
func (n *Node) newPeer(nv *view, name string) *peer {
	p := &peer{name: name, seq: n.dur.peerSeq, hoSeq: n.dur.peerSeq} // see durability.peerSeq
	n.dur.restoreInbound(p)                                          // backup.go
	senders := make([]string, 0, len(n.lease.named))
	for from, names := range n.lease.named {
		if from != name && slices.Contains(names, name) && nv.ring.Has(from) && nv.lost[from] == nil {
			senders = append(senders, from)
		}
	}
	if len(senders) > 0 {
		slices.Sort(senders)
		p.withheldBy = senders
	}
	return p
}
