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
// policy fail-closed, drained as of its start, refilling at its rate: over
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

// startDrained reports, for a key of limit l this node starts to own from
// no state at now, the instant from which it refills, drained, and whether
// it must: a Joining node under fail-closed, within a refill of its start.
func (n *Node) startDrained(l bucket.Limit, now time.Time) (time.Time, bool) {
	if !n.cfg.Joining || n.cfg.Policy != check.PolicyFailClosed || n.started.IsZero() ||
		l.Algorithm == bucket.Concurrency || l.Limit <= 0 {
		return time.Time{}, false
	}
	refill := time.Duration(float64(l.Period)*float64(l.Capacity())/float64(l.Limit)) + l.Period
	if now.Sub(n.started) >= refill {
		return time.Time{}, false
	}
	return n.started, true
}

// newOwnedBucketEntry returns a new entry of key under l for this node to
// own, at now (cluster time): a fresh bucket, or one drained as of this
// node's start (startDrained).
func (n *Node) newOwnedBucketEntry(key string, l bucket.Limit, now time.Time, c uint32) (*entry, error) {
	at, drained := n.startDrained(l, now)
	if !drained {
		e, _, err := newKeyedEntry(key, l, now, c)
		return e, err
	}
	e, _, err := newKeyedEntry(key, l, at, c)
	if err != nil {
		return nil, err
	}
	if err := e.b.Drain(at, e.b.Config().Capacity()); err != nil {
		return nil, err
	}
	n.metrics.DrainedStarts.Add(1)
	return e, nil
}

// noteStart records the instant of this node's first membership, on
// cluster time: its start, for startDrained.
func (n *Node) noteStart(now time.Time) {
	if n.started.IsZero() {
		n.started = n.bt(now)
	}
}
