package sync

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Announced leaves. A node that leaves gracefully hands its keys to their
// new owners at once, but the others learn of its leave from gossip only
// later (about 90 ms on a LAN). In between they would still send it
// owner-mode checks, which it can no longer decide (its state has moved),
// and the checks would fall to the partition policy on a fresh share
// bucket. So the leave is announced in-band, on the same ordered queue as
// the hand-off:
//
//   - Leave sends every peer, after the hand-offs of the keys it owned, a
//     Handoff with leaving set (acknowledged and retried like any hand-off;
//     HandedOff waits for it).
//   - A peer that receives it takes the leaving node off its ring at once
//     (depart): the keys it had just been handed become its own, and
//     the checks it had in flight to the leaving node are sent again to
//     their new owners (reroute), which have the state, since the
//     hand-off came first on the same queue. A forward answered ErrLeaving
//     is itself such an announcement.
//   - The leaving node stays off the peer's ring until the driver's
//     membership drops it, or a message from another incarnation of it
//     arrives (it restarted): then the driver's membership applies again.

// announceLeave sends every peer of v (the view without this node)
// a leaving hand-off.
func (n *Node) announceLeave(now time.Time, v *view) {
	for _, name := range v.names {
		p := v.peers[name]
		if p == nil {
			continue
		}
		p.hoSeq++
		msg := &peerv1.Handoff{Seq: p.hoSeq, Leaving: true}
		p.hoOut = append(p.hoOut, &handoffBatch{msg: msg, sentAt: now})
		n.wake(p)
		n.send(p.name, handoffBody{msg}) // kept in hoOut, never modified again: shared (see Transport)
		n.metrics.HandoffsSent.Add(1)
	}
}

// departedPeer is a member that announced its leave.
type departedPeer struct {
	inc uint64
	p   *peer
}

// depart takes p, whose incarnation inc announced its leave, off the
// ring now.
func (n *Node) depart(now time.Time, p *peer, inc uint64) {
	d := &n.dur
	if prev, ok := d.departed[p.name]; ok && prev.inc == inc {
		return
	}
	if d.departed == nil {
		d.departed = map[string]departedPeer{}
	}
	d.departed[p.name] = departedPeer{inc: inc, p: p}
	n.applyMembers(now)
}

// withoutDeparted returns names without the members that announced
// their leave, and forgets the announcements of members the driver's
// membership no longer lists.
func (n *Node) withoutDeparted(names []string) []string {
	d := &n.dur
	if len(d.departed) == 0 {
		return names
	}
	for name := range d.departed {
		if !slices.Contains(n.members, name) {
			delete(d.departed, name)
		}
	}
	return slices.DeleteFunc(names, func(s string) bool {
		_, gone := d.departed[s]
		return gone
	})
}

// fromDeparted handles an envelope from a sender that is not a member of v
// and that may have announced its leave. From another incarnation (it
// restarted) the announcement is forgotten, and the returned view and peer
// include it again if the driver's membership does. From the incarnation
// that left, the returned peer is its state as a member: what it sends
// while it finishes its leave (flushes of its pending hits and returned
// lease tokens, hand-offs sent again, checks of its clients) is handled as
// from a member, against a view without it.
func (n *Node) fromDeparted(now time.Time, v *view, env *peerv1.Envelope) (*view, *peer) {
	dp, ok := n.dur.departed[env.From]
	if !ok {
		return v, nil
	}
	if env.Incarnation != dp.inc {
		delete(n.dur.departed, env.From)
		n.applyMembers(now)
		v = n.view
		return v, v.peers[env.From]
	}
	return v, dp.p
}

// States a leaving node has no one to hand to.
//
// A leaving node hands each key it owns to the key's owner on its ring
// without itself. That ring can name no live member: the others failed or
// announced their own leave, or the one a key went to left in turn
// (abandon), or a hand-off came for a key that has no owner here. The
// state then stayed as a cached view, which goes to no one, while a member
// this node did not know yet (restarted, its start not yet gossiped here)
// came to own the key and, on this node's "leaving" answer, started it
// drained as of its own start: what this node admitted after that start
// counted twice (the fault checker's owner seed 759 with -notify 2.5s: n1
// restarted, n2 left, n3, the owner, left with neither on its ring, then
// learned of n1: +5.44; TestLeavingNodeHandsUnownedStateToLateMember).
// The rule: such a state is kept (keepUnowned) and handed to the key's
// owner as soon as a view of this node has one (handUnowned), in the
// change that brings that member in, before this node answers anything of
// it: the member merges it keeping the most consumed, and its checks,
// which this node answers "leaving" on the same queue, are decided on it.

