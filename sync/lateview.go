package sync

import (
	"slices"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/bucket"
)

// Late views after a takeover (issue 15: every admission charged once).
//
// A member that takes a key over from a failed owner starts from the
// backup the owner last sent it, merged with its own view (restoreHeld,
// mergeState). Backups go on a cadence, so that state lacks the owner's
// last admissions; another survivor's view may show some of them (the
// owner's last answer to it), and its first flush to the new owner
// reports that view (movedView). The owner merged it keeping the most
// consumed: once it had admitted past the view, the merge changed nothing
// and what the view showed beyond the start was admitted twice (33 hits in
// a traced TestOwnerKilledMidKey; 1031 of 1000 with a lag of 30,
// TestLateViewChargedAfterTakeover).
//
// So, for a while after such a takeover, the owner keeps per key the state
// it started from, merged with every view of the failed owner's state
// reported since (seen). A view that shows more consumed than seen, both at
// the same instant (refill accounted), is the failed owner's consumption
// this owner did not start from: the difference is charged to the live
// state (drained), and seen takes the view in, so later views charge only
// what they show beyond it (the most over the views, not their sum: they
// are snapshots of one state at different times).
//
// What is not charged twice:
//   - hits a survivor flushed and the failed owner acknowledged are in its
//     view and not sent again; those not acknowledged are sent again as
//     hits and are not in the view (movedView takes them off);
//   - a survivor's debts (charge.go) are not in its view;
//   - the new owner's own view and the backup were merged into the start;
//   - a state merged into the live one meanwhile (a hand-off, a backup
//     holder's answer, the drained bound of a promoted key) is merged into
//     seen as well, uncharged;
//   - a member this owner sent the key's state to since the takeover
//     (its interest registered: every answer, push and forward reply goes
//     to one) may hold this owner's admissions in its view (install merges
//     an answer into a moved view): its views are merged as before, never
//     charged.
//
// A key this node held no state of at the membership change (no backup,
// no view) is marked as it is first created or promoted while its
// partition is being taken over (lateNew): it starts from the first
// survivor's view, and another's later view is charged what it shows
// beyond that.
//
// The view is merged first, and only what it shows beyond the mark that
// the merge did not count is charged (mergeView): a SlidingLog's merge
// (the union of the logs) and a SlidingCounter's (the higher of each
// window's count) count some or all of it themselves.
//
// The marks last OwnerLeaseTTL + RequestTimeout from the takeover (the
// survivors flush a moved view at their next check, at once once the
// membership moved it). They are a side structure (budget.go): at most
// MaxKeys, and charged to the byte budget (lateCharge: the mark, its
// bucket and its list of members shown), of which they take at most half
// (sideFull); a key not marked merges views as before. A mark names every
// member shown the key's state, however many: before, a 17th dropped the
// mark, and in a cluster of more than 17 members a hot key's late views
// after a takeover merged as before, admitted twice
// (TestLateMarkNamesEveryMemberShown).

// lateStart is what a node remembers of a key it took over from a failed
// member: the state it started from merged with the failed owner's states
// reported since, until when, and the members it sent the key's state to.
type lateStart struct {
	seen  bucket.Bucket // cluster time
	until time.Time     // cluster time
	shown []string
}

// lateBase is what a mark costs the byte budget without its list of
// members shown: its map slot, its lateStart and its bucket (a token
// bucket's; see budget.go for what the charges do not cover).
var lateBase = mapCharge + sizeClass(unsafe.Sizeof(lateStart{})) + heldBucketCharge

// lateCharge returns what mark m costs the byte budget: lateBase and its
// list of members shown, by capacity (the names are the view's strings).
func lateCharge(m *lateStart) int64 {
	if cap(m.shown) == 0 {
		return lateBase
	}
	return lateBase + sizeClass(uintptr(cap(m.shown))*unsafe.Sizeof(""))
}

// dropLate drops key's mark m and gives back its charge.
func (n *Node) dropLate(key string, m *lateStart) {
	n.st.chargeKept(&n.lateBytes, -lateCharge(m))
	delete(n.late, key)
}

// noteTakeoverKey records key as possibly started in a takeover by the
// membership change being applied (restoreHeld, moveKeys); markLateStarts
// decides.
func (n *Node) noteTakeoverKey(key string) {
	n.lateKeys = append(n.lateKeys, key)
}

// markLateStarts marks the keys noted by this membership change that nv
// takes over from a failed member (an unconfirmed takeover, confirm.go)
// and that this node owns: their states as they start.
func (n *Node) markLateStarts(now time.Time, nv *view) {
	keys := n.lateKeys
	n.lateKeys = nil // not kept: it may have listed every key
	if nv.confirm == nil {
		return
	}
	t := n.bt(now)
	n.sweepLate(t)
	for _, key := range keys {
		e := n.st.lookupOwned(n.st.shardOf(key), key)
		if e != nil && nv.takingOver(key) && !n.markLate(t, key, e) {
			return
		}
	}
}

// lateNew marks key's owned state e, created (or promoted from a view) at
// t (cluster time) by a check, forward or flush, as it starts, when key's
// partition is being taken over from a failed member: a key this node held
// no state of at the membership change (no backup, no view) starts from
// the first survivor's view, and another survivor's view arriving after
// this node admitted past it showed the failed owner's admissions beyond
// that start, merged as a no-op: admitted twice
// (TestLateViewChargedWithoutStart: 1031 admitted of 1000 with a lag of
// 30).
func (n *Node) lateNew(t time.Time, key string, e *ownedKey) {
	if v := n.view; v != nil && v.confirm != nil && v.takingOver(key) {
		n.markLate(t, key, e)
	}
}

