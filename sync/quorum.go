package sync

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/ring"
)

// The quorum rule keeps a node cut off from most of the cluster from taking
// over the keys of the members it can no longer see.
//
// Each node keeps a baseline: the members it expects to see. A member that
// joins enters it; a member that leaves gracefully leaves it at once; a
// member that fails (crash, or out of reach behind a partition: the driver
// cannot tell the two apart) stays in it for Config.FailedMemberTTL, then is
// forgotten. The node is on a minority side while
//
//	live * 2 <= baseline
//
// (live counts the members it sees, itself included). Then its ring stays
// the baseline's, and every key is decided by the request's partition
// policy, degraded, as for an unreachable owner (local-share divides the
// limit by the baseline's size and starts from this node's state of the
// key): the keys of the failed members (the lost members), and also those
// of the members it sees, itself included, because the majority side takes
// those over too and deciding them here as well would give each a second
// bucket. (Leased mode spends the lease a node holds before its policy
// decides: those tokens were drained from the owner's bucket before the
// cut, and the majority's backup of it has them drained too. A member of
// the minority side grants no new lease, not even of the keys it owns.)
// A majority side (live * 2 > baseline)
// drops the failed members from its ring and takes their keys over: in a
// cluster of three, losing one leaves two of three.
//
// A node back from a minority side does not trust the failures it saw
// while it was there: cut off itself, it sees everyone fail, and at the
// heal it may see some members again before others, a majority in its view
// while a member it still holds failed was live all along and owns its keys
// on the majority's ring. Taking those keys over then (from its backups)
// would give each a second owner, both fenced by a backup target that sees
// everyone. So the members it saw fail while on a minority side stay lost
// (suspect), and it stays as on a minority side, until each is live again
// (it then returns, deposed below) or forgotten after FailedMemberTTL.
//
// An even split (2 | 2 of 4) leaves both halves in minority: each decides
// every key by the policy. That is the safe side of the tie: neither half
// can know the other is not serving, so neither claims a key.
//
// A node just started knows only what it has seen since. A node that has
// not joined its cluster yet (its seeds have not answered) is told so by its
// driver with SetExpected: stand-ins for the members it expects count in its
// baseline as lost members, never reachable and never forgotten, so that it
// decides every key by the policy, degraded, instead of owning every key as
// a cluster of one. A node started alone on purpose (no seeds: the first of
// its cluster) expects no one and owns every key.

// quorum is a node's baseline beyond its live members. It is guarded by
// Node.mu.
type quorum struct {
	// failed holds the baseline's failed members and when each was first
	// reported failed.
	failed map[string]time.Time
	// forgotten holds members still reported failed but past
	// FailedMemberTTL: out of the baseline until they are live again.
	forgotten map[string]bool
	// expected holds the stand-ins of SetExpected, sorted: in the baseline,
	// lost, until SetExpected removes them.
	expected []string
	// suspect holds the members this node saw fail while it was on a
	// minority side: lost until each is live again or forgotten, even once
	// the live members are a majority again (see above).
	suspect map[string]bool
	// atStart holds the failed members of this node's first membership,
	// while they stay failed: they held the backups of this node's keys
	// from before it (re)started, if any (orphanedPartitions).
	atStart map[string]bool
}

// update applies a membership: live members (this node included) and the
// departed members the driver reports as failed; prev is the previous live
// membership. A failed member enters the baseline only if this node saw it
// (it was live or already failed), or with the node's first membership
// (prev empty: a node just started, say restarted behind a partition, is
// told of the members it cannot reach; ignoring them made it a cluster of
// one, owning every key on fresh buckets); one no longer reported failed,
// and not live, left gracefully (or the driver forgot it) and leaves the
// baseline. It reports whether the baseline changed.
func (q *quorum) update(now time.Time, ttl time.Duration, prev, live, failed []string) bool {
	isLive := make(map[string]bool, len(live))
	for _, m := range live {
		isLive[m] = true
	}
	isFailed := make(map[string]bool, len(failed))
	for _, m := range failed {
		if !isLive[m] {
			isFailed[m] = true
		}
	}
	changed := false
	for m := range q.failed {
		if !isFailed[m] {
			delete(q.failed, m)
			changed = true
		}
	}
	for m := range q.forgotten {
		if !isFailed[m] {
			delete(q.forgotten, m)
		}
	}
	defer q.noteSuspects(len(live))
	if ttl <= 0 {
		return changed
	}
	for _, m := range failed {
		if !isFailed[m] || q.forgotten[m] {
			continue
		}
		if _, ok := q.failed[m]; ok || len(prev) > 0 && !slices.Contains(prev, m) {
			continue
		}
		if q.failed == nil {
			q.failed = map[string]time.Time{}
		}
		q.failed[m] = now
		changed = true
		if len(prev) == 0 {
			if q.atStart == nil {
				q.atStart = map[string]bool{}
			}
			q.atStart[m] = true
		}
	}
	return changed
}

