package sync

import (
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Dropped unowned states. A leaving node keeps the states it has no owner
// to hand to (leave.go, keepUnowned) within a cap (budget.go, "Side
// structures"): beyond it, a state is not kept, or a kept one is dropped.
// The key's late owner then had no state of it and started it fresh: a
// flood of keys handed to a leaving node gave a victim's spent key its
// whole burst again (TestDroppedUnownedStateKeepsKeySpent: 61 admitted
// of a key of 60 a minute spent 6 s before, at most 7 refilled; 2 now,
// the refill since the hand-off). So the leaving node records the ring
// partition of each state it drops that is not full, with the instant
// the latest of them would be full again (keepDroppedState: at most
// PartitionCount entries), and hands the partitions to their owners after
// the states (handDrained, Handoff.drained_partitions), as soon as a view
// has them, on the same queue. The owner starts every key of them that it
// has no state of, whatever the request's policy, drained as of the
// hand-off (noteDrained, startDrained; a markable algorithm's, as the
// evicted marks: not a SmoothWarmingUp key, whose drained start is its
// hottest), as it does a partition gained
// from a member that left without announcing it (leave.go,
// noteLeftUnannounced): the leaving node decides nothing of a key it has
// no owner for (ErrLeaving), and hands the partitions, on each owner's
// queue, before it answers that owner anything, so a bucket drained at
// the hand-off is at least as consumed as the dropped state would be
// there. The cost: every key of those partitions first decided within a
// refill of the hand-off admits its rate since, not its burst, once
// (1/PartitionCount of the key space a partition; a flood drops the
// states full again soonest first, so the partitions of states that carry
// most are the last to be marked, and a partition is handed only while
// one of its dropped states would not be full yet). A record the owner
// already had of a key of them when the hand-off came (it decided the key
// apart from the leaving node, before it learned of it) is drained as of
// the hand-off too, as a handed state would have been merged into it
// (boundDrainedOwned): all its tokens left, once; and so is a state it
// kept aside on its return from a minority side (deposed, keptState).
//
// The states a node keeps for an owner lost to a partition (lostowner.go)
// are capped by the same rule, and their dropped partitions recorded the
// same way, per lost owner (keepDroppedForLost), and handed by
// handDrained after the states when that owner is live again
// (handBackToLost): TestDroppedLostOwnerStateKeepsKeySpent, 61 admitted
// of the victim by the owner back, at most 7 refilled; 2 now.

// keepDroppedState records in *into (unownedDrained once leaving, or a
// lost owner's in forLostDrained) the partition of ks, a state dropped
// from those kept to hand on, or not kept, if it is not full at t, the
// bucket time (a full state, or one that does not decode, carries
// nothing).
func (n *Node) keepDroppedState(into *map[int]time.Time, t time.Time, ks *peerv1.KeyState) {
	b, err := bucket.Decode(ks.State)
	if err != nil || b.Idle(t) {
		return
	}
	d, err := b.Take(t, 0)
	if err != nil || !d.ResetAt.After(t) {
		return
	}
	keepDrainedUntil(into, ring.PartitionOf(ks.Key, n.cfg.Ring.PartitionCount), d.ResetAt)
}

// keepDrainedUntil records partition id in *into for handDrained, until
// full (the bucket time), or later if it is recorded until later already.
func keepDrainedUntil(into *map[int]time.Time, id int, full time.Time) {
	if *into == nil {
		*into = map[int]time.Time{}
	}
	if full.After((*into)[id]) {
		(*into)[id] = full
	}
}

// drainedAlways is the instant until which a partition handed on is
// recorded (keepDrainedOf, noteDrained): the hand-off does not say when
// its states would be full again, so it goes to the next owner whenever
// that one comes.
var drainedAlways = time.Unix(0, math.MaxInt64)

// handDrained hands the partitions recorded by keepDroppedState to their
// owners in v that are live members (in partition order: reproducible),
// each a hand-off after the states, and forgets them; those of no live
// owner wait for a later view. A partition whose dropped states are all
// full again by now is forgotten, not handed: a flood's states, full
// again soon, cost the late owner nothing once they would have refilled
// (TestUnownedStatesBounded: 100,000 keys of one hit of 60 a minute
// dropped mark all 1,021 partitions; TestLapsedDroppedPartitionsNotHanded:
// 1,000 mark 621, and an owner that comes 2 s later is handed none).
func (n *Node) handDrained(now time.Time, v *view) {
	if len(n.unownedDrained) == 0 || v.ring == nil {
		return
	}
	ids := make([]int, 0, len(n.unownedDrained))
	for id := range n.unownedDrained {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := map[*peer][]uint32{}
	t := n.bt(now)
	for _, id := range ids {
		o, err := v.ring.PartitionOwner(id)
		if err != nil || !n.unownedDrained[id].After(t) {
			delete(n.unownedDrained, id) // not a partition of this ring, or lapsed
			continue
		}
		if p := v.peers[o]; p != nil && !p.gone {
			out[p] = append(out[p], uint32(id))
			delete(n.unownedDrained, id)
		}
	}
	for _, name := range v.names {
		if p := v.peers[name]; p != nil && len(out[p]) > 0 {
			n.sendHandoff(now, p, &peerv1.Handoff{DrainedPartitions: out[p]})
		}
	}
}

// keepDrainedOf records again the partitions of b, a hand-off to p that p
// will not take (it left: abandon) or that moved from p to another member
// of v (followHandoffs), for handDrained to hand on. A partition now this
// node's is not: it recorded it as drained when it was handed it
// (noteDrained), and a leaving node owns none.
func (n *Node) keepDrainedOf(v *view, p *peer, b *handoffBatch) {
	for _, id := range b.msg.DrainedPartitions {
		if v.ring != nil {
			o, err := v.ring.PartitionOwner(int(id))
			if err == nil && (o == n.cfg.Self || v.peers[o] == p && !p.gone) {
				continue // this node's, or still p's: the hand-off to it stands
			}
		}
		keepDrainedUntil(&n.unownedDrained, int(id), drainedAlways)
	}
}

// noteDrained records the partitions ids, handed as drained by p, a
// leaving member (Handoff.drained_partitions), as drained as of now:
// startDrained starts their keys drained from then. It takes at most
// PartitionCount of them, each in range (validDrained); the others are
// counted malformed. As a state handed here (onHandoff), a partition
// whose owner in v is another live member than p is passed on to it, and
// one with no live owner while this node leaves is kept for a later one
// (handDrained).
func (n *Node) noteDrained(now time.Time, v *view, p *peer, ids []uint32) {
	if len(ids) == 0 {
		return
	}
	ids = n.validDrained(ids)
	if n.drained == nil {
		n.drained = map[int]time.Time{}
	}
	at := n.bt(now)
	n.boundDrainedOwned(at, ids)
	for _, id := range ids {
		n.drained[int(id)] = at
		if v.ring == nil {
			continue
		}
		o, err := v.ring.PartitionOwner(int(id))
		if err != nil || o == n.cfg.Self {
			continue
		}
		if q := v.peers[o]; q != nil && q != p && !q.gone || q == nil && n.leaving {
			keepDrainedUntil(&n.unownedDrained, int(id), drainedAlways)
		}
	}
	n.handDrained(now, v)
}

// drainedStart returns the instant from which key's partition is drained
// (noteDrained), and whether it is.
func (n *Node) drainedStart(key string) (time.Time, bool) {
	if len(n.drained) == 0 {
		return time.Time{}, false
	}
	at, ok := n.drained[ring.PartitionOf(key, n.cfg.Ring.PartitionCount)]
	return at, ok
}

// boundDrainedOwned drains as of t (the bucket time) the owned records of
// the partitions ids (noteDrained) that hold a markable algorithm's
// bucket, and the states of their keys kept aside on a return from a
// minority side (quorum.go, deposed: keptState): the dropped state of
// their key, had it been handed, would have been merged into them keeping
// the most consumed, and a bucket drained at the hand-off is at least
// that (TestDroppedStateBoundsOwnedRecord: a victim its owner had checked
// once before the hand-off admitted 61 more after it, at most 7 refilled;
// 1 now; TestDroppedLostOwnerStateBoundsDeposedState: an owner back from
// its minority side started the victim from its kept state, 61 admitted,
// at most 7 refilled; 2 now). The cost: one pass over the owned records
// and the kept ones (at most MaxKeys each) a hand-off that names
// partitions, and the tokens left of every owned key of them, once.
func (n *Node) boundDrainedOwned(t time.Time, ids []uint32) {
	count := n.cfg.Ring.PartitionCount
	parts := make(map[int]bool, len(ids))
	for _, id := range ids {
		parts[int(id)] = true
	}
	type hit struct {
		s   *shard
		key string
		e   *ownedKey
	}
	var hits []hit
	for i := range n.st.shards {
		s := &n.st.shards[i]
		for key, e := range s.own.all() {
			if parts[ring.PartitionOf(key, count)] && markable(e.b.Config().Algorithm) {
				hits = append(hits, hit{s, key, e})
			}
		}
	}
	for _, h := range hits {
		if drainAt(h.e.b, t) {
			n.markChanged(h.s, h.key, h.e, -1) // its backup and the views of it
		}
	}
	for key, b := range n.dur.kept {
		if parts[ring.PartitionOf(key, count)] && markable(b.Config().Algorithm) {
			drainAt(b, t)
		}
	}
}

// drainAt merges into b a bucket of its limit drained at t (the bucket
// time), keeping the most consumed, and reports whether it did.
func drainAt(b bucket.Bucket, t time.Time) bool {
	m, ok := newDrained(b.Config(), t) // evicted.go
	return ok && b.Merge(t, m) == nil
}
