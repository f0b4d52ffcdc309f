package sync

import (
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/ring"
)

// Charging: every admission counts once in the key's bucket.
//
// A hit admitted without the key's owner (by the partition policy:
// local-share or fail-open, while the owner is unreachable or while this
// node is on a minority side, including the keys this node owns itself
// then) is recorded here as a debt of its key, in every mode. A debt is
// drained into the key's bucket at whichever node owns the key once that
// owner is reachable again and this node is not on a minority side:
//
//   - when the owner is another member, the hits go as pending hits of the
//     key's cached view (created if need be) with the next flush, which the
//     owner applies once (flushes are numbered per incarnation; a flush lost
//     with its target goes back to pending, membership.go's requeue). They
//     stay recorded as in transit until the answer to the flush that took
//     them says it applied them (it carries the key's state); an answer
//     that carries none makes them owed again (refused). If the key
//     becomes owned here first (the owner failed
//     and this node takes the key over, which resets a view's pending hits)
//     or is evicted, they become a debt again and are drained here. Before,
//     they were lost then: a crashed owner's successor that had sent its own
//     debt toward the dead owner admitted it again (133 of a key's 1000 in
//     TestFailoverChargesPaidBack);
//   - when the owner is this node, they are drained into its owned state,
//     once no hand-off of the key's partition is still awaited (a state
//     merged after the drain keeps the most consumed of the two, which would
//     lose either the drain or the hand-off's hits).
//
// A debt waits while neither holds: for the owner to be reachable, for
// this node to leave its minority side, for the hand-off. The debt of a key
// is capped at its capacity: a policy that admits without limit (fail-open)
// then costs the key at most one bucket afterwards, not a lockout as long
// as the flood was. Checks that are only peeks (hits 0) and the Concurrency
// limiter's permits (released by their holder, not refilled) are not
// charged. Metrics.PolicyHitsCharged counts the hits recorded,
// PolicyHitsDrained those the owner applied or drained here.

// charges holds a Node's debts.
type charges struct {
	// debt maps a key to the hits admitted without its owner and not yet
	// drained.
	debt map[string]*debt
	// byOwner groups the keys of debt by their owner on the ring of, so
	// that a tick visits only the debts whose owner can take them, not
	// every debt while the owners are cut off (nil of: not grouped yet;
	// regrouped when the ring changes).
	of      *ring.Ring
	byOwner map[string][]string
}

// debt is what a key owes its bucket: hits admitted under limit l, not yet
// drained, and transit of them handed to the key's cached view toward its
// owner (its pending hits, then a flush) and not yet acknowledged as
// applied. to names the member the flush that carries all of transit went
// to ("" while none does): only that member's answer to a flush of the key
// pays it. shown counts the hits of the debt that the view's state shows:
// those in transit when an owner's state was installed in it (install
// takes the pending and in-flight hits from it), which it still shows if
// they are dropped unsent or refused and owed again.
type debt struct {
	l                    bucket.Limit
	hits, transit, shown int64
	to                   string
}

// charge records hits of r admitted by the partition policy (see above).
func (n *Node) charge(r *check.Request) {
	if r.Hits <= 0 || r.Limit.Algorithm == bucket.Concurrency {
		return
	}
	ch := &n.chg
	d := ch.debt[r.Key]
	if d == nil {
		if len(ch.debt) >= n.cfg.MaxKeys {
			n.metrics.PolicyHitsUncharged.Add(r.Hits)
			return
		}
		if ch.debt == nil {
			ch.debt = map[string]*debt{}
		}
		d = &debt{}
		ch.debt[r.Key] = d
		if v := n.view; ch.of != nil && ch.of == v.ring {
			o := v.owner(r.Key)
			ch.byOwner[o] = append(ch.byOwner[o], r.Key)
		}
	}
	d.l = r.Limit
	capacity := max(1, r.Limit.Capacity())
	add := min(r.Hits, capacity-min(d.hits, capacity))
	d.hits += add
	n.metrics.PolicyHitsCharged.Add(add)
	n.metrics.PolicyHitsUncharged.Add(r.Hits - add)
}

// owes reports the hits this node owes key's bucket (0 when none), in
// transit or not.
func (n *Node) owes(key string) int64 {
	if d := n.chg.debt[key]; d != nil {
		return d.hits + d.transit
	}
	return 0
}

// unshown reports the hits of key's debt that its cached view does not
// show, hidden: those not yet handed to the view, and those in transit,
// which went into the view's pending hits but are in its state only once
// an owner's state is installed since (shown; ownHits); and unsent, the
// part not among the view's pending or in-flight hits.
func (n *Node) unshown(key string) (hidden, unsent int64) {
	d := n.chg.debt[key]
	if d == nil {
		return 0, 0
	}
	return max(0, d.hits+d.transit-d.shown), d.hits
}

// shownInView records that an owner's state was installed in key's view,
// which then shows the hits of its debt in transit, and no other (see
// debt).
func (n *Node) shownInView(key string) {
	if len(n.chg.debt) == 0 {
		return
	}
	if d := n.chg.debt[key]; d != nil {
		d.shown = d.transit
	}
}

// debtFlushed records that the pending hits of key's view e go with a
// flush to member to (flushItemOf): the debt in transit among them goes
// with it, unless hits of the key are still in flight (to a previous
// owner), which may hold some of it; no answer pays it then.
func (n *Node) debtFlushed(key string, e *cachedKey, to string) {
	if len(n.chg.debt) == 0 {
		return
	}
	if d := n.chg.debt[key]; d != nil && d.transit > 0 {
		d.to = to
		if e.inFlight > 0 {
			d.to = ""
		}
	}
}

