package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// degrade decides r without its owner, by the partition policy pol, and
// marks resp Degraded:
//
//   - fail-open admits (Remaining reports the full capacity, unknown);
//   - fail-closed rejects, retry after UnreachableAfter;
//   - local-share decides on a local bucket whose limit (and burst) is the
//     key's divided by the number of members this node sees, started from
//     this node's view of the key when it has one, or else from the backup
//     of the key's state it holds for the owner (owner mode: the member that
//     takes the key over if its owner fails), so that a partition, or the
//     time it takes to detect a crash, does not hand out a fresh share of a
//     bucket known to be spent. A check forwarded to a node taking the key
//     over, answered not-owner, starts it from that node's state too
//     (seedShare).
//
// In every mode the hits either policy admits are recorded and charged to
// the key's bucket at its owner once that is reachable again (charge.go):
// its bucket then counts what the partition admitted, once. Fail-open's
// charge is capped at one bucket per key.
func (n *Node) degrade(now time.Time, c uint32, v *view, r *check.Request, resp *check.Response, pol check.Policy) {
	resp.Degraded = true
	capacity := r.Limit.Capacity()
	switch pol {
	case check.PolicyFailOpen:
		resp.Decision = bucket.Decision{Allowed: true, Limit: capacity, Remaining: capacity, ResetAt: n.bt(now)}
	case check.PolicyFailClosed:
		resp.Decision = bucket.Decision{Limit: capacity, RetryAfter: n.cfg.UnreachableAfter}
	default:
		n.decideShare(now, c, v, r, resp)
	}
	n.admitted(now, r, resp)
	if resp.Err == nil && resp.Allowed {
		n.charge(r) // charge.go: drained into the key's bucket later
	}
}

// shareLimit returns l with its limit and burst divided by members (at
// least 1 each).
func shareLimit(l bucket.Limit, members int) bucket.Limit {
	m := int64(max(members, 1))
	l.Limit = max(1, l.Limit/m)
	if l.Burst > 0 {
		l.Burst = max(1, l.Burst/m)
	}
	return l
}

// decideShare decides r on the key's local-share bucket.
func (n *Node) decideShare(now time.Time, c uint32, v *view, r *check.Request, resp *check.Response) {
	n.decideShareOn(now, c, v, n.st.shardOf(r.Key), r, resp, shareLimit(r.Limit, v.size()))
}

// decideShareOn is decideShare on s, the key's shard, l the share's limit.
func (n *Node) decideShareOn(now time.Time, c uint32, v *view, s *shard, r *check.Request, resp *check.Response, l bucket.Limit) {
	e := n.currentShare(c, s, r.Key)
	if e == nil {
		var err error
		if e, resp.Reconfigured, err = n.newShare(now, c, s, r, l, nil); err != nil {
			resp.Err = err
			return
		}
	} else if resp.Reconfigured, resp.Err = configure(&e.b, l, n.bt(now), r.Hits); resp.Err != nil {
		return
	}
	e.stamp(c)
	resp.Decision, resp.Err = take(e.b, n.bt(now), r)
}

// currentShare returns key's local-share bucket of this episode, or nil. A
// share left from an earlier episode (unused for UnreachableAfter) is
// removed: this one starts again from what is known now (the view may have
// been spent since).
func (n *Node) currentShare(c uint32, s *shard, key string) *localKey {
	e := s.share[key]
	if e != nil && ageOf(c, e.used()) > toCoarse(n.cfg.UnreachableAfter) {
		n.st.removeFrom(s.share, key, e)
		e = nil
	}
	return e
}

// newShare starts r's key's local share of limit l in s, its shard, from
// what this node knows of the key (shareStart) merged, keeping the most
// consumed, with also when not nil (a state the key's taking-over owner
// answered with, seedShare), and reports whether the state's limit was
// changed to l.
func (n *Node) newShare(now time.Time, c uint32, s *shard, r *check.Request, l bucket.Limit, also bucket.Bucket) (*localKey, bool, error) {
	e, err := newLocal(&n.st.lims, l, n.bt(now), c)
	if err != nil {
		return nil, false, err
	}
	from := n.shareStart(now, s, r)
	switch {
	case from == nil:
		from = also
	case also != nil:
		_ = from.Merge(n.bt(now), also) // another algorithm: what is here
	}
	reconf := false
	if from != nil && from.Config().Algorithm == l.Algorithm {
		if b, rc, err := reconfigure(from, l, n.bt(now), r.Hits); err == nil {
			e.b, reconf = b, rc
		}
	}
	if m := n.st.markedBucket(n.st.hash(r.Key)^markShare, l, n.bt(now)); m != nil {
		// evicted.go: a share of this key evicted in this episode (or
		// one still refilling): at least as consumed as its mark says
		// (most consumed wins). A view recreated since, fresh, would
		// start the share full again.
		_ = e.b.Merge(n.bt(now), m)
	}
	n.st.insertInto(s, s.share, r.Key, e, n.bt(now), c)
	return e, reconf, nil
}

// seedShare starts, at a not-owner answer to it from a node taking its key
// over, the key's local share from the state the answer carries
// (waitState), merged with what this node knows, so that the check, and
// the episode's next ones, are decided by the policy from it: by
// degradeForward at once, or once it is held no longer (contest.go). A
// share of this episode that exists already is kept and marked used: the
// answers keep it current while the taker waits. Nothing for a probe, a
// check passed on for another node (that node applies its policy) or one
// whose policy starts from no state.
func (n *Node) seedShare(now time.Time, c uint32, it *fwdItem, state []byte) {
	if len(state) == 0 || it.here || it.relay || it.pol == check.PolicyFailOpen || it.pol == check.PolicyFailClosed {
		return
	}
	s := n.st.shardOf(it.req.Key)
	if e := n.currentShare(c, s, it.req.Key); e != nil {
		e.stamp(c)
		return
	}
	b, ok := n.decodeState(&peerv1.KeyState{Key: it.req.Key, State: state})
	if !ok {
		return
	}
	_, _, _ = n.newShare(now, c, s, &it.req, shareLimit(it.req.Limit, n.view.size()), b)
}

// shareStart returns the state a new local share of r's key starts from,
// a copy, or nil: this node's view of the key, or else the backup of it
// this node holds, or else a bucket drained as the key's view's eviction
// mark says.
func (n *Node) shareStart(now time.Time, s *shard, r *check.Request) bucket.Bucket {
	if base := n.st.lookup(s, r.Key); base != nil {
		return headOf(base).b.Clone()
	}
	if b := n.heldBucket(now, r.Key); b != nil {
		return b
	}
	// evicted.go: a view evicted, started as its mark says. Before, a
	// flood of fresh keys through a node deciding a spent key by
	// local-share evicted its view and its share, and the next check
	// started a fresh share: a share per flood, not per episode
	// (TestShareFloodKeepsSpentKeySpent: 500 admitted of a key spent, 0
	// now).
	return n.st.markedBucket(n.st.hash(r.Key)^markView, r.Limit, n.bt(now))
}
