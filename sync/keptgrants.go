package sync

import (
	"strings"
	"time"
	"unsafe"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Lease grants kept with the states kept to hand on.
//
// A key's state that this node cannot hand to the key's owner at once is
// kept, and handed later: for an owner lost to a partition, when it is a
// live member again (lostowner.go: keepForLost, keepHandedForLost), or by
// a leaving node with no live member to hand it to, when it learns of the
// key's owner (leave.go: keepUnowned). The key's live lease grants (those
// this node made, handGrants, or was handed with the state,
// onHandedGrants) are kept beside the states and go with them, after them
// on the same queue, so that the owner holds its bucket under them
// (onHandedGrants), as for a hand-off sent at once. Before, they were
// dropped: the owner refilled under none while their holders spent them,
// the lease on top of a full bucket (TestStateKeptForLostOwnerKeepsGrants:
// +3.98 over the envelope, a grant of 4, -0.02 now;
// TestUnownedStateKeepsGrants: +3.98, -0.01 now). A grant is kept in its
// wire form, in a list per lost owner or in the unowned list; an expired
// one is of no use to the owner (it ignores it), and is dropped when a
// list fills its capacity and before it is sent.

// keptGrantCharge is what a kept grant costs the store's budget: its
// LeaseGrant and its slot in a list (its key and holder's name are shared
// with the record's and the grant's).
var keptGrantCharge = sizeClass(unsafe.Sizeof(peerv1.LeaseGrant{})) + int64(unsafe.Sizeof((*peerv1.LeaseGrant)(nil)))

// keepGrants appends gs to *into, charged, first dropping the expired
// grants of *into (ids up to now, cluster time) when it is full to its
// capacity: a list appended to key by key is so pruned in amortised
// constant time per grant. The list keeps at most most grants
// (maxKeyGrants per state kept beside it, as a key's live grants are
// bounded, wirelimits.go); those beyond are dropped, as all were before.
func (n *Node) keepGrants(into *[]*peerv1.LeaseGrant, gs []*peerv1.LeaseGrant, now time.Time, most int) {
	if len(*into) >= most {
		return // not pruned again for each grant refused
	}
	if len(*into)+len(gs) > cap(*into) {
		*into = n.liveKept(*into, now)
	}
	gs = gs[:min(len(gs), most-len(*into))]
	if len(gs) == 0 {
		return
	}
	*into = append(*into, gs...)
	n.st.charge(int64(len(gs)) * keptGrantCharge)
}

// liveKept returns the grants of gs that have not expired at now (cluster
// time), in gs's memory, and gives back the charge of those dropped.
func (n *Node) liveKept(gs []*peerv1.LeaseGrant, now time.Time) []*peerv1.LeaseGrant {
	t := n.bt(now).UnixNano()
	k := 0
	for _, g := range gs {
		if g.Id > t {
			gs[k] = g
			k++
		}
	}
	clear(gs[k:])
	n.st.charge(-int64(len(gs)-k) * keptGrantCharge)
	return gs[:k]
}

// dropKept gives back the charge of kept grants gs, handed or dropped.
func (n *Node) dropKept(gs []*peerv1.LeaseGrant) {
	n.st.charge(-int64(len(gs)) * keptGrantCharge)
}

// keepGrantsFor keeps gs, grants of a key whose owner in v is the member
// named owner, with the key's state when this node keeps that state:
// for owner lost to a partition, or, leaving, as unowned when owner is
// no live member of v.
func (n *Node) keepGrantsFor(now time.Time, v *view, owner string, gs []*peerv1.LeaseGrant) {
	if len(gs) == 0 {
		return
	}
	switch {
	case v.lost[owner] != nil:
		d := &n.dur
		if d.grantsForLost == nil {
			d.grantsForLost = map[string][]*peerv1.LeaseGrant{}
		}
		kept := d.grantsForLost[owner]
		n.keepGrants(&kept, gs, now, maxKeyGrants*len(d.forLost[owner]))
		if len(kept) > 0 {
			d.grantsForLost[owner] = kept
		} else {
			delete(d.grantsForLost, owner)
		}
	case n.leaving && v.peers[owner] == nil:
		n.keepGrants(&n.unownedGrants, gs, now, maxKeyGrants*len(n.unowned))
	}
}

// grantCopy returns a copy of hg, a grant received (its message may
// share its buffers), to keep or pass on.
func grantCopy(hg *peerv1.LeaseGrant) *peerv1.LeaseGrant {
	return &peerv1.LeaseGrant{Key: strings.Clone(hg.Key), To: strings.Clone(hg.To), Id: hg.Id, Held: hg.Held}
}

// keptCopy is grantCopy for a grant kept (keepGrantsFor), possibly long:
// its holder is named as v holds the member's name, or, for a holder that
// is not a member of v, foldedHolder (the owner it goes to folds it,
// addHandedGrant), so that no holder's name is copied a grant. Before,
// a hand-off naming a holder of its own, of MaxKeyLen bytes, in each
// grant kept every name, charged to no budget
// (TestKeptGrantsNamesShared: 16 MiB of names for the grants of 64 keys).
func keptCopy(v *view, hg *peerv1.LeaseGrant) *peerv1.LeaseGrant {
	to := memberName(v, hg.To)
	if to == "" {
		to = foldedHolder
	}
	return &peerv1.LeaseGrant{Key: strings.Clone(hg.Key), To: to, Id: hg.Id, Held: hg.Held}
}

// handKeptUnowned routes the grants kept unowned (leave.go) as
// handUnowned routes the states: those of a key whose owner in v is a
// live member go to it (in held, sent after the states), those of a key
// whose owner is lost are kept for it; the others stay. Expired ones are
// dropped.
func (n *Node) handKeptUnowned(now time.Time, v *view, held map[*peer][]*peerv1.LeaseGrant) {
	gs := n.liveKept(n.unownedGrants, now)
	k := 0
	for _, g := range gs {
		o := v.owner(g.Key)
		switch p := v.peers[o]; {
		case p != nil && !p.gone:
			held[p] = append(held[p], g)
		case v.lost[o] != nil:
			n.keepGrantsFor(now, v, o, []*peerv1.LeaseGrant{g})
		default:
			gs[k] = g
			k++
			continue
		}
		n.st.charge(-keptGrantCharge) // handed, or charged again for the lost owner
	}
	clear(gs[k:])
	n.unownedGrants = gs[:k]
}

// handKeptForLost adds to held the grants kept for members live in v
// again, and drops those kept for members neither live nor lost in v, as
// handBackToLost does their states; expired ones are dropped.
func (n *Node) handKeptForLost(now time.Time, v *view, held map[*peer][]*peerv1.LeaseGrant) {
	d := &n.dur
	for name, gs := range d.grantsForLost {
		if v.lost[name] != nil {
			continue
		}
		delete(d.grantsForLost, name)
		gs = n.liveKept(gs, now)
		n.dropKept(gs)
		if p := v.peers[name]; p != nil && len(gs) > 0 {
			held[p] = gs
		}
	}
}