// markLate marks key's owned state e as it starts at t (cluster time),
// unless marked already or a concurrency limit's (its slots are released
// by their holders: none to charge); it reports false when the marks are
// full (sideFull), lapsed marks dropped.
func (n *Node) markLate(t time.Time, key string, e *ownedKey) bool {
	if n.late[key] != nil || e.b.Config().Algorithm == bucket.Concurrency {
		return true
	}
	if n.st.sideFull(len(n.late), n.lateBytes, lateBase) {
		n.sweepLate(t) // only when full: a pass over the marks
		if n.st.sideFull(len(n.late), n.lateBytes, lateBase) {
			return false
		}
	}
	if n.late == nil {
		n.late = map[string]*lateStart{}
	}
	m := &lateStart{seen: e.b.Clone(), until: t.Add(n.cfg.OwnerLeaseTTL + n.cfg.RequestTimeout)}
	n.late[key] = m
	n.st.chargeKept(&n.lateBytes, lateCharge(m))
	return true
}

// lateFor returns key's mark, nil if none or lapsed at t (cluster time).
func (n *Node) lateFor(t time.Time, key string) *lateStart {
	m := n.late[key]
	if m != nil && t.After(m.until) {
		n.dropLate(key, m)
		return nil
	}
	return m
}

// sweepLate drops the marks lapsed at t (cluster time).
func (n *Node) sweepLate(t time.Time) {
	for key, m := range n.late {
		if t.After(m.until) {
			n.dropLate(key, m)
		}
	}
}

// mergeView merges vb, a view of key's state from member from (rebased),
// into e, key's owned state, at t (cluster time), keeping the most
// consumed as before, and charges e what vb shows consumed beyond key's
// mark that the merge did not count; it returns the hits charged. The
// merge comes first: an algorithm whose merge counts the view's own
// admissions (SlidingLog's union of the logs; SlidingCounter's previous
// window) counted them, and a charge on top drained them twice
// (TestLateViewChargedAfterTakeover: 971 admitted of a SlidingLog key of 1000 with a
// lag of 30). A token bucket's merge counts nothing once this owner
// admitted past the view: the whole difference is charged, as before.
func (n *Node) mergeView(t time.Time, key, from string, e *ownedKey, vb bucket.Bucket) int64 {
	if vb.Config().Algorithm != e.b.Config().Algorithm {
		return 0 // another algorithm: the live state wins (Merge ignores it)
	}
	more := n.lateBeyond(t, key, from, vb)
	if more == 0 {
		_ = e.b.Merge(t, vb) // no mark, or nothing beyond it: as before
		return 0
	}
	if more -= consumedBeyond(e.b, vb, t); more <= 0 {
		return 0
	}
	_ = e.b.Drain(t, more)
	n.metrics.LateViewHits.Add(more)
	return more
}

// lateBeyond returns what view vb of key from member from (rebased) shows
// consumed beyond key's mark at t (cluster time), and takes vb into the
// mark: 0 with no mark, from a member shown the key's state, or for
// another algorithm.
func (n *Node) lateBeyond(t time.Time, key, from string, vb bucket.Bucket) int64 {
	m := n.lateFor(t, key)
	if m == nil || slices.Contains(m.shown, from) || vb.Config().Algorithm != m.seen.Config().Algorithm {
		return 0
	}
	return consumedBeyond(m.seen, vb, t)
}

// consumedBeyond merges b into seen, at t, and returns how many tokens
// fewer seen holds then: what b showed consumed beyond it (what the merge
// counted).
func consumedBeyond(seen, b bucket.Bucket, t time.Time) int64 {
	before, err := seen.Take(t, 0)
	if err != nil || seen.Merge(t, b) != nil {
		return 0
	}
	after, err := seen.Take(t, 0)
	if err != nil {
		return 0
	}
	return max(0, before.Remaining-after.Remaining)
}

// lateMerged merges b, a state merged into key's owned state at t
// (cluster time) other than by a view (a hand-off, a backup, a drained
// bound), into key's mark, uncharged, so that no later view charges what
// b showed.
func (n *Node) lateMerged(t time.Time, key string, b bucket.Bucket) {
	if m := n.lateFor(t, key); m != nil && b.Config().Algorithm == m.seen.Config().Algorithm {
		_ = m.seen.Merge(t, b)
	}
}

// lateShown records that member m of the current view registered interest
// in key (it is sent the key's state from now on): its views are no longer
// charged. A list that would take the marks past their half of the byte
// budget drops the mark instead (its views then merge as before).
func (n *Node) lateShown(key string, m int) {
	mk := n.late[key]
	if mk == nil || n.view == nil || m < 0 || m >= len(n.view.names) {
		return
	}
	name := n.view.names[m]
	if slices.Contains(mk.shown, name) {
		return
	}
	before := lateCharge(mk)
	grown := &lateStart{shown: append(mk.shown, name)}
	if more := lateCharge(grown) - before; more > 0 {
		if n.st.sideFull(0, n.lateBytes, more) {
			n.dropLate(key, mk)
			return
		}
		n.st.chargeKept(&n.lateBytes, more)
	}
	mk.shown = grown.shown
}
