package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
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
//     bucket known to be spent.
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
	l := shareLimit(r.Limit, v.size())
	s := n.st.shardOf(r.Key)
	var held bucket.Bucket
	if s.share[r.Key] == nil && n.st.lookup(s, r.Key) == nil {
		// A new share with no view to start from: a held backup may be one.
		held = n.heldBucket(now, r.Key)
	}
	n.decideShareOn(now, c, v, s, r, resp, l, held)
}

// decideShareOn is decideShare on s, the key's shard; held is
// a backup of the key's state to start a new share from when this node has
// no view of the key, or nil.
func (n *Node) decideShareOn(now time.Time, c uint32, v *view, s *shard, r *check.Request, resp *check.Response, l bucket.Limit, held bucket.Bucket) {
	e := s.share[r.Key]
	if e != nil && ageOf(c, e.used()) > toCoarse(n.cfg.UnreachableAfter) {
		// A share left from an earlier episode: this one starts again
		// from what is known now (the view may have been spent since).
		n.st.removeFrom(s.share, r.Key, e)
		e = nil
	}
	if e == nil {
		var err error
		if e, err = newLocal(&n.st.lims, l, n.bt(now), c); err != nil {
			resp.Err = err
			return
		}
		from := held
		if base := n.st.lookup(s, r.Key); base != nil {
			from = headOf(base).b.Clone()
		}
		if from != nil && from.Config().Algorithm == l.Algorithm {
			if b, reconf, err := reconfigure(from, l, n.bt(now), r.Hits); err == nil {
				e.b, resp.Reconfigured = b, reconf
			}
		}
		n.st.insertInto(s, s.share, r.Key, e, n.bt(now), c)
	} else if resp.Reconfigured, resp.Err = configure(&e.b, l, n.bt(now), r.Hits); resp.Err != nil {
		return
	}
	e.stamp(c)
	resp.Decision, resp.Err = take(e.b, n.bt(now), r)
}
