package sync

import (
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// States kept for a lost owner.
//
// A member that owns a key may find, at a change of membership, that the
// key now belongs to a member lost to a partition: it was on the majority
// side, holding the key (taken over from the cut-off owner's backups, or
// handed to it by a member that then left), and lost its majority (the
// baseline shrank as members left, the cut-off owner still counted in
// it). On its minority ring the key is the lost owner's again, and there
// is no one to hand the state to. The rule: such a state is kept, as
// taken at that change, and handed to the owner as soon as it is a live
// member again. The owner, back from its own minority side, drops its
// stale state and awaits the hand-off of the member that owned the key on
// the majority's ring (deposed, quorum.go): this one. Without it, no
// hand-off came, and after HandoffWait the owner started the key from
// what it had before the cut, which does not count what the majority
// admitted (TestStateOfLostOwnerHandedBackOnReturn; the fault checker's
// leased seed 547: +17.9 on one key). The hand-off is merged keeping the
// most consumed state, so a state sent that the owner does not need takes
// nothing off its own. A kept state is dropped once its member is neither
// live nor lost (forgotten after FailedMemberTTL, or left): its keys then
// belong to others, whom moveKeys serves.

// keepForLost keeps ks, the state of a key owned here until now whose
// owner is the lost member named to, if there is room (roomForLost).
func (n *Node) keepForLost(now time.Time, to string, ks *peerv1.KeyState) {
	if !n.roomForLost(now, to, ks) {
		return
	}
	d := &n.dur
	if d.forLost == nil {
		d.forLost = map[string][]*peerv1.KeyState{}
	}
	d.forLost[to] = append(d.forLost[to], ks)
	n.st.chargeKept(&d.forLostBytes, lostCharge(ks))
}

// roomForLost reports whether ks may be kept for to, a lost owner,
// making room for it if it must (roomForKept). The states kept for lost
// owners are a side structure (budget.go): at most MaxKeys over all
// owners, and at most half the byte budget. Before, a member handing
// this node, on a minority side, states of keys of a lost owner had every
// one kept (TestLostOwnerStatesBounded: 10,001 states with MaxKeys 64,
// each found by a scan of those kept before). An honest node keeps at
// most the keys its store held when their owner was lost, plus those
// handed to it since. A state given up is lost to the owner at its
// return, so the partition of one not full is recorded for that owner
// (keepDroppedForLost) and handed to it after the states: it starts the
// partition's keys it has no state of drained as of the hand-off, not
// from what it had before the cut (dropped.go); the states given up are
// those full again soonest.
func (n *Node) roomForLost(now time.Time, to string, ks *peerv1.KeyState) bool {
	d := &n.dur
	count := func() int {
		k := 0
		for _, kss := range d.forLost {
			k += len(kss)
		}
		return k
	}
	kept := n.roomForKept(now, ks, count, &d.forLostBytes, func(t time.Time) {
		var all []*peerv1.KeyState
		for _, kss := range d.forLost {
			all = append(all, kss...)
		}
		drop := map[*peerv1.KeyState]bool{}
		for _, k := range soonestFull(t, all) {
			drop[k] = true
			n.st.chargeKept(&d.forLostBytes, -lostCharge(k))
			n.metrics.FloodCapped.Add(1)
		}
		for name, kss := range d.forLost {
			kss = slices.DeleteFunc(kss, func(k *peerv1.KeyState) bool {
				if drop[k] {
					n.keepDroppedForLost(name, t, k)
				}
				return drop[k]
			})
			if len(kss) > 0 {
				d.forLost[name] = kss
			} else {
				delete(d.forLost, name)
			}
		}
	})
	if !kept {
		n.keepDroppedForLost(to, n.bt(now), ks)
	}
	return kept
}

// keepDroppedForLost records, for to, a lost owner, the partition of ks,
// a state dropped from those kept for it, or not kept, if it is not full
// at t, the bucket time (keepDroppedState): handBackToLost hands it after
// the states.
func (n *Node) keepDroppedForLost(to string, t time.Time, ks *peerv1.KeyState) {
	d := &n.dur
	m := d.forLostDrained[to]
	n.keepDroppedState(&m, t, ks)
	if len(m) == 0 {
		return
	}
	if d.forLostDrained == nil {
		d.forLostDrained = map[string]map[int]time.Time{}
	}
	d.forLostDrained[to] = m
}

// keepHandedForLost keeps b, a state of key handed to this node (demand
// its decayed demand) while key's owner in v is a member lost to a
// partition, for that owner: merged, keeping the most consumed, into the
// state kept for it already, or kept on its own. The hand-off also stays
// here as a cached view (mergeState), but a view goes to no one, and the
// owner, back, was handed only the state kept at the change, older:
// refilled while the key was decided elsewhere, it started the key from
// there (TestHandoffMergedIntoStateKeptForLostOwner; the fault checker's
// owner seed 707: n3 kept k2 for n2 while cut off, was handed n1's later
// state of k2 at the heal, and gave n2 its own, full, when n2 restarted:
// +2.8).
func (n *Node) keepHandedForLost(now time.Time, v *view, key string, b bucket.Bucket, demand float32) {
	o := v.owner(key)
	if v.lost[o] == nil {
		return
	}
	kss := n.dur.forLost[o]
	for i, ks := range kss {
		if ks.Key != key {
			continue
		}
		merged, ok := n.mergedKeyState(now, ks, b, demand)
		if !ok {
			return // another algorithm: the kept state stands
		}
		n.st.chargeKept(&n.dur.forLostBytes, lostCharge(merged)-lostCharge(ks))
		kss[i] = merged
		return
	}
	state, err := b.AppendBinary(nil)
	if err != nil {
		return
	}
	n.keepForLost(now, o, &peerv1.KeyState{Key: strings.Clone(key), State: state, Demand: demand})
}

// mergedKeyState returns kept, a state kept to hand on, merged with b
// keeping the most consumed (demand the larger), and false when they do
// not merge (another algorithm) or do not encode: kept then stands.
func (n *Node) mergedKeyState(now time.Time, kept *peerv1.KeyState, b bucket.Bucket, demand float32) (*peerv1.KeyState, bool) {
	a, err := bucket.Decode(kept.State)
	if err != nil || a.Merge(n.bt(now), b) != nil {
		return nil, false
	}
	state, err := a.AppendBinary(nil)
	if err != nil {
		return nil, false
	}
	return &peerv1.KeyState{Key: kept.Key, State: state, Demand: max(kept.Demand, demand)}, true
}

// handBackToLost sends the states kept for members that are live in v
// again, then the partitions of the states dropped for them
// (keepDroppedForLost) to the partitions' owners in v, as a leaving node
// hands those of its unowned states (handDrained: to the owner, if the
// partition moved, and later if it has no live owner yet; a partition
// this node owns again waits there, its cached views holding what it
// kept), then the grants kept with them (keptgrants.go); and it drops
// those kept for members that are neither live nor lost in v.
// sendHandoffs sends the states in v's member order, each list in the
// order moveKeys kept it: reproducible.
func (n *Node) handBackToLost(now time.Time, v *view) {
	d := &n.dur
	if len(d.forLost) == 0 && len(d.grantsForLost) == 0 && len(d.forLostDrained) == 0 {
		return
	}
	out := map[*peer][]*peerv1.KeyState{}
	held := map[*peer][]*peerv1.LeaseGrant{}
	n.handKeptForLost(now, v, held) // keptgrants.go
	for name, kss := range d.forLost {
		if v.lost[name] != nil {
			continue
		}
		for _, ks := range kss {
			n.st.chargeKept(&d.forLostBytes, -lostCharge(ks))
		}
		delete(d.forLost, name)
		if p := v.peers[name]; p != nil {
			out[p] = kss
		}
	}
	for name, parts := range d.forLostDrained {
		if v.lost[name] != nil {
			continue
		}
		delete(d.forLostDrained, name)
		if v.peers[name] == nil {
			continue // dropped with the states
		}
		for id, full := range parts {
			keepDrainedUntil(&n.unownedDrained, id, full)
		}
	}
	n.sendHandoffs(now, v, out)
	n.handDrained(now, v)      // dropped.go: after the states, on the same queue
	n.sendGrants(now, v, held) // leasecap.go: after the states, on the same queue
}

// lostCharge returns what a state kept for a lost owner costs: its
// KeyState, its encoded state and its key.
func lostCharge(ks *peerv1.KeyState) int64 {
	return sizeClass(unsafe.Sizeof(peerv1.KeyState{})) + sizeClass(uintptr(cap(ks.State))) + sizeClass(uintptr(len(ks.Key))) + sizeClass(unsafe.Sizeof(ks))
}
