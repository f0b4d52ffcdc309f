package sync

import (
	"math"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// Evicted marks (issue 15). A key evicted while its bucket is not fresh
// (budget.go) would start again from a fresh bucket at its next check: a
// stranger who floods the store with fresh keys past its budget would give
// a victim's spent key its whole limit again, once per eviction. So the
// store remembers, in a fixed table indexed by the key's store hash, the
// instant at which each evicted key's bucket would have been full again
// (its Decision.ResetAt at the eviction); a new record of a key whose
// mark is still ahead starts drained so that it is full at that instant,
// no sooner (markedStart): for a token bucket, capacity − rate × (mark −
// now) tokens. It starts at most drained at now: a debt beyond the
// capacity (hits drained past the limit) is not kept, and a mark further
// ahead than a refill of the new record's limit (a shared slot's, or a
// limit since shortened) costs it no more than its burst.
//
// A slot holds the mark in units of 2^markShift ns (rounded up) in its
// high 48 bits and a fingerprint of the key (16 other bits of its hash,
// never 0) in its low 16. Two keys whose marks are both live in one slot share it:
// it keeps the later mark and fingerprint 0, which applies to every key of
// the slot. So a collision only ever makes a key start more consumed than
// it was (under-admission), never less: no evicted key admits more than
// its bucket would have. The cost is that a key never seen, or idle when
// evicted, whose slot holds a live mark of a shared slot or of its own
// fingerprint (1 in 32,768 keys), starts drained as of at most now and
// refills at its own rate: at most its burst under-admitted, once. A
// flood that evicts more spent keys than there are slots fills them with
// shared marks, and a flood key restarted from one and spent again marks
// its slot later still, up to a refill of the flood's own limits ahead:
// until those lapse, new keys start drained (TestFloodMarksCostNewKeys).
// A flood costs new keys their first burst, no longer a spent key its
// limit.
//
// Owned records, local keys (ModeLocal) and cached views are marked and
// restarted so; each role hashes the key with its own salt, so that a local
// key's mark does not fall on the owned record of the same key. A view
// restarted fresh would decide on a full bucket with the first-sight share
// limit/N until the owner's answer: a flood between two bursts through a
// non-owner gave a spent key limit/N again per flood, without end (a key of
// 1000 an hour spent at its owner, 5 floods of a non-owner of MaxKeys 512:
// 1665 more admitted; TestViewFloodKeepsSpentKeySpent). A view restarted
// from its mark decides nothing until it is synced: its checks go to the
// owner (viewMarked), whose answer installs its state, so that a flood's
// shared marks refuse no first check the owner admits
// (TestViewMarksCostNewKeys). A local-share bucket starts from the key's
// view, or, with none, from the view's mark, or its own (markShare) if it
// was evicted. A Concurrency bucket holding permits is marked with their
// latest expiry and restarts with every permit held until then
// (evictMarkable); a SmoothWarmingUp one is not marked and restarts fresh,
// as before.
//
// Memory: markSlots(MaxKeys) slots of 8 bytes, a power of two from 1,024
// to 65,536 (8 KiB to 512 KiB), allocated at the first mark. CPU: an
// eviction takes Idle and, for a key not idle, a peek of its bucket; an
// insert of a fresh owned or local record reads one slot once the table
// exists.

// markShift sets the resolution of a mark: 2^16 ns, 65.5 µs.
const markShift = 16

// Salts xored into a key's store hash to mark its roles apart.
const (
	markOwned uint64 = 0
	markLocal uint64 = 0x9e3779b97f4a7c15
	markView  uint64 = 0xc2b2ae3d27d4eb4f
	markShare uint64 = 0x165667b19e3779f9
)

// marks is the store's table of evicted marks.
type marks struct {
	// slots is nil until the first mark; len(slots) is a power of two.
	slots []uint64
	// size is the slot count to allocate (markSlots).
	size int
}

// markSlots returns the slots of the marks table of a store of maxKeys
// keys: maxKeys rounded up to a power of two, from 1,024 to 65,536.
func markSlots(maxKeys int64) int {
	n := 1 << 10
	for int64(n) < maxKeys && n < 1<<16 {
		n <<= 1
	}
	return n
}

// markNanos returns t in nanoseconds since 1970, or false when before it
// (a mark needs a positive instant) or beyond 2255 (UnixNano's range ends
// in 2262).
func markNanos(t time.Time) (int64, bool) {
	if u := t.Unix(); u <= 0 || u >= 9e9 {
		return 0, false
	}
	return t.UnixNano(), true
}

// fingerprint returns h's fingerprint: 16 bits of it not used for the
// slot, never 0 (the shared slot's).
func fingerprint(h uint64) uint64 { return h>>48 | 1 }

// mark records that the key of salted hash h, evicted at now, would have
// been full again at full.
func (m *marks) mark(h uint64, now, full time.Time) {
	ns, ok := markNanos(full)
	if !ok || !full.After(now) {
		return
	}
	if m.slots == nil {
		m.slots = make([]uint64, m.size)
	}
	q := uint64((ns + 1<<markShift - 1) >> markShift)
	i := h & uint64(len(m.slots)-1)
	fp := fingerprint(h)
	old := m.slots[i]
	if old != 0 && m.live(old, now) {
		if oq := old >> (64 - 48); oq > q {
			q = oq
		}
		if old&0xffff != fp {
			fp = 0 // two keys' live marks: the slot is shared
		}
	}
	m.slots[i] = q<<16 | fp
}

// live reports whether slot value v holds a mark still ahead of now.
func (m *marks) live(v uint64, now time.Time) bool {
	ns, ok := markNanos(now)
	return !ok || int64(v>>16)<<markShift > ns
}

// until returns the mark that applies to the key of salted hash h at now,
// and whether one does.
func (m *marks) until(h uint64, now time.Time) (time.Time, bool) {
	if m.slots == nil {
		return time.Time{}, false
	}
	v := m.slots[h&uint64(len(m.slots)-1)]
	if v == 0 || !m.live(v, now) {
		return time.Time{}, false
	}
	if fp := v & 0xffff; fp != 0 && fp != fingerprint(h) {
		return time.Time{}, false
	}
	return time.Unix(0, int64(v>>16)<<markShift), true
}

// markEvicted marks b, the bucket of a key of salted hash h evicted at
// now, if it is not fresh.
func (st *store) markEvicted(h uint64, b bucket.Bucket, now time.Time) {
	if !evictMarkable(b.Config().Algorithm) || now.IsZero() || b.Idle(now) {
		return
	}
	d, err := b.Take(now, 0)
	if err != nil {
		return
	}
	st.marks.mark(h, now, d.ResetAt)
}

// drainedSince returns the instant from which a bucket of l, drained
// then, is full again at full: full less the time a bucket of l drained
// at now takes to be full (its ResetAt), at most now.
func drainedSince(l bucket.Limit, now, full time.Time) (time.Time, bool) {
	if !evictMarkable(l.Algorithm) {
		return time.Time{}, false
	}
	b, ok := newDrained(l, now)
	if !ok {
		return time.Time{}, false
	}
	d, err := b.Take(now, 0)
	if err != nil {
		return time.Time{}, false
	}
	at := full.Add(-d.ResetAt.Sub(now))
	if at.After(now) {
		at = now
	}
	return at, true
}

// newDrained returns a new bucket of l drained at at, a probe or a state
// to merge (NewIn on a local Space escapes as well), or false when l
// builds none.
func newDrained(l bucket.Limit, at time.Time) (bucket.Bucket, bool) {
	b, err := bucket.New(l, at)
	if err != nil || b.Drain(at, l.Capacity()) != nil {
		return nil, false
	}
	return b, true
}

// markable reports whether the keys of algorithm a are marked: not a
// Concurrency bucket (its permits are released, not refilled), nor a
// SmoothWarmingUp one, whose fresh state is its coldest (its first permit
// at once, the next ones spaced by the cold interval) and a drained one
// its hottest (permits at the stable interval), so that a start drained
// earlier is not a start more consumed (TestMarkedStartNeverAdmitsMore
// showed one admitted where the evicted bucket would not have).
func markable(a bucket.Algorithm) bool {
	return a != bucket.Concurrency && a != bucket.SmoothWarmingUp
}

// evictMarkable reports whether the keys of algorithm a are marked when
// evicted: every markable one, and a Concurrency bucket holding permits,
// whose mark is the latest expiry of its permits (its ResetAt) and whose
// restart holds every permit, anonymous, until then. Its holders cannot
// release them: the key is refused until its permits would all have
// expired, at most its Period. Before, an evicted semaphore restarted with
// no permit held, and a stranger's flood of fresh keys freed the held
// permits for new holders: 20 held at once for a limit of 5 after 3
// floods (TestFloodKeepsConcurrencyPermitsHeld). Refusing until the
// expiry is the safe side; a Concurrency key with no permit held (Idle)
// is not marked.
func evictMarkable(a bucket.Algorithm) bool {
	return a != bucket.SmoothWarmingUp
}

// markedStart returns, for a new record of l at now of a key of salted
// hash h, the instant from which it starts drained (drainedSince its
// mark), and whether it must.
func (st *store) markedStart(h uint64, l bucket.Limit, now time.Time) (time.Time, bool) {
	full, ok := st.marks.until(h, now)
	if !ok {
		return time.Time{}, false
	}
	return drainedSince(l, now, full)
}

// heldToMark makes b, a state of the owned key kept aside (quorum.go's
// keptState), at least as consumed at now as a new record of its limit
// started as the key's mark says (markedStart), if it has one: b stood as
// at its last decision, and refilled since as if nothing held it.
func (n *Node) heldToMark(key string, b bucket.Bucket, now time.Time) {
	if n.st.marks.slots == nil {
		return
	}
	t := n.bt(now)
	l := b.Config()
	at, ok := n.st.markedStart(n.st.hash(key)^markOwned, l, t)
	if !ok {
		return
	}
	if m, ok := newDrained(l, at); ok {
		_ = b.Merge(t, m)
	} // the most consumed of the two
}

// newLocalMarked is newLocal for a ModeLocal key, started drained as its
// mark says (markedStart) if it has one.
func (st *store) newLocalMarked(key string, l bucket.Limit, now time.Time, c uint32) (*localKey, error) {
	if st.marks.slots == nil {
		return newLocal(&st.lims, l, now, c)
	}
	at, ok := st.markedStart(st.hash(key)^markLocal, l, now)
	if !ok {
		return newLocal(&st.lims, l, now, c)
	}
	e, err := newLocal(&st.lims, l, at, c)
	if err != nil {
		return nil, err
	}
	if err := e.b.Drain(at, e.b.Config().Capacity()); err != nil {
		return nil, err
	}
	return e, nil
}

// newCachedMarked is newCached for a cached view, started drained as its
// mark says (markedStart) if it has one.
func (st *store) newCachedMarked(key string, l bucket.Limit, now time.Time, c uint32) (*cachedKey, error) {
	if st.marks.slots == nil {
		return newCached(&st.lims, key, l, now, c)
	}
	at, ok := st.markedStart(st.hash(key)^markView, l, now)
	if !ok {
		return newCached(&st.lims, key, l, now, c)
	}
	e, err := newCached(&st.lims, key, l, at, c)
	if err != nil {
		return nil, err
	}
	if err := e.b.Drain(at, e.b.Config().Capacity()); err != nil {
		return nil, err
	}
	return e, nil
}

// markedBucket returns a bucket of l drained as the mark of salted hash h
// says at now (markedStart), or nil when none applies.
func (st *store) markedBucket(h uint64, l bucket.Limit, now time.Time) bucket.Bucket {
	if st.marks.slots == nil {
		return nil
	}
	at, ok := st.markedStart(h, l, now)
	if !ok {
		return nil
	}
	b, ok := newDrained(l, at)
	if !ok {
		return nil
	}
	return b
}

// viewMarked reports whether a cached-mode check of key of limit l at now
// goes to the owner because this node's view of the key was evicted: it
// holds no view synced since (nor an owned record), and the view's mark
// still applies. A view started again fresh would decide on a full bucket
// with the first-sight share limit/N; one started drained as its mark says
// would refuse checks the owner admits (a flood's shared marks fall on
// keys never seen). The owner decides instead, and its answer installs
// its state in the view (keepView, refreshView), which decides the next
// checks. kh is the key's ring.KeyHash, which the check has.
func (n *Node) viewMarked(now time.Time, key string, kh uint64, l bucket.Limit) bool {
	if n.st.marks.slots == nil {
		return false
	}
	s := n.st.shardAt(kh)
	if r := n.st.lookup(s, key); r != nil {
		if e, ok := r.(*cachedKey); !ok || e.has(flagSynced) {
			return false
		}
	}
	_, ok := n.st.markedStart(n.st.hash(key)^markView, l, n.bt(now))
	return ok
}

// markGrants records in the grants of e, an owned token bucket record
// leaving the store with live lease grants, when its bucket held under
// them would be full again at the soonest (keyGrants.full), so
// that a record of the key made after they expired and were forgotten
// unadopted is held under them: the sweep marks the key with it then
// (sweepGrants). The grants wait in shard.strayGrants for a record made
// while they live (adoptGrants), but the sweep forgets them once all
// expired, with no bucket to cap; the record then started from the
// eviction's mark of a bucket uncapped since its last decision (often
// full: no mark at all), and admitted the leases' tokens spent just
// before their expiry on top of a full bucket
// (TestEvictedOwnedKeyKeepsGrants: +3.08 over the envelope, a grant of
// 4; -0.91 now). Under the cap, the bucket holds at most capacity − L_j
// until the grant j expires at e_j, L_j being what the grants expiring
// then or later hold, and refills at its rate from there: it is full
// again no sooner than e_j + L_j / rate, for every j; full is the latest
// of those. The key is marked only once the grants are forgotten, not at
// the eviction: a mark is a bucket refilling at its rate up to full, not
// one held flat at capacity − L_j until e_j, and so drained a record made
// while the grants live (which adoptGrants holds under them, the cap) by
// the refill of the time left until e_j on top of them
// (TestEvictedKeyUnderLiveGrantsNotDrained: a grant of 4 out, a key of
// burst 10 evicted and made again admitted 0 where it would have admitted
// 4 and 6 not evicted; 3 and 6 now, the eviction's own mark rounding a
// part of a token off). It is computed at the eviction: no grant joins a
// stray key's after, and what they hold then is the most they hold.
func (st *store) markGrants(e *ownedKey) {
	if full, ok := grantsFull(e); ok {
		e.gr.full = max(e.gr.full, full.UnixNano())
	}
}

// grantsFull returns the instant before which the owned token bucket
// record e, held under its live lease grants, is not full again (see
// markGrants), and false when e has no live grant or is no token bucket.
func grantsFull(e *ownedKey) (time.Time, bool) {
	if !e.grantsLive() {
		return time.Time{}, false
	}
	l := e.b.Config()
	if l.Algorithm != bucket.TokenBucket || l.Limit <= 0 {
		return time.Time{}, false
	}
	perToken := float64(l.Period.Nanoseconds()) / float64(l.Limit)
	gs := e.gr.live // by expiry
	var held int64
	full := int64(math.MinInt64)
	for i := len(gs) - 1; i >= 0; i-- {
		held += max(0, gs[i].held())
		full = max(full, gs[i].exp+int64(math.Min(math.Ceil(float64(held)*perToken), math.MaxInt64/2)))
	}
	return time.Unix(0, full), true
}
