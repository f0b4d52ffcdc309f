package sync

import (
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// The records of the store. A key of a shard's table (shard.m) is either
// this node's authoritative state of it, an ownedKey, or a cached view of
// its owner's state, a cachedKey: two types, each with the fields its role
// needs and named for what they hold, behind the table's record interface.
// Each role has a table of its own in the key's shard (shard.own,
// shard.view). A key changes role only with a membership change or a
// promotion (toOwned, toCached): the store then moves it to the other table
// as a new record of the other type, and retires the old one (its flags
// cleared, so that a list still holding it looks the key up again). The
// buckets of ModeLocal checks and of the local-share policy are localKeys,
// in maps of their own. Leases (lease.go), backups held for other owners
// (heldBackup) and hand-offs in flight (handoffBatch) have their own types
// too.

// keyHead is what a record of the table holds whatever its role.
//
// The key is a string of its own. Until 2026-11-26 keys of up to 47 bytes
// were packed into their entry's allocation and read back with unsafe: 16
// bytes a key less (125 bytes of live heap per key at 100k keys, 141 now),
// but CoreUniform under cachegrind (estimated cycles: instructions + 10 x
// D1 misses + 100 x LL misses, 100,000 decisions) put what the packing
// saved at 1.8% (owner), 4.1% (cached) and 6.2% (leased) of the cores'
// cost, under the 10% an unsafe optimisation must pay (issue 14 item 5);
// the key kept in the record's allocation through unsafe.String in this
// layout measured -0.9%, +5.3% and -5.9% against the string of its own
// (docs/bench.md, "Typed records").
type keyHead struct {
	// key is the store's copy of the key (never a caller's buffer).
	key string
	// b is the authoritative bucket (owned) or the view the node decides on
	// (cached: the owner's last state with this node's own later hits taken).
	b bucket.Bucket
	// meta holds the record's flags (low flagBits: ownFlag or viewFlag) and
	// the coarse time of its last use (the rest): see coarse.
	meta uint32
	// dem is the decayed demand: owned: every node's; cached: this node's.
	dem float32
}

// ownedKey is this node's authoritative state of a key it owns.
type ownedKey struct {
	keyHead
	// interest is the members that hold a view of the key, encoded as
	// interest.go says; zero when none.
	interest int64
	// ownAdmitted is this node's own admissions in cached mode since the
	// key's last push (the owner's share budget; an early push is due when
	// it reaches the sync threshold).
	ownAdmitted int64
	// ownDemand is this node's own decayed demand of the key.
	ownDemand float32
	// lastFlush is the coarse time of the last flush or forwarded check of
	// the key from another node: its interest expires InterestTTL after it.
	lastFlush uint32
	// fen is the key's fence (fence.go) while it has one, nil otherwise.
	// It is kept in the record, not in a map of its own keyed by the key,
	// so that a decision finds it with the record it looks up anyway: the
	// map's lookup, two cache misses of its own (its group and its copy of
	// the key), was 17-21% of an owner-mode decision's CPU and 13-15% of a
	// leased one's in CoreUniform's profiles (issue 14; docs/bench.md,
	// "The fence in the record"). When the record leaves the owned table
	// the store forgets it, or, while checks wait on it, moves it to
	// store.fenced, whence the key's next owned record takes it back
	// (looseFence, forgetFence, adoptFence).
	fen *fence
	// gr is the key's lease grants (leasecap.go) while it has some, nil
	// otherwise: kept in the record for the reason fen is, so that leased
	// mode's cap (capLeased) finds them with the record, not in a map of
	// the shard keyed by the key (about 10% of a leased decision's CPU in
	// CoreUniform's profile; docs/bench.md, "The grants in the record").
	// The store moves them to shard.strayGrants when the record leaves the
	// owned table and back when one comes (looseGrants, adoptGrants), as
	// it does the fence. A second pointer, not one to the fence and the
	// grants together: with both the record and its bucket fill the
	// 112-byte size class the fence alone put them in (104 bytes), one
	// pointer would leave them there as well, and would put the fence,
	// there on every owned key a backup target fences, behind one more
	// allocation and one more load (TestRecordSizes).
	gr *keyGrants
}

// cachedKey is a non-owner's view of a key's state at its owner.
type cachedKey struct {
	keyHead
	// pending is the hits admitted here (and debts, charge.go) not yet put
	// in a flush.
	pending int64
	// inFlight is the hits of the flush in flight.
	inFlight int64
	// share is this node's share of the tokens as the owner gave it at the
	// last sync (0: none given yet); it does not decay.
	share float32
	// asked is the hits asked for (demand) since the last flush,
	// saturating.
	asked uint32
}

// localKey is a bucket of this node's alone: a ModeLocal key's or a key's
// under the local-share partition policy (policy.go). meta holds the
// coarse time of its last use as keyHead's does (no flags).
type localKey struct {
	b    bucket.Bucket
	meta uint32
}

// record is an ownedKey or a cachedKey: a key of a shard's tables, for
// the code that handles both.
type record interface {
	head() *keyHead
}

func (h *keyHead) head() *keyHead { return h }

// headOf returns the head of r, by a type switch (cheaper than the method
// call it falls back to).
func headOf(r record) *keyHead {
	switch r := r.(type) {
	case *ownedKey:
		return &r.keyHead
	case *cachedKey:
		return &r.keyHead
	}
	return r.head()
}

// ownFlag is a flag of an ownedKey, viewFlag one of a cachedKey, in the low
// bits of meta.
type (
	ownFlag  uint32
	viewFlag uint32
)

const (
	// flagChanged: an owned key is listed in its shard's changed list.
	flagChanged ownFlag = 1 << iota
	// flagBackup: an owned key changed since its last backup and is listed
	// in its shard's backup list (backup.go).
	flagBackup
	// flagGrants: an owned key is listed in its shard's leased list (it
	// has, or had since the last sweep, lease grants: leasecap.go).
	flagGrants
)

const (
	// flagDirty: a cached key is listed in its shard's dirty list.
	flagDirty viewFlag = 1 << iota
	// flagMoved: a view came from an owner other than the current one;
	// flushes carry it so that a new owner without state can rebuild.
	flagMoved
	// flagSynced: a view holds an owner's state (not a fresh bucket).
	flagSynced
)

const (
	// flagBits is the low bits of meta that hold flags; the coarse time of
	// the last use is in the rest.
	flagBits = 6
	flagMask = 1<<flagBits - 1
)

func (o *ownedKey) has(f ownFlag) bool   { return o.meta&uint32(f) != 0 }
func (o *ownedKey) set(f ownFlag)        { o.meta |= uint32(f) }
func (o *ownedKey) clear(f ownFlag)      { o.meta &^= uint32(f) }
func (v *cachedKey) has(f viewFlag) bool { return v.meta&uint32(f) != 0 }
func (v *cachedKey) set(f viewFlag)      { v.meta |= uint32(f) }
func (v *cachedKey) clear(f viewFlag)    { v.meta &^= uint32(f) }

func (h *keyHead) used() uint32  { return h.meta >> flagBits }
func (l *localKey) used() uint32 { return l.meta >> flagBits }

// stamp records a use at coarse time c, keeping the flags.
func (h *keyHead) stamp(c uint32)  { h.meta = h.meta&flagMask | c<<flagBits }
func (l *localKey) stamp(c uint32) { l.meta = l.meta&flagMask | c<<flagBits }

// touch records demand of hits at coarse time c: the decayed counters (dem
// and ownDemand) are brought to c and hits is added to dem, and to
// ownDemand as well when own.
func (o *ownedKey) touch(c uint32, hits int64, own bool) {
	k := decayFactor(ageOf(c, o.used()))
	o.dem *= k
	o.ownDemand *= k
	o.stamp(c)
	h := float32(hits)
	o.dem += h
	if own {
		o.ownDemand += h
	}
}

// touch records this node's demand of hits at coarse time c.
func (v *cachedKey) touch(c uint32, hits int64) {
	k := decayFactor(ageOf(c, v.used()))
	v.dem *= k
	v.stamp(c)
	v.dem += float32(hits)
}

// interested reports whether an owned key has interest.
func (o *ownedKey) interested() bool { return o.interest != 0 }

// ownedAlloc, cachedAlloc and localAlloc are a record and room for its
// bucket (bucket.Space), allocated together: one allocation instead of
// two, and the bucket on the cache lines the store reads before it anyway.
// A key is charged an ownedAlloc whatever its role (recordCharge), so that
// a change of role keeps its charge: 112 bytes, 16 more than a
// cachedAlloc since the owned record holds its fence and its grants
// (TestRecordSizes).
type (
	ownedAlloc struct {
		r  ownedKey
		sp bucket.Space
	}
	cachedAlloc struct {
		r  cachedKey
		sp bucket.Space
	}
	localAlloc struct {
		r  localKey
		sp bucket.Space
	}
)

// newOwned returns an owned record of key (copied) with a fresh bucket of l
// at now, last used at c, or the bucket's error (an invalid limit).
func newOwned(in *bucket.Interner, key string, l bucket.Limit, now time.Time, c uint32) (*ownedKey, error) {
	x := new(ownedAlloc)
	b, err := in.NewIn(&x.sp, l, now)
	if err != nil {
		return nil, err
	}
	x.r.key, x.r.b, x.r.meta = strings.Clone(key), b, c<<flagBits
	return &x.r, nil
}

// newCached is newOwned for a cached view (never synced).
func newCached(in *bucket.Interner, key string, l bucket.Limit, now time.Time, c uint32) (*cachedKey, error) {
	x := new(cachedAlloc)
	b, err := in.NewIn(&x.sp, l, now)
	if err != nil {
		return nil, err
	}
	x.r.key, x.r.b, x.r.meta = strings.Clone(key), b, c<<flagBits
	return &x.r, nil
}

// newLocal returns a local bucket of l at now, last used at c.
func newLocal(in *bucket.Interner, l bucket.Limit, now time.Time, c uint32) (*localKey, error) {
	x := new(localAlloc)
	b, err := in.NewIn(&x.sp, l, now)
	if err != nil {
		return nil, err
	}
	x.r.b, x.r.meta = b, c<<flagBits
	return &x.r, nil
}

// ownedWith is newOwned for a bucket the caller has already (a state
// handed off or kept), which the record takes.
func ownedWith(key string, b bucket.Bucket, c uint32) *ownedKey {
	x := new(ownedAlloc)
	x.r.key, x.r.b, x.r.meta = strings.Clone(key), b, c<<flagBits
	return &x.r
}

// cachedWith is ownedWith for a cached view.
func cachedWith(key string, b bucket.Bucket, c uint32) *cachedKey {
	x := new(cachedAlloc)
	x.r.key, x.r.b, x.r.meta = strings.Clone(key), b, c<<flagBits
	return &x.r
}

// toOwned replaces v, the cached view of a key of s, by an owned record
// that keeps its bucket and last use, and returns it (this node became the
// key's owner). The owned record starts with no interest and with this
// node's demand as everyone's (the others' comes with their flushes). now
// is the bucket time (adoptGrants).
func (st *store) toOwned(s *shard, v *cachedKey, now time.Time) *ownedKey {
	x := new(ownedAlloc)
	x.r.key, x.r.b, x.r.meta, x.r.dem = v.key, bucket.MoveIn(&x.sp, v.b), v.meta&^flagMask, v.dem
	x.r.ownDemand = v.dem
	st.replace(s, v, &x.r)
	st.adoptFence(&x.r)
	st.adoptGrants(s, &x.r, now)
	return &x.r
}

// toCached replaces o, the owned record of a key of s, by a cached view
// that keeps its bucket and last use, and returns it (the key moved to
// another owner). The view's demand is this node's own; it has no share
// (the owner gives it at the next sync). It is marked as coming from
// another owner (flagMoved, and flagSynced: it holds an owner's state).
func (st *store) toCached(s *shard, o *ownedKey) *cachedKey {
	st.looseFence(o)
	st.looseGrants(s, o)
	x := new(cachedAlloc)
	x.r.key, x.r.b, x.r.dem = o.key, bucket.MoveIn(&x.sp, o.b), o.ownDemand
	x.r.meta = o.meta&^flagMask | uint32(flagMoved|flagSynced)
	st.replace(s, o, &x.r)
	return &x.r
}

// replace puts r, a record of old's key in the other role, in s's
// tables in place of old, and retires old.
func (st *store) replace(s *shard, old, r record) {
	h := st.hash(headOf(old).key)
	switch old := old.(type) {
	case *ownedKey:
		s.own.del(h, old)
	case *cachedKey:
		s.view.del(h, old)
	}
	switch r := r.(type) {
	case *ownedKey:
		s.own.put(h, r)
	case *cachedKey:
		s.view.put(h, r)
	}
	headOf(old).meta &^= flagMask
}