// inTransit reports the hits of key's debt handed to a flush toward the
// key's owner and not yet acknowledged (0 when none).
func (n *Node) inTransit(key string) int64 {
	if d := n.chg.debt[key]; d != nil {
		return d.transit
	}
	return 0
}

// undeliver records that the pending hits of key's view were dropped
// unsent (flush.go's dropDirty): a debt in transit among them is owed
// again, and drained by the next tickCharges. The view's state still shows
// what it showed of them (shown).
func (n *Node) undeliver(key string) {
	if d := n.chg.debt[key]; d != nil && d.transit > 0 {
		d.hits, d.transit, d.to = d.hits+d.transit, 0, ""
	}
}

// refused records that member from answered a flush of hits of key with
// no state and not as a not-owner: it did not apply them (an item it could
// not apply, owner.go's applyFlushItem), or the answer is malformed. The
// view's hits are dropped then (installAck); a debt in transit that went
// with that flush is owed again, not left in transit for a later answer to
// pay.
func (n *Node) refused(key, from string) {
	if d := n.chg.debt[key]; d != nil && d.transit > 0 && d.to == from {
		n.undeliver(key)
	}
}

// delivered records that member from, key's owner, applied a flush of hits
// of it: the debt in transit is paid if that flush carried it (debtFlushed).
func (n *Node) delivered(key, from string, hits int64) {
	d := n.chg.debt[key]
	if d == nil || d.transit == 0 || d.to != from || hits < d.transit {
		return
	}
	n.metrics.PolicyHitsDrained.Add(d.transit)
	d.shown = max(0, d.shown-d.transit)
	d.transit, d.to = 0, ""
	if d.hits == 0 {
		delete(n.chg.debt, key)
	}
}

// tickCharges drains the debts whose key's owner can take them (see
// above). Only the debts of owners that can are visited (byOwner), in
// sorted key order, so that the flushes are the same from run to run.
func (n *Node) tickCharges(now time.Time, v *view) {
	ch := &n.chg
	if len(ch.debt) == 0 || len(v.lost) > 0 || n.leaving || v.ring == nil {
		return
	}
	if ch.of != v.ring {
		ch.of, ch.byOwner = v.ring, map[string][]string{}
		for key := range ch.debt {
			o := v.owner(key)
			ch.byOwner[o] = append(ch.byOwner[o], key)
		}
	}
	var keys []string
	var owners []string
	for owner, ks := range ch.byOwner {
		if owner != n.cfg.Self {
			if p := v.peers[owner]; p == nil || p.gone || p.down(now) {
				continue
			}
		}
		keys = append(keys, ks...)
		owners = append(owners, owner)
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // a debt paid (delivered) and charged again is listed twice
	c := coarse(now)
	for _, key := range keys {
		d := ch.debt[key]
		if d == nil {
			continue // paid meanwhile (delivered)
		}
		owner := v.owner(key)
		s := n.st.shardOf(key)
		if d.transit > 0 {
			// Still with a flush toward the owner, unless the key's view
			// is gone or became this node's own state: its pending hits
			// were reset then, so the debt is drained again.
			if e := n.st.lookupCached(s, key); e != nil {
				continue
			}
			d.hits, d.transit, d.shown, d.to = d.hits+d.transit, 0, 0, ""
		}
		if owner == n.cfg.Self {
			if n.awaitingPartition(now, v, key) || v.unconfirmed(key) || !n.wantLease(now, v) {
				// confirm.go, ownerlease.go: the real owner may be another.
				// A confirmed takeover drains at once, during its wait for
				// the old owner's lease: the state it decides on when the
				// wait ends then holds the debt, and cached mode, which
				// decides the key from the confirmation, spends no token
				// the debt had taken (draining only after the wait, a
				// crashed owner's key took 1174-1178 hits of 1000 in
				// cached mode under local-share, 999 before the lease).
				continue
			}
			e, _, err := n.ownedEntry(s, n.st.hash(key), key, d.l, 0, now, c, false) // a debt: admitted by another policy
			if err == nil {
				_ = e.b.Drain(n.bt(now), d.hits)
				n.markChanged(s, key, e, -1)
				n.metrics.PolicyHitsDrained.Add(d.hits)
			}
			delete(ch.debt, key)
			continue
		}
		p := v.peers[owner]
		if p == nil || p.gone || p.down(now) {
			continue
		}
		e, _, _, _, err := n.cachedEntry(s, key, d.l, 0, now, c)
		if err != nil {
			delete(ch.debt, key)
			continue
		}
		if e == nil {
			continue // being handed off: flushed once it is a view
		}
		// The debt goes whole with the key's next flush, whose answer
		// alone tells it applied (debtFlushed, delivered): one already in
		// flight does not hold it. Before, the debt waited for no flush of
		// the key to be in flight, which a key flushed back to back never
		// left, and its node's budget counted it as hidden all along
		// (TestHotKeyDebtSent).
		e.pending = min(e.pending+d.hits, math.MaxInt64/2)
		n.markDirty(s, key, e, p)
		d.hits, d.transit, d.to = 0, d.hits, ""
	}
	for _, owner := range owners {
		ks := ch.byOwner[owner]
		slices.Sort(ks)
		ks = slices.DeleteFunc(slices.Compact(ks), func(key string) bool { return ch.debt[key] == nil })
		if len(ks) == 0 {
			delete(ch.byOwner, owner)
			continue
		}
		ch.byOwner[owner] = ks
	}
}

// awaitingPartition reports whether key's partition, gained by this node,
// still awaits its hand-off at now (whether or not this node holds state
// for the key).
func (n *Node) awaitingPartition(now time.Time, v *view, key string) bool {
	if len(v.await) == 0 || n.awaitOver(now, v) {
		return false
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	return ok && now.Before(a.until)
}
