package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// A key's state can be lost with every copy of it: its owner crashes
// alone (the others left gracefully, so it had no backup target), or it
// crashes together with the member holding its backups, before anyone saw
// the first fail (the fault checker's seeds 728, 564 and 868). When the
// owner starts again, no hand-off, backup or kept state comes for the key,
// and it started the key on a full bucket: a second burst on top of what
// its previous life admitted within the last refill, up to capacity over
// the token bucket's envelope. No member can tell a lost state from a key
// never used. What the restarted node does know is when it started: its
// previous life admitted nothing after that. So a node told that it joins
// a cluster that ran before it (Config.Joining) starts such a key, under
// its default policy fail-closed (Config.Policy, not a request's: with
// the request's, every key of a cold-started cluster of seeded nodes
// started drained for fail-closed requests, which the root package's join
// tests and e2e's first seconds do not expect), drained as of its start,
// refilling at its rate: over
// any span, the previous life's admissions are at most capacity + rate ×
// the part of the span before the start, this life's at most rate × the
// part after, within the envelope.
//
// The cost, only with Joining and fail-closed: a key this node owns and
// first checks within one refill of its start (capacity / rate), and of
// which no member sent a state (a key never used, or idle at its previous
// owner), admits rate × the time since the start instead of its burst;
// at most capacity under-admitted per key, once per start. A state that
// does come later (a hand-off, a probe's answer) is merged in keeping the
// most consumed, as before. Other policies keep a fresh bucket: local-share
// and fail-open admit beyond the envelope by their design.
//
// The same holds for a partition this node took over from a failed member
// (confirm.go), for a request of policy fail-closed in owner or leased mode
// (the request's policy, forwarded with the check: ForwardItem.fail_closed;
// a flush item names it when leased checks of policy fail-closed are
// behind it, FlushItem.fail_closed, and otherwise follows the node's
// default): it decides it only OwnerLeaseTTL (and a sixteenth) after a
// majority confirmed, by which time the old owner's lease has lapsed. A key
// of it with no hand-off, backup or kept state here starts drained as of
// that instant (takeoverStart), and a cached view that became the owned
// state in the takeover keeps the more consumed of itself and that drained
// state (boundPromoted): the old owner admitted at most capacity + rate ×
// the span before it stopped, this node rate × the span after it began.
// The cost: such a key admits its rate since the takeover, not its burst,
// once per takeover.

// startDrained reports, for a key of limit l this node starts to own from
// no state at now, the instant from which it refills, drained, and
// whether it must: a Joining node of default policy fail-closed within a
// refill of its start, or, for a request that is closed (fail-closed, in
// owner or leased mode: ownedEntry), a node within a refill of the moment
// it began deciding the key's partition, taken over from a failed member
// (takeoverStart). When both apply, the later instant.
func (n *Node) startDrained(key string, l bucket.Limit, now time.Time, closed bool) (time.Time, bool) {
	if l.Algorithm == bucket.Concurrency || l.Limit <= 0 {
		return time.Time{}, false
	}
	refill := time.Duration(float64(l.Period)*float64(l.Capacity())/float64(l.Limit)) + l.Period
	var at time.Time
	if n.cfg.Joining && n.cfg.Policy == check.PolicyFailClosed && !n.started.IsZero() && now.Sub(n.started) < refill {
		at = n.started // the node's default policy only: see above
	}
	if t, ok := n.takeoverStart(key); closed && ok && now.Sub(t) < refill && t.After(at) {
		at = t
	}
	if t, ok := n.drainedStart(key); ok && markable(l.Algorithm) && now.Sub(t) < refill && t.After(at) {
		// dropped.go: whatever the policy, as a state handed would be; not
		// a SmoothWarmingUp key, whose drained start is its hottest, not
		// its most consumed (evicted.go, markable).
		at = t
	}
	if at.IsZero() {
		return time.Time{}, false
	}
	if at.After(now) {
		at = now // cached mode decides from the confirmation, before the wait's end
	}
	return at, true
}

// newOwnedBucketEntry returns a new owned record of key, of store hash h,
// under l for this node, at now (cluster time), for a request closed or
// not: a fresh bucket, or one drained as of this node's start or takeover
// (startDrained), or as its evicted mark says (markedStart), whichever is
// the later.
func (n *Node) newOwnedBucketEntry(key string, h uint64, l bucket.Limit, now time.Time, c uint32, closed bool) (*ownedKey, error) {
	at, lost := n.startDrained(key, l, now, closed)
	if !lost && n.view != nil && n.view.unconfirmed(key) {
		// A flush applied while the takeover is unconfirmed (no check
		// is decided then): the bound is the first decision's after
		// the confirmation, as for a promoted view (boundPromoted).
		n.markPromoted(key)
	}
	drained := lost
	if n.st.marks.slots != nil {
		// evicted.go: the key was evicted here while not fresh.
		if m, ok := n.st.markedStart(h^markOwned, l, now); ok && (!drained || m.After(at)) {
			at, drained = m, true
		}
	}
	if !drained {
		return newOwned(&n.st.lims, key, l, now, c)
	}
	e, err := newOwned(&n.st.lims, key, l, at, c)
	if err != nil {
		return nil, err
	}
	if err := e.b.Drain(at, e.b.Config().Capacity()); err != nil {
		return nil, err
	}
	if lost {
		n.metrics.DrainedStarts.Add(1)
	}
	return e, nil
}

