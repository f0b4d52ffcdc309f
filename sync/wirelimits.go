package sync

import (
	"slices"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Bounds on the peer wire fields a member can fill with as many entries as
// a message holds (docs/security.md, "Peer messages are validated, not
// believed").

// maxKeyGrants bounds the lease grants an owner counts one by one on a key
// it was handed (Handoff.grants, leasecap.go). Honest senders hand at most
// a few per holder of a lease on the key (a holder asks for one grant at a
// time, and renews at half its life), so 256 covers a key leased at over a
// hundred nodes; a hand-off listing more has the excess folded into the
// key's latest grant: its tokens still hold the bucket, until the latest
// expiry (the safe side), and the work per grant stays bounded.
const maxKeyGrants = 256

// maxAskMembers bounds the names of a Backup's ask_members that the
// receiver looks up, and of a BackupAck's known_members that the sender
// looks at: an honest sender asks about the backup targets that joined in
// the receiver's place, at most the members of its view, each once, and
// the answer names at most those. Names beyond it are not looked at (the
// sender asks again with its next backup round) and the message is
// counted malformed.
const maxAskMembers = 1024

// validGrant reports whether a handed lease grant (Handoff.grants) is well
// formed: a key and a holder within MaxKeyLen bytes, and tokens held. Its
// id and, once the key's bucket is found, its held against the key's
// capacity are judged by the caller (onHandedGrants).
func (n *Node) validGrant(g *peerv1.LeaseGrant) bool {
	return g != nil && g.Key != "" && len(g.Key) <= n.cfg.MaxKeyLen &&
		g.To != "" && len(g.To) <= n.cfg.MaxKeyLen && g.Held > 0
}

// addHandedGrant adds hg, a valid handed grant of at most c tokens (the
// key's capacity), to have, the key's live grants in order of expiry, and
// returns them. The key's grants then hold at most c tokens together: an
// owner's bucket and its live grants hold at most one bucket (leasecap.go),
// so more can only come from a malformed or doubled hand-off, and, summed
// in capLeased, could overflow and lift the cap altogether
// (TestHandedGrantsOverflow: 10 admitted at the owner on top of a live
// grant of 5, for a bucket of 10). A grant beyond maxKeyGrants, or to a
// holder that is not a member (to "": its name not interned), is folded
// into the key's folded grant (foldGrant): they hold the bucket as long
// or longer, the safe side, and tokens given back of it are refused
// (TestHandedGrantsBounded). to is hg's holder's name as the view holds
// it, so that a handed grant costs no copy of a member's name, and one
// to a holder that is not one costs none either (TestHandedGrantsHeap: a
// hand-off naming a holder of its own, of MaxKeyLen bytes, in each grant
// kept every name).
func addHandedGrant(have []liveGrant, hg *peerv1.LeaseGrant, c int64, to string) []liveGrant {
	var sum int64
	for i := range have {
		if sum += max(0, have[i].held()); sum >= c {
			return have // the grants hold the whole bucket already
		}
	}
	h := min(hg.Held, c-sum)
	if to == "" || len(have) >= maxKeyGrants {
		return foldGrant(have, hg.Id, h)
	}
	return insertGrant(have, liveGrant{exp: hg.Id, tokens: h, to: to})
}

// foldedHolder is the holder of a key's folded grant (foldGrant): no
// name a member is given (it starts with a NUL byte), so that no settle
// (lease_settled), spend or return report reaches it, and it holds the
// bucket until its expiry. Folded into a member's grant instead, another
// holder's tokens were counted spent when that member settled its own
// (TestFoldedGrantNotSettledByMember: 10 admitted under a live grant of
// 5 to a holder cut off, for a bucket of 10).
const foldedHolder = "\x00folded"

// foldGrant adds tokens granted until exp to the key's folded grant in
// have (live grants by expiry), made if it has none: of the key's latest
// grant when it has maxKeyGrants already (that holder's reports no longer
// release it: the safe side).
func foldGrant(have []liveGrant, exp, tokens int64) []liveGrant {
	g := liveGrant{exp: exp, tokens: tokens, to: foldedHolder}
	i := slices.IndexFunc(have, func(g liveGrant) bool { return g.to == foldedHolder })
	if i < 0 && len(have) >= maxKeyGrants {
		i = len(have) - 1
	}
	if i >= 0 {
		g.tokens += have[i].tokens
		g.exp = max(g.exp, have[i].exp)
		g.back, g.spent = have[i].back, have[i].spent
		have = slices.Delete(have, i, i+1)
	}
	return insertGrant(have, g)
}

// insertGrant inserts g into gs, live grants by expiry, after those
// expiring no later (cluster time may step back).
func insertGrant(gs []liveGrant, g liveGrant) []liveGrant {
	i := len(gs)
	for i > 0 && gs[i-1].exp > g.exp {
		i--
	}
	return slices.Insert(gs, i, g)
}

// memberName returns name as v holds it, if a member of v's is so named,
// else "".
func memberName(v *view, name string) string {
	if i, ok := v.index[name]; ok {
		return v.names[i]
	}
	return ""
}

// knownOf returns the names of ask (Backup.ask_members) that are members of
// v, each once, looking at no more than maxAskMembers of them (a longer
// list is counted malformed): the answer is bounded by the view, not by
// the question (TestAskMembersBounded).
func (n *Node) knownOf(v *view, ask []string) []string {
	var known []string
	for _, m := range n.boundMembers(ask) {
		if _, ok := v.index[m]; ok && !slices.Contains(known, m) {
			known = append(known, m)
		}
	}
	return known
}

// validGrantIDs reports whether ids, a FlushAck's lease_grant_ids, are
// well formed for a flush of items items: none (no grant, or an older
// owner) or one per item, none negative. The ids that match an item are
// used even so, a negative one as none (onFlushAck): the owner named them,
// and only its own grants to this node are settled by them.
func validGrantIDs(ids []int64, items int) bool {
	if len(ids) != 0 && len(ids) != items {
		return false
	}
	return !slices.ContainsFunc(ids, func(id int64) bool { return id < 0 })
}

// boundMembers returns names, a Backup's ask_members (knownOf) or a
// BackupAck's known_members, cut to maxAskMembers names (a longer list is
// counted malformed). For known_members: an honest target names at most
// the members it was asked about, and each fence under a join hold that
// the acknowledgement raises looks for its joiner among them (fenceHeld),
// so the list bounds the work of one message (TestKnownMembersBounded).
// Names never asked about are harmless: a fence looks only for its own
// joiner.
func (n *Node) boundMembers(names []string) []string {
	if len(names) > maxAskMembers {
		n.metrics.Malformed.Add(1)
		return names[:maxAskMembers]
	}
	return names
}

// settledBound returns settled, a flush item's lease_settled (>= 0), at
// most the latest id a grant made here by now can have: LeaseTTL after
// now, on cluster time. A larger one names no grant; taken as that bound,
// it settles all the sender's grants, as its latest grant's id would.
// Before, the largest int64 overflowed settleReturn's bound for the live
// grants (settled + LeaseTTL), and the sender's tokens given back of a
// live grant were refused (TestSettledFarAhead). Only the sender's own
// grants are ever settled (TestSettledForOthersGrants).
func (n *Node) settledBound(settled int64, now time.Time) int64 {
	return min(settled, n.bt(now).Add(n.cfg.LeaseTTL).UnixNano())
}

// validDrained returns ids, a Handoff's drained_partitions, without the
// entries that name no partition of this node's ring and cut to
// PartitionCount entries: an honest leaving node names each partition of
// a state it dropped once (dropped.go), so a longer list, or one naming a
// partition out of range, is counted malformed. The work of a hand-off's
// partitions is so bounded by the ring, not by the message
// (TestDrainedPartitionsBounded).
func (n *Node) validDrained(ids []uint32) []uint32 {
	count := n.cfg.Ring.PartitionCount
	if len(ids) > count {
		n.metrics.Malformed.Add(1)
		ids = ids[:count]
	}
	out := func(id uint32) bool { return int64(id) >= int64(count) }
	if !slices.ContainsFunc(ids, out) {
		return ids
	}
	n.metrics.Malformed.Add(1)
	return slices.DeleteFunc(slices.Clone(ids), out)
}