// noteSuspects, after an update to live members, keeps as suspects the
// failed members while this node is on a minority side, and forgets the
// suspects no longer failed (live again, left, or forgotten).
func (q *quorum) noteSuspects(live int) {
	for m := range q.suspect {
		if _, ok := q.failed[m]; !ok {
			delete(q.suspect, m)
		}
	}
	for m := range q.atStart {
		if _, ok := q.failed[m]; !ok {
			delete(q.atStart, m)
		}
	}
	if len(q.failed) == 0 || !minority(live, live+len(q.failed)+len(q.expected)) {
		return
	}
	if q.suspect == nil {
		q.suspect = map[string]bool{}
	}
	for m := range q.failed {
		q.suspect[m] = true
	}
}

// suspects returns the suspects (see quorum.suspect), sorted.
func (q *quorum) suspects() []string {
	out := slices.Collect(maps.Keys(q.suspect))
	slices.Sort(out)
	return out
}

// expire forgets the failed members reported FailedMemberTTL or more
// before now, and reports whether it forgot any.
func (q *quorum) expire(now time.Time, ttl time.Duration) bool {
	changed := false
	for m, since := range q.failed {
		if now.Sub(since) >= ttl {
			delete(q.failed, m)
			delete(q.suspect, m)
			if q.forgotten == nil {
				q.forgotten = map[string]bool{}
			}
			q.forgotten[m] = true
			changed = true
		}
	}
	return changed
}