// noteStart records the instant of this node's first membership, on
// cluster time: its start, for startDrained.
func (n *Node) noteStart(now time.Time) {
	if n.started.IsZero() {
		n.started = n.bt(now)
	}
}

// takeoverStart returns the instant (cluster time) from which this node
// decides key's partition as owner, taken over from a failed member
// (confirm.go: the end of the takeover's wait), and whether it took the
// partition over so: while the wait runs, or after it while it owns the
// partition (noteTaken).
func (n *Node) takeoverStart(key string) (time.Time, bool) {
	v := n.view
	if v == nil || v.ring == nil {
		return time.Time{}, false
	}
	c := v.confirm
	if (c == nil || c.parts == nil) && len(n.taken) == 0 {
		return time.Time{}, false // no takeover: the key's hash is not needed
	}
	id := v.ring.PartitionOf(key)
	if c != nil && c.parts != nil && c.parts[id] {
		if c.until.IsZero() {
			return time.Time{}, false // unconfirmed: not decided here
		}
		return n.bt(c.until), true
	}
	at, ok := n.taken[id]
	return at, ok
}

// noteTaken records the partitions of c, whose wait is over, with the
// instant this node began deciding them (takeoverStart).
func (n *Node) noteTaken(c *confirmation) {
	if n.taken == nil {
		n.taken = map[int]time.Time{}
	}
	at := n.bt(c.until)
	for id := range c.parts {
		n.taken[id] = at
	}
}

// forgetTaken drops the takeovers and promoted keys of the partitions nv
// does not give this node.
func (n *Node) forgetTaken(nv *view) {
	owns := func(id int) bool {
		o, err := nv.ring.PartitionOwner(id)
		return err == nil && o == n.cfg.Self
	}
	for id := range n.taken {
		if nv.ring == nil || !owns(id) {
			delete(n.taken, id)
		}
	}
	for key := range n.promoted {
		if nv.ring == nil || !owns(nv.ring.PartitionOf(key)) {
			delete(n.promoted, key)
		}
	}
	for key, m := range n.late {
		if nv.ring == nil || !owns(nv.ring.PartitionOf(key)) {
			n.dropLate(key, m) // lateview.go
		}
	}
}

// markPromoted notes that key's cached view has just become this node's
// owned state; in a partition taken over from a failed member, the view
// is bounded at the key's next decision (boundPromoted).
func (n *Node) markPromoted(key string) {
	v := n.view
	if v == nil || v.ring == nil {
		return
	}
	id := v.ring.PartitionOf(key)
	if c := v.confirm; c == nil || c.parts == nil || !c.parts[id] {
		_, taken := n.taken[id]
		_, drained := n.drained[id] // dropped.go
		if !taken && !drained {
			return
		}
	}
	if n.promoted == nil {
		n.promoted = map[string]bool{}
	}
	n.promoted[key] = true
}

// boundPromoted bounds e, key's owned state promoted from a cached view
// (markPromoted), by the drained start a closed request gives a key
// with no state at now (startDrained): the view's tokens were the old
// owner's to spend too, so the state keeps the more consumed of the two.
// A promoted key is bounded once, at its first decision, whatever its
// policy; a flush applied while the takeover is unconfirmed is not that
// decision (no instant to bound from yet, takeoverStart): before, such a
// flush took the key out of the bound under any policy, and leased
// fail-closed checks spent the stale view again once the wait was over
// (TestTakeoverBoundsFlushWhileUnconfirmed: 150 admitted of a key of 100,
// now 100).
func (n *Node) boundPromoted(key string, e *ownedKey, l bucket.Limit, now time.Time, closed bool) {
	if !n.promoted[key] || n.view != nil && n.view.unconfirmed(key) {
		return
	}
	delete(n.promoted, key)
	at, drained := n.startDrained(key, l, now, closed)
	if !drained || e.b.Config().Algorithm != l.Algorithm {
		return
	}
	b, ok := newDrained(e.b.Config(), at) // evicted.go
	if !ok {
		return
	}
	if e.b.Merge(now, b) == nil {
		n.lateMerged(now, key, b) // lateview.go
		n.metrics.DrainedStarts.Add(1)
	}
}
