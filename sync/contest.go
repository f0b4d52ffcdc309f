package sync

import "time"

// Contested owners. The members learn of a membership change at different
// times (a leave's announcement, gossip), so for a moment two of them can
// each name the other as the owner of a key: one holds the new ring, the
// other the old. A check one forwards to the other is answered ErrNotOwner,
// and the asker cannot pass it on, since its own ring names the member that
// refused it. Deciding it by the partition policy there and then would
// start a fresh share of a key that may be spent (TestLeaveSchedules). So
// it waits for the two rings to agree, which takes a leave announcement or
// a gossip round: whichever of the two was behind, the other had handed the
// key's state to it before answering (one ordered queue per peer), so the
// owner they agree on holds the state.
//
//   - On Tick, a waiting check whose owner in this node's view is no longer
//     the member that refused it goes to its owner now (reroute's
//     rules: decided here when that is this node).
//   - Otherwise it is sent to the same member again, which may have caught
//     up: contestRetry after the first refusal, then twice as long after
//     each new one (25, 50, 100, 200 ms with the defaults), so that a hot
//     key's held checks do not multiply its traffic.
//   - A check refused for RequestTimeout in all is decided by the partition
//     policy, as an unanswered one is.
//
// Only this node's own clients' checks wait: a check relayed for another
// node is answered ErrNotOwner at once, and that node waits.

// contestedCheck is a check whose owner in this node's view refused it.
type contestedCheck struct {
	it      *fwdItem
	from    *peer
	retryAt time.Time
}

// contestRetry is how long a check refused k times before (at most 8)
// waits before it is sent again to the member that refused it.
func (n *Node) contestRetry(k uint8) time.Duration {
	return max(n.cfg.TickInterval, n.cfg.RequestTimeout/20) << k
}

// holdContested makes it, answered ErrNotOwner by from, wait for the rings
// to agree (see above) and reports whether it does: only when v names from
// as the key's owner and the check has not waited RequestTimeout already.
func (n *Node) holdContested(now time.Time, v *view, from *peer, it *fwdItem) bool {
	if it.here || it.relay || v.owner(it.req.Key) != from.name {
		return false
	}
	if it.contestUntil.IsZero() {
		it.contestUntil = now.Add(n.cfg.RequestTimeout)
	}
	if !now.Before(it.contestUntil) {
		return false
	}
	n.metrics.Contested.Add(1)
	n.dur.contested = append(n.dur.contested, contestedCheck{it: it, from: from, retryAt: now.Add(n.contestRetry(it.contests))})
	it.contests = min(it.contests+1, 8)
	return true
}

// tickContested sends on, sends again or decides the contested
// checks that are due (see above).
func (n *Node) tickContested(now time.Time, v *view) {
	d := &n.dur
	if len(d.contested) == 0 {
		return
	}
	c := coarse(now)
	waiting := d.contested
	d.contested = nil // checks refused again during the pass are added anew
	for _, ct := range waiting {
		it := ct.it
		owner := v.owner(it.req.Key)
		switch {
		case owner != ct.from.name:
			if !n.routeAgain(now, c, v, ct.from, it) {
				n.degradeForward(now, c, it)
			}
		case !now.Before(it.contestUntil):
			n.degradeForward(now, c, it)
		case now.Before(ct.retryAt):
			d.contested = append(d.contested, ct)
		case v.peers[ct.from.name] != ct.from || ct.from.gone || ct.from.down(now):
			n.degradeForward(now, c, it)
		default:
			n.queueForward(now, ct.from, it)
		}
	}
}