// lost returns the failed members in the baseline and the expected
// stand-ins that are not live, sorted.
func (q *quorum) lost(live []string) []string {
	out := slices.Collect(maps.Keys(q.failed))
	for _, m := range q.expected {
		if !slices.Contains(live, m) && q.failed[m].IsZero() {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// minority reports whether live members out of a baseline of baseline are
// a minority: live * 2 <= baseline.
func minority(live, baseline int) bool {
	return baseline > 0 && live*2 <= baseline
}

// Quorum is a node's view of its quorum (see SetMembership).
type Quorum struct {
	// Live is the number of members this node sees, itself included.
	Live int
	// Baseline is Live plus the failed members not yet forgotten.
	Baseline int
	// Minority is Live * 2 <= Baseline: the keys of Lost are decided by the
	// partition policy, degraded.
	Minority bool
	// Lost lists the failed members counted in the baseline, and the
	// stand-ins of SetExpected, sorted.
	Lost []string
}

// Quorum returns this node's quorum: its live members, its baseline and
// whether it is on a minority side.
func (n *Node) Quorum() Quorum {
	return n.currentQuorum()
}

func (n *Node) currentQuorum() Quorum {
	lost := n.quorum.lost(n.members)
	live := len(n.members)
	return Quorum{Live: live, Baseline: live + len(lost), Minority: minority(live, live+len(lost)), Lost: lost}
}

// SetMembership replaces the membership like SetMembers, and tells which
// of the members that are gone failed (crashed, or out of reach) rather
// than left gracefully: live lists the members this node sees, itself
// included; failed lists departed members that failed (names that are live,
// or that this node never saw, are ignored). A failed member stays in the
// quorum baseline for Config.FailedMemberTTL; while the live members are no
// more than half the baseline this node is on a minority side, keeps the
// baseline's ring and decides the keys of the failed members by the
// partition policy, degraded (see quorum.go). SetMembers(now, live) is
// SetMembership(now, live, nil): every departure counts as a leave.
func (n *Node) SetMembership(now time.Time, live, failed []string) {
	n.enter(now)
	n.noteStart(now) // lostkey.go
	prev := n.members
	n.members = slices.Clone(live)
	was := n.takenOver()
	n.quorum.update(now, n.cfg.FailedMemberTTL, prev, live, failed)
	n.applyMembers(now)
	n.relapse(n.view)                   // ownerlease.go: the peers or the baseline changed
	n.announceReturns(now, n.view, was) // ownerlease.go
}

// SetExpected tells the node that it has not joined its cluster yet, and
// names stand-ins for the members it expects there (one per seed, say);
// SetExpected(nil) says it has joined. The stand-ins take effect with the
// next SetMembership, together with its membership: call SetExpected right
// before each SetMembership, so that a check never sees one without the
// other (a joined membership with the stand-ins of before, or this node
// alone without them). While they last, the stand-ins count in the quorum
// baseline as lost members, never reachable and never forgotten (whatever
// FailedMemberTTL): the node alone is on a minority side and decides every
// key by the request's partition policy, degraded (local-share dividing the
// limit by itself plus the stand-ins), instead of owning every key as a
// cluster of one (quorum.go). A stand-in must not be a member's name; this
// node's own name is ignored.
func (n *Node) SetExpected(standIns []string) {
	names := slices.DeleteFunc(slices.Clone(standIns), func(s string) bool { return s == n.cfg.Self })
	slices.Sort(names)
	names = slices.Compact(names)
	n.quorum.expected = names
}

// expireFailed forgets the failed members past FailedMemberTTL and,
// if it forgot any, applies the membership again. It reports whether the
// view changed.
func (n *Node) expireFailed(now time.Time) bool {
	if len(n.quorum.failed) == 0 || !n.quorum.expire(now, n.cfg.FailedMemberTTL) {
		return false
	}
	n.applyMembers(now)
	n.relapse(n.view) // ownerlease.go
	return true
}

// ringMembers returns the names the ring is built of, and the lost
// members among them: the live members (without this node once leaving),
// or on a minority side the baseline, the failed members being lost.
func (n *Node) ringMembers() (names, lost []string) {
	names = slices.Clone(n.members)
	if n.leaving {
		return slices.DeleteFunc(names, func(s string) bool { return s == n.cfg.Self }), nil
	}
	q := n.currentQuorum()
	if !q.Minority {
		if len(n.quorum.suspect) == 0 {
			return names, nil
		}
		// Back in a majority with members this node saw fail while it
		// was cut off itself: they may well be live, owning their keys
		// on the majority's ring all along, only not seen from here yet.
		// This node stays as on a minority side until they are live
		// again (then it returns: deposed) or forgotten.
		s := n.quorum.suspects()
		return append(names, s...), s
	}
	return append(names, q.Lost...), q.Lost
}

// lostPeer returns a stand-in for a member lost to a partition: never
// reachable, never sent to (it is not among the view's peers).
func lostPeer(name string) *peer {
	p := &peer{name: name, gone: true}
	p.downUntil = math.MaxInt64
	return p
}

// peerOf returns the peer that stands for member name as an owner: a live
// member's, or a lost member's unreachable stand-in, so that the keys of a
// member lost to a partition are decided by the partition policy.
func (v *view) peerOf(name string) *peer {
	if p := v.peers[name]; p != nil {
		return p
	}
	if p := v.lost[name]; p != nil {
		return p
	}
	return lostPeer(name)
}

// sameLost reports whether v's lost members are exactly lost.
func (v *view) sameLost(lost []string) bool {
	if len(v.lost) != len(lost) {
		return false
	}
	for _, m := range lost {
		if v.lost[m] == nil {
			return false
		}
	}
	return true
}

// deposed handles this node's return from a minority side (old had lost
// members, nv has none): while it was cut off, the majority took over every
// key this node owns on nv (it started from their backups, fence.go) and
// decided them; what this node still holds of them is stale, and deciding
// on it, or merging the majority's hand-off into it keeping the most
// consumed, would admit what the majority spent (issue #15: the rejoining
// owner admitting on its refilled copy at the heal). So those owned states
// are dropped, and their partitions await the hand-off of the member that
// owned them on the majority's ring (await.go): until it comes, checks go
// to that member as probes. The dropped states are kept
// aside (keptState): a key whose hand-off does not come (the majority
// never took it over: only this node saw the others fail, the fault
// checker's seed 85) starts from what this node had, not from a fresh
// bucket. What this node admitted while cut off is
// charged separately (charge.go). It returns the partitions' marks, nil
// when none.
func (n *Node) deposed(now time.Time, old, nv *view) map[int]awaitFrom {
	if len(old.lost) == 0 || len(nv.lost) > 0 || nv.ring == nil || n.cfg.HandoffWait == 0 || !nv.ring.Has(n.cfg.Self) {
		return nil
	}
	var other []string
	for name := range old.lost {
		if !slices.Contains(old.standIns, name) && nv.ring.Has(name) {
			other = append(other, name)
		}
	}
	if len(other) == 0 {
		return nil
	}
	slices.Sort(other)
	maj, err := nv.ring.WithMembers(other)
	if err != nil {
		return nil
	}
	holders := holderRing(old.ring, n.cfg.Self, old.standIns)
	marks := map[int]awaitFrom{}
	for id := range nv.ring.Config().PartitionCount {
		if o, err := nv.ring.PartitionOwner(id); err != nil || o != n.cfg.Self {
			continue
		}
		if from, err := maj.PartitionOwner(id); err == nil {
			a := awaitFrom{from: from, until: now.Add(n.cfg.HandoffWait)}
			if holders != nil {
				if h, err := holders.PartitionOwner(id); err == nil && h != from {
					a.also = h
				}
			}
			marks[id] = a
		}
	}
	if len(marks) == 0 {
		return nil
	}
	// The states kept at an earlier return and not taken back yet stay,
	// for the keys this node still owns: a node back from a minority side
	// twice (a flapping link) before deciding a key again lost them, and
	// started the key on a fresh bucket (the fault checker's owner seed
	// 624, once the ownership lease kept it from deciding between the two
	// returns: +18.83).
	for key := range n.dur.kept {
		if nv.owner(key) != n.cfg.Self {
			delete(n.dur.kept, key)
		}
	}
	var keys []string
	for i := range n.st.shards {
		s := &n.st.shards[i]
		keys = keys[:0]
		for key := range s.own.all() {
			if _, ok := marks[nv.ring.PartitionOf(key)]; ok {
				keys = append(keys, key)
			}
		}
		slices.Sort(keys)
		for _, key := range keys {
			e := n.st.lookupOwned(s, key)
			if n.dur.kept == nil {
				n.dur.kept = map[string]bucket.Bucket{}
			}
			n.dur.kept[key] = e.b.Clone()
			// evicted.go: its live lease grants out mark the key once they
			// are forgotten, as an evicted key's do, and keptState holds the
			// kept state to that mark (TestDeposedKeyKeepsGrants).
			n.st.markGrants(e)
			n.st.removeEntry(s, key, e)
			n.dropFence(key)
			n.metrics.DeposedKeys.Add(1)
		}
	}
	return marks
}

// keptState returns, and forgets, the state key had when this node
// dropped it on its return from a minority side (deposed), nil when none.
// The key's owned state starts from it here instead of a fresh bucket: the
// owner's own account is all anyone knows of a key the majority did not
// take over; and merged with a hand-off that does come, keeping the most
// consumed, it takes nothing off it (the majority's state, started from
// the backup with its reserve drained, is at least as consumed as the real
// one). Only deciding on it before the hand-off would be unsafe, and the
// await (await.go) keeps checks off the key until then. It is returned at
// least as consumed as the key's mark at now says a new record must be
// (heldToMark): the lease grants out when the key was dropped mark it once
// they are forgotten (deposed, markGrants). Before, the kept state was
// returned as it stood at the drop, refilled since as if no grant held it:
// a lease of 4 spent just before its expiry was admitted again on top of
// a full bucket (TestDeposedKeyKeepsGrants: +3.08 over the envelope).
func (n *Node) keptState(key string, now time.Time) bucket.Bucket {
	b := n.dur.kept[key]
	if b != nil {
		delete(n.dur.kept, key)
		n.heldToMark(key, b, now)
	}
	return b
}

// holderRing returns this node's minority ring (the baseline's) without
// itself and the stand-ins of SetExpected: its owner of a partition this
// node owns is the member that held this node's backups of it, which took
// the partition over if anyone did. deposed awaits its hand-off too
// (awaitFrom.also): membership spreads unevenly, and a node back from a
// cut may still see that member as failed, so that the member deposed asks
// first never had the key (the fault checker's seed 1: a fresh bucket
// 20 ms before the holder's hand-off came). nil when there is none.
func holderRing(r *ring.Ring, self string, standIns []string) *ring.Ring {
	if r == nil {
		return nil
	}
	for _, m := range append([]string{self}, standIns...) {
		if !r.Has(m) {
			continue
		}
		w, err := r.WithoutMember(m)
		if err != nil || w.Len() == 0 {
			return nil
		}
		r = w
	}
	return r
}

// orphanedPartitions returns the partitions nv gives this node whose
// owner before the failures and that owner's backup target (backup.go)
// both failed (they are in the quorum baseline, not forgotten): a
// partition cut off from the majority together with the member that held
// its backups, two nodes crashed at once. No member holds a state of its
// keys, nor knows what their owner admitted, which may go on admitting
// where it is; deciding them here from fresh buckets would give each key a
// second bucket. So their keys go by the partition policy, degraded, like
// those of an unreachable owner, until the failed members return or are
// forgotten (Config.FailedMemberTTL): the fence of fence.go covers what a
// backup target knows, and here none does. The same holds for a partition
// this node owned before the failures when it has just (re)started and
// the member that would hold its backups was failed already in its first
// membership: the state of its keys from before the restart is with that
// member only (the fault checker's leased seed 828: the owner restarted
// while its backup holder was cut off, and started its keys afresh after
// HandoffWait). And the same for a partition of a
// member that was failed already in this node's first membership when
// this node is the one that held its backups: it held them in its former
// life, so no live member holds them now
// (TestRestartedHolderOfFailedOwnerIsOrphaned; the fault checker's leased
// seed 828 again: n1 isolated, then n3, the holder of n1's backups of k1,
// restarted, and owned k1 on a fresh bucket: +6.9).
func (n *Node) orphanedPartitions(nv *view) map[int]bool {
	failed := n.quorum.failed
	if len(failed) == 0 || nv.ring == nil || !nv.ring.Has(n.cfg.Self) || len(nv.lost) > 0 {
		return nil
	}
	names := nv.ring.Members()
	for m := range failed {
		if !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	slices.Sort(names)
	base, err := nv.ring.WithMembers(names)
	if err != nil {
		return nil
	}
	without := map[string]*ring.Ring{}
	var out map[int]bool
	for id := range nv.ring.Config().PartitionCount {
		if o, err := nv.ring.PartitionOwner(id); err != nil || o != n.cfg.Self {
			continue
		}
		was, err := base.PartitionOwner(id)
		if err != nil {
			continue
		}
		if was == n.cfg.Self {
			if len(n.quorum.atStart) > 0 {
				if self, err := base.WithoutMember(was); err == nil {
					if holder, err := self.PartitionOwner(id); err == nil && n.quorum.atStart[holder] {
						if out == nil {
							out = map[int]bool{}
						}
						out[id] = true
					}
				}
			}
			continue
		}
		if _, ok := failed[was]; !ok {
			continue
		}
		w, ok := without[was]
		if !ok {
			if w, err = base.WithoutMember(was); err != nil {
				w = nil
			}
			without[was] = w
		}
		if w == nil {
			continue
		}
		if holder, err := w.PartitionOwner(id); err == nil {
			// The holder is failed too, or is this node, which has just
			// (re)started with was failed already: what it held of was's
			// keys, it held in its former life.
			if _, lost := failed[holder]; lost || holder == n.cfg.Self && n.quorum.atStart[was] {
				if out == nil {
					out = map[int]bool{}
				}
				out[id] = true
			}
		}
	}
	return out
}

// awaitFormerOrphans marks the partitions orphaned in old and no longer
// in nv (a failed member is back) that this node owns in nv as awaiting the
// hand-off of their backup holder, the owner on nv's ring without this
// node: the member that was failed, holding the only state of their keys.
// It had counted this node lost meanwhile, so it saw no restart of it and
// hands nothing back unasked; and this node's waits for hand-offs, from
// its start, are over by then. Without the mark their keys were decided
// on fresh buckets as soon as the member was back
// (TestOrphanAwaitsItsHolderOnReturn); with it, a check of such a key
// probes the holder, which answers with the backup it holds (forward.go).
func (n *Node) awaitFormerOrphans(now time.Time, old, nv *view) {
	if len(old.orphans) == 0 || n.cfg.HandoffWait == 0 || nv.ring == nil || !nv.ring.Has(n.cfg.Self) {
		return
	}
	succ := n.successorRing(nv.ring)
	if succ == nil {
		return
	}
	for id := range old.orphans {
		if nv.orphans[id] {
			continue
		}
		if o, err := nv.ring.PartitionOwner(id); err != nil || o != n.cfg.Self {
			continue
		}
		h, err := succ.PartitionOwner(id)
		if p := nv.peers[h]; err != nil || p == nil || p.gone {
			continue
		}
		if a, ok := nv.await[id]; ok && now.Before(a.until) {
			continue
		}
		if nv.await == nil {
			nv.await = map[int]awaitFrom{}
		}
		// A mark whose wait is over, kept for closed checks only (await.go,
		// awaitOpen: the previous owner at this node's start, which never
		// held the key), gives way to the holder's.
		nv.await[id] = awaitFrom{from: h, until: now.Add(n.cfg.HandoffWait), open: &awaitOpen{}}
	}
}

// orphaned reports whether key's partition is orphaned in v (see
// orphanedPartitions).
func (v *view) orphaned(key string) bool {
	return len(v.orphans) > 0 && v.orphans[v.ring.PartitionOf(key)]
}

// orphansChanged reports whether the orphaned partitions of v are not
// those the quorum gives now (a failed member was forgotten).
func (n *Node) orphansChanged(v *view) bool {
	return len(v.orphans) > 0 || len(n.quorum.failed) > 0 && v.ring != nil && len(n.orphanedPartitions(v)) > 0
}