// keepUnowned keeps ks, a state of a key that has no live owner in this
// leaving node's view, merged keeping the most consumed into what is kept
// of the key already.
func (n *Node) keepUnowned(now time.Time, ks *peerv1.KeyState) {
	if n.unowned == nil {
		n.unowned = map[string]*peerv1.KeyState{}
	}
	if old := n.unowned[ks.Key]; old != nil {
		b, err := bucket.Decode(ks.State)
		if err != nil {
			return
		}
		merged, ok := n.mergedKeyState(now, old, b, ks.Demand) // lostowner.go
		if !ok {
			return // another algorithm: the first state stands
		}
		n.st.chargeKept(&n.unownedBytes, -lostCharge(old))
		ks = merged
	} else {
		ks = &peerv1.KeyState{Key: strings.Clone(ks.Key), State: slices.Clone(ks.State), Demand: ks.Demand}
		if !n.roomForUnowned(now, ks) {
			return
		}
	}
	n.unowned[ks.Key] = ks
	n.st.chargeKept(&n.unownedBytes, lostCharge(ks))
}

// roomForUnowned reports whether ks, the state of a key not kept yet, may
// be kept (keepUnowned), making room for it if it must. The states kept
// are a side structure (budget.go): at most MaxKeys, and at most half the
// byte budget (a member handing a leaving node 100,000 keys it had no
// owner for grew them by as many, TestUnownedStatesBounded). An honest
// leaving node keeps at most the keys its store held, plus those handed
// to it while it left. A state that cannot be kept is lost to the key's
// late owner, which starts the key drained as of the hand-off of its
// partition (dropped.go) rather than from the state, and so every key of
// the partition it has no state of; so the states given up are those that
// carry least: a state full at now (its merge takes nothing off the
// owner's) is not kept, and room is made by dropping the eighth of the
// kept states that would be full again soonest (ties broken by key). A
// spent key's state outlives a flood of keys spent less long.
func (n *Node) roomForUnowned(now time.Time, ks *peerv1.KeyState) bool {
	kept := n.roomForKept(now, ks, func() int { return len(n.unowned) }, &n.unownedBytes, func(t time.Time) {
		kss := make([]*peerv1.KeyState, 0, len(n.unowned))
		for _, k := range n.unowned {
			kss = append(kss, k)
		}
		for _, k := range soonestFull(t, kss) {
			n.st.chargeKept(&n.unownedBytes, -lostCharge(k))
			delete(n.unowned, k.Key)
			n.metrics.FloodCapped.Add(1)
			n.keepDroppedState(&n.unownedDrained, t, k) // dropped.go
		}
	})
	if !kept {
		n.keepDroppedState(&n.unownedDrained, n.bt(now), ks)
	}
	return kept
}

// roomForKept reports whether ks, a state not kept yet in a side
// structure of states kept to hand on (budget.go: keepUnowned's, or
// keepForLost's), holding count() states charged *bytes, may be kept,
// making room for it if it must: a state full at now is not kept, and
// drop(t), t the bucket time, drops the eighth of the kept states full
// again soonest (soonestFull) until there is room.
func (n *Node) roomForKept(now time.Time, ks *peerv1.KeyState, count func() int, bytes *int64, drop func(t time.Time)) bool {
	need := lostCharge(ks)
	if !n.st.sideFull(count(), *bytes, need) {
		return true
	}
	t := n.bt(now)
	if b, err := bucket.Decode(ks.State); err != nil || b.Idle(t) {
		n.metrics.FloodCapped.Add(1)
		return false
	}
	for count() > 0 && n.st.sideFull(count(), *bytes, need) {
		drop(t)
	}
	return !n.st.sideFull(count(), *bytes, need)
}

// soonestFull returns the eighth of kss (at least one) that are full
// again soonest after t, the bucket time: first those that do not decode,
// or are full already; ties broken by key.
func soonestFull(t time.Time, kss []*peerv1.KeyState) []*peerv1.KeyState {
	type cand struct {
		full time.Time
		ks   *peerv1.KeyState
	}
	cands := make([]cand, 0, len(kss))
	for _, ks := range kss {
		c := cand{ks: ks}
		if b, err := bucket.Decode(ks.State); err == nil {
			if d, err := b.Take(t, 0); err == nil {
				c.full = d.ResetAt
			}
		}
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(a.full.Compare(b.full), cmp.Compare(a.ks.Key, b.ks.Key))
	})
	out := make([]*peerv1.KeyState, 0, max(1, len(cands)/8))
	for _, c := range cands[:min(len(cands), max(1, len(cands)/8))] {
		out = append(out, c.ks)
	}
	return out
}

// handUnowned hands the states kept by keepUnowned to their keys' owners
// in v when they are live members (in key order: reproducible), and keeps
// those of an owner lost to a partition for it (lostowner.go); the
// partitions of the states dropped go after them (dropped.go), and the
// grants kept with them likewise (keptgrants.go).
func (n *Node) handUnowned(now time.Time, v *view) {
	if len(n.unowned) == 0 && len(n.unownedGrants) == 0 && len(n.unownedDrained) == 0 {
		return
	}
	keys := make([]string, 0, len(n.unowned))
	for key := range n.unowned {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	out := map[*peer][]*peerv1.KeyState{}
	for _, key := range keys {
		ks := n.unowned[key]
		o := v.owner(key)
		p := v.peers[o]
		switch {
		case p != nil && !p.gone:
			out[p] = append(out[p], ks)
		case v.lost[o] != nil:
			n.keepForLost(now, o, ks)
		default:
			continue
		}
		n.st.chargeKept(&n.unownedBytes, -lostCharge(ks))
		delete(n.unowned, key)
	}
	held := map[*peer][]*peerv1.LeaseGrant{}
	n.handKeptUnowned(now, v, held) // keptgrants.go
	n.sendHandoffs(now, v, out)
	n.handDrained(now, v)      // dropped.go: the partitions of the states dropped
	n.sendGrants(now, v, held) // leasecap.go: after the states, on the same queue
}

// noteLeftUnannounced records, as taken over now (n.taken, lostkey.go),
// the partitions that move to this node between before and after from a
// member the driver's membership dropped as left (neither failed nor lost)
// without its leave announced to this node: it did not know this node
// when it left (a restarted or joining node, not yet gossiped to it), so
// nothing it held of them may ever come, and it may have stopped before
// learning of this node (handUnowned's hand-off then never goes). It
// decided nothing after its Leave, which came before the membership
// dropped it: a closed check's key with no state here starts drained as
// of now (startDrained), and a cached view promoted in the change is
// bounded by that (boundPromoted). Without it such a key started drained
// as of this node's start, or full, though the leaving member had admitted
// on it since (TestLeftUnannouncedOwnerDrainedFromTheChange). The
// stand-ins of a node that has not joined yet (standIns, SetExpected: one
// per seed, "seed host:port") were never members and admitted nothing:
// partitions that move from them are not taken over (before, every key of
// a joining node's first view started drained as of its join:
// TestJoinUnderConcurrentClients, 0 admitted of 100 an hour, and
// TestStandInsDroppedTakeNothing).
func (n *Node) noteLeftUnannounced(now time.Time, before, after *ring.Ring, standIns []string) {
	if before == nil || after == nil || !after.Has(n.cfg.Self) || n.leaving {
		return
	}
	moves, err := ring.Diff(before, after)
	if err != nil {
		return
	}
	at := n.bt(now)
	for _, m := range moves {
		if m.To != n.cfg.Self || m.From == "" || m.From == n.cfg.Self || after.Has(m.From) {
			continue
		}
		if _, announced := n.dur.departed[m.From]; announced {
			continue
		}
		if slices.Contains(standIns, m.From) || slices.Contains(n.quorum.expected, m.From) {
			continue
		}
		if _, failed := n.quorum.failed[m.From]; failed || n.quorum.forgotten[m.From] || slices.Contains(n.members, m.From) {
			continue
		}
		if n.taken == nil {
			n.taken = map[int]time.Time{}
		}
		n.taken[m.Partition] = at
	}
}
