package sync

import (
	"hash/maphash"
	"strings"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/bucket"
)

// numShards is the number of shards of the keyed store. A power of two, so a
// key's shard is a mask of its hash. Shards bound the work of one sweep step
// (a shard per step) and let flushes and pushes visit only the shards with
// work (dirtyShards, changedShards); they are not for concurrency: the Node
// is sequential.
const numShards = 64

// The flags of an entry, in the low bits of entry.meta.
const (
	// flagOwned: the entry is this node's authoritative state of the key.
	// Without it the entry is a cached view of the owner's state.
	flagOwned = 1 << iota
	// flagDirty: a cached entry is listed in its shard's dirty list.
	flagDirty
	// flagChanged: an owned entry is listed in its shard's changed list.
	flagChanged
	// flagMoved: a cached view came from an owner other than the current one;
	// flushes carry it so that a new owner without state can rebuild.
	flagMoved
	// flagSynced: a cached view holds an owner's state (not a fresh bucket).
	flagSynced
	// flagKeyed: the entry shares its allocation with its key, which
	// entry.key returns. It never changes: the role changes (makeOwned,
	// makeCached) and remove keep it.
	flagKeyed

	flagBits = 6
	flagMask = 1<<flagBits - 1
	// flagRole is the flags that a change of role or a removal clears.
	flagRole = flagMask &^ flagKeyed
)

// entry is one key of the store. It is kept to 48 bytes (one allocation size
// class) because a node stores up to Config.MaxKeys of them; the fields that
// only one role needs share storage, as documented per field. An entry made
// by newEntry or newKeyedEntry shares its allocation with its bucket (when
// the algorithm's state fits in a bucket.Space) and, newKeyedEntry's, with
// the store's copy of its key.
type entry struct {
	// b is the authoritative bucket (owned) or the view the node decides on
	// (cached: the owner's last state with this node's own later hits taken).
	b bucket.Bucket
	// n1 is, cached: the hits admitted here and not yet put in a flush
	// (pending); owned: the key's interest, zero when none (interest.go).
	n1 int64
	// n2 is, cached: the hits of the flush in flight; owned: this node's own
	// admissions in cached mode during epoch u (the owner's share budget).
	n2 int64
	// meta holds the flags (low flagBits) and the coarse time of the last
	// demand, the last use (the rest): see coarse.
	meta uint32
	// dem is the decayed demand: owned: every node's; cached: this node's.
	dem float32
	// f is, owned: the owner's own decayed demand; cached: this node's
	// share of the tokens as the owner gave it at the last sync (0: none
	// given yet), which does not decay.
	f float32
	// u is, owned: the coarse time of the last flush from another node (the
	// interest expires InterestTTL after it); cached: the hits asked for
	// (demand) since the last flush, saturating.
	u uint32
}

func (e *entry) has(f uint32) bool { return e.meta&f != 0 }
func (e *entry) set(f uint32)      { e.meta |= f }
func (e *entry) clear(f uint32)    { e.meta &^= f }
func (e *entry) used() uint32      { return e.meta >> flagBits }

// touch records demand of hits at coarse time c: the decayed counters (dem,
// and f of an owned entry) are brought to c and hits is added to dem (and
// to f as well when own).
func (e *entry) touch(c uint32, hits int64, own bool) {
	k := decayFactor(ageOf(c, e.used()))
	e.dem *= k
	if e.has(flagOwned) {
		e.f *= k
	}
	e.meta = e.meta&flagMask | c<<flagBits
	h := float32(hits)
	e.dem += h
	if own {
		e.f += h
	}
}

// makeOwned turns a cached view into an owned entry keeping its bucket, and
// makeCached an owned entry into a cached view; the role-specific fields
// start afresh and the counters change meaning (owned: every node's demand
// and its own; cached: its own demand and its share). An owned entry starts
// with this node's demand as everyone's (the others' comes with their
// flushes); a cached one with no share (the owner gives it at the next
// sync).
func (e *entry) makeOwned() {
	if e.has(flagOwned) {
		return
	}
	e.meta = e.meta&^flagRole | flagOwned
	e.n1, e.n2, e.u = 0, 0, 0
	e.f = e.dem
}

func (e *entry) makeCached(moved bool) {
	if e.has(flagOwned) {
		e.dem, e.f = e.f, 0
	}
	e.meta = e.meta &^ flagRole
	if moved {
		e.meta |= flagMoved | flagSynced
	}
	e.n1, e.n2, e.u = 0, 0, 0
}

// shard is one part of the store.
type shard struct {
	// m holds the owned and cached entries.
	m table
	// local holds the buckets of ModeLocal checks, and share those of the
	// local-share partition policy: separate from m because the same key may
	// be checked in several ways. Their entries use b and meta only.
	local, share map[string]*entry
	// leases holds this node's leases on keys owned elsewhere (leased mode).
	leases map[string]*lease
	// granted holds, per owned key, the lease grants that may still be
	// spent, by expiry (leasecap.go); nil until the first grant.
	granted map[string][]liveGrant
	// dirty lists cached keys with something to flush (flagDirty set);
	// changed lists owned keys with stale interested nodes (flagChanged).
	dirty, changed []string
	// routes holds, at the same index as dirty, the entry of the key and
	// the peer it was routed to when listed (see route); changedE the entry
	// of each changed key (trusted while it is owned and flagChanged: an
	// entry removed from m loses its flags).
	routes   []route
	changedE []*entry
	// backup lists owned keys changed since their last backup (flagBackup
	// set, see backup.go).
	backup []*entry
	// top is the hottest keys of the shard at its last sweep.
	top []HotKey
	// bit is the shard's bit in the store's masks.
	bit uint64
}

// route is a dirty key's entry and its owner's peer under view v, noted when
// the key is listed, so that a flush pass that does not send to that peer
// skips the key without looking it up or hashing it again. It is trusted
// only while e is still a dirty cached entry (a dirty entry is never removed
// from the store, so e is then the key's entry) and v is the current view;
// otherwise the key is looked up and routed again. v is nil when unknown.
type route struct {
	e *entry
	p *peer
	v *view
}

// resolveRoute returns the entry of s.dirty[j] and the peer it is to be
// flushed to under v, or ok false when it is to be dropped from the list
// (its entry is gone, owned or no longer dirty, or it has no owner to go
// to; its flagDirty is then cleared).
func (st *store) resolveRoute(s *shard, j int, v *view) (e *entry, p *peer, ok bool) {
	r := s.routes[j]
	e = r.e
	if e == nil || !e.has(flagDirty) || e.has(flagOwned) {
		e = st.lookup(s, s.dirty[j])
	}
	if e == nil || e.has(flagOwned) || !e.has(flagDirty) {
		if e != nil {
			e.clear(flagDirty)
		}
		return nil, nil, false
	}
	p = r.p
	if r.v != v || r.e != e {
		key := s.dirty[j]
		p = v.peers[v.owner(key)]
	}
	if p == nil {
		// The key is this node's now, or the ring is empty.
		e.clear(flagDirty)
		return nil, nil, false
	}
	return e, p, true
}

// store is the keyed store of a Node, in shards.
type store struct {
	shards [numShards]shard
	// maxKeys bounds the keys of all shards (Config.MaxKeys); metrics.Keys
	// counts them.
	maxKeys int64
	// maxBytes bounds the bytes charged for the keys and the held backups
	// (Config.MaxKeyBytes, 0: none); bytes is the charge now (mirrored in
	// metrics.KeyBytes), heldBytes the held backups' part of it (budget.go).
	maxBytes, bytes, heldBytes int64
	// heldNext is the shard a held backup evicts from next.
	heldNext int
	// cands is evict's list of candidates, kept for the next eviction.
	cands   []evictCand
	metrics *Metrics
	// dirtyShards and changedShards have shard i's bit set while its dirty
	// (changed) list is not empty, so that flushes and pushes visit only
	// those shards.
	dirtyShards, changedShards uint64
	// inserts counts the keys inserted (insertInto), so that a pass over
	// the parked probes can tell that none of their keys came (see
	// Node.parkedDue).
	inserts uint64
	// seed seeds the store hash (hash): one per store.
	seed maphash.Seed
}

// listDirty appends key, routed by r, to s's dirty list.
func (st *store) listDirty(s *shard, key string, r route) {
	if len(s.dirty) == 0 {
		st.dirtyShards |= s.bit
	}
	s.dirty = append(s.dirty, key)
	s.routes = append(s.routes, r)
}

// keepDirty truncates s's dirty list to its first k keys, once a pass
// has moved the keys it keeps to the front.
func (st *store) keepDirty(s *shard, k int) {
	clear(s.dirty[k:])
	clear(s.routes[k:])
	s.dirty, s.routes = s.dirty[:k], s.routes[:k]
	if k == 0 {
		st.dirtyShards &^= s.bit
	}
}

// listChanged appends key, whose entry is e, to s's changed list.
func (st *store) listChanged(s *shard, key string, e *entry) {
	if len(s.changed) == 0 {
		st.changedShards |= s.bit
	}
	s.changed = append(s.changed, key)
	s.changedE = append(s.changedE, e)
}

// changedEntry returns the entry of s.changed[j] if it is still an owned,
// changed entry of s.m, or nil.
func (st *store) changedEntry(s *shard, j int) *entry {
	e := s.changedE[j]
	if !e.has(flagOwned) || !e.has(flagChanged) {
		e = st.lookup(s, s.changed[j])
	}
	if e == nil || !e.has(flagOwned) || !e.has(flagChanged) {
		return nil
	}
	return e
}

// clearChanged empties s's changed list.
func (st *store) clearChanged(s *shard) {
	clear(s.changed)
	clear(s.changedE)
	s.changed, s.changedE = s.changed[:0], s.changedE[:0]
	st.changedShards &^= s.bit
}

// removeEntry deletes key, whose entry is e, from s.m (see forget).
func (st *store) removeEntry(s *shard, key string, e *entry) {
	s.m.del(st.hash(key), e)
	st.charge(-entryCharge(len(key), e, false))
	st.forget(e)
}

// removeFrom deletes key, whose entry is e, from m, s.local or s.share of
// its shard (see forget).
func (st *store) removeFrom(m map[string]*entry, key string, e *entry) {
	delete(m, key)
	st.charge(-entryCharge(len(key), e, true))
	st.forget(e)
}

// forget clears the flags of e, removed from the store, so that a list that
// still holds e (see route and shard.changedE) looks the key up again, and
// counts the removal.
func (st *store) forget(e *entry) {
	e.meta &^= flagRole
	st.metrics.Evicted.Add(1)
	st.metrics.Keys.Add(-1)
}

func newStore(maxKeys int, maxBytes int64, m *Metrics) *store {
	st := &store{maxKeys: int64(maxKeys), maxBytes: maxBytes, metrics: m, seed: maphash.MakeSeed()}
	for i := range st.shards {
		s := &st.shards[i]
		s.bit = 1 << i
		s.local = make(map[string]*entry)
		s.share = make(map[string]*entry)
		s.leases = make(map[string]*lease)
	}
	return st
}

// hash returns the store hash of key, which places it in its shard's table
// (table). Keys come from clients, so the hash is seeded, with the store's
// own seed (hash/maphash): with an unseeded hash such as xxhash a client
// can make any number of keys share a hash, and every lookup among them
// would then walk them all. Go's maps are seeded for the same reason.
func (st *store) hash(key string) uint64 { return maphash.String(st.seed, key) }

// shardOf returns the shard of key. Unlike the slot in the shard's table,
// the shard is the same on every node and in every run: an owner lists
// the keys of a push shard by shard, in an order its peers can apply in
// runs (lookupRuns), and the simulator reproduces a run to the byte. At
// worst a client puts its keys in one shard: a longer sweep step there, not
// a slower lookup.
func (st *store) shardOf(key string) *shard {
	return &st.shards[xxhash.Sum64String(key)&(numShards-1)]
}

// lookup returns the entry of key in s.m, or nil; s is key's shard.
func (st *store) lookup(s *shard, key string) *entry { return s.m.get(st.hash(key), key) }

// entries returns the number of keys the shard stores.
func (s *shard) entries() int { return s.m.len() + len(s.local) + len(s.share) }

// insertInto adds e under a copy of key to the map into, first evicting
// the least recently used keys of its shard if the store is full.
func (st *store) insertInto(s *shard, into map[string]*entry, key string, e *entry, c uint32) {
	st.insertOwn(s, into, strings.Clone(key), e, c) // never pin a caller's larger buffer
}

// insertOwn is insertInto for a key that is the store's own copy
// already (see newKeyedEntry).
func (st *store) insertOwn(s *shard, into map[string]*entry, key string, e *entry, c uint32) {
	need := entryCharge(len(key), e, true)
	if st.full(need) {
		st.makeRoom(s, c, need)
	}
	into[key] = e
	st.charge(need)
	st.metrics.Keys.Add(1)
	st.inserts++
}

// insertEntry adds e, a keyed entry (newKeyedEntry) whose key has the
// store hash h and is not in s.m, to s.m, first evicting as insertInto
// does.
func (st *store) insertEntry(s *shard, h uint64, e *entry, c uint32) {
	key, _ := e.key()
	need := entryCharge(len(key), e, false)
	if st.full(need) {
		st.makeRoom(s, c, need)
	}
	s.m.put(h, e)
	st.charge(need)
	st.metrics.Keys.Add(1)
	st.inserts++
}

// newEntry returns an entry for a fresh bucket of l at now, or the bucket's
// error (an invalid limit). The bucket is built in the entry's allocation
// when it fits there (see bucket.Space).
func newEntry(l bucket.Limit, now time.Time, c uint32) (*entry, error) {
	x := new(entryBucket)
	b, err := bucket.NewIn(&x.sp, l, now)
	if err != nil {
		return nil, err
	}
	x.e = entry{b: b, meta: c << flagBits}
	return &x.e, nil
}

// entryBucket, entryKey16, entryKey32, entryKey48 and entryKeyLong are an
// entry, room for its bucket and (the last four) the store's copy of its
// key, allocated together (80, 96, 112, 128 and 112 bytes, Go's allocation
// size classes, with a token bucket of 32 bytes: its limit is interned, see
// bucket.Space): one allocation instead of three, and a lookup that compares
// the stored key reads the entry's memory, which it reads next anyway, and
// then the bucket's, instead of cache lines of their own. The key comes
// right after the entry, so that the key and the entry (read together by
// every lookup) are adjacent; the bucket follows. The keyed forms
// start alike, as keyedHead does: the entry, flagged flagKeyed, then the
// key's length n, or longKey when the key is stored as a string of its own;
// so a list can hold an entry alone and get its key back (entry.key).
// (keyedHead is not embedded: its padding would push the forms into larger
// size classes.)
type entryBucket struct {
	e  entry
	sp bucket.Space
}

type keyedHead struct {
	e entry
	n uint8
}

type entryKey16 struct {
	e  entry
	n  uint8
	k  [15]byte
	sp bucket.Space
}

type entryKey32 struct {
	e  entry
	n  uint8
	k  [31]byte
	sp bucket.Space
}

type entryKey48 struct {
	e  entry
	n  uint8
	k  [47]byte
	sp bucket.Space
}

type entryKeyLong struct {
	e  entry
	n  uint8
	k  string
	sp bucket.Space
}

// longKey is keyedHead.n of an entryKeyLong.
const longKey = 255

// newKeyedEntry is newEntry for key, which it also copies: it returns the
// entry and the copy, to be inserted with insertOwn. The copy is never
// modified, and the entry stays allocated while either is in use.
func newKeyedEntry(key string, l bucket.Limit, now time.Time, c uint32) (*entry, string, error) {
	e, sp, own := allocKeyed(key)
	b, err := bucket.NewIn(sp, l, now)
	if err != nil {
		return nil, "", err
	}
	e.b = b
	e.meta |= c << flagBits
	return e, own, nil
}

// newKeyedEntryFor is newKeyedEntry for a bucket the caller has already
// (a state handed off or restored), which the entry takes.
func newKeyedEntryFor(key string, b bucket.Bucket, c uint32) *entry {
	e, _, _ := allocKeyed(key)
	e.b = b
	e.meta |= c << flagBits
	return e
}

// allocKeyed allocates a keyed entry (flagKeyed, no bucket yet) and a copy
// of key in one of the forms above, and returns the entry, its room for a
// bucket and the copy.
func allocKeyed(key string) (*entry, *bucket.Space, string) {
	switch {
	case len(key) <= len(entryKey16{}.k):
		x := &entryKey16{e: entry{meta: flagKeyed}, n: uint8(len(key))}
		copy(x.k[:], key)
		return &x.e, &x.sp, unsafe.String(&x.k[0], len(key))
	case len(key) <= len(entryKey32{}.k):
		x := &entryKey32{e: entry{meta: flagKeyed}, n: uint8(len(key))}
		copy(x.k[:], key)
		return &x.e, &x.sp, unsafe.String(&x.k[0], len(key))
	case len(key) <= len(entryKey48{}.k):
		x := &entryKey48{e: entry{meta: flagKeyed}, n: uint8(len(key))}
		copy(x.k[:], key)
		return &x.e, &x.sp, unsafe.String(&x.k[0], len(key))
	}
	x := &entryKeyLong{e: entry{meta: flagKeyed}, n: longKey, k: strings.Clone(key)}
	return &x.e, &x.sp, x.k
}

// key returns the store's copy of the key of e, and false if e does not
// hold its key (it was not made by newKeyedEntry or newKeyedEntryFor;
// every entry of a shard's owned map is).
func (e *entry) key() (string, bool) {
	if !e.has(flagKeyed) {
		return "", false
	}
	// e is the first field of the form that n names, and every form has n
	// where keyedHead has it: the conversions read e's own allocation only.
	p := unsafe.Pointer(e)
	switch n := (*keyedHead)(p).n; {
	case int(n) <= len(entryKey16{}.k):
		return unsafe.String(&(*entryKey16)(p).k[0], n), true
	case int(n) <= len(entryKey32{}.k):
		return unsafe.String(&(*entryKey32)(p).k[0], n), true
	case int(n) <= len(entryKey48{}.k):
		return unsafe.String(&(*entryKey48)(p).k[0], n), true
	}
	return (*entryKeyLong)(p).k, true
}

// configure makes e's bucket run under l for a request of hits at now, as
// reconfigure says, and reports whether the live bucket's limit changed.
func configure(e *entry, l bucket.Limit, now time.Time, hits int64) (bool, error) {
	b, changed, err := reconfigure(e.b, l, now, hits)
	if err != nil {
		return false, err
	}
	e.b = b
	return changed, nil
}

// reconfigure returns b made to run under l for a request of hits at now.
// Parameters cannot refill a bucket (issue 16):
//
//   - a peek (hits 0) never reconfigures: b is returned as it is, and the
//     answer reports b's own limit;
//   - nor does a request that b, under its own limit, could not admit now:
//     a spent key stays spent whatever limit a check names;
//   - otherwise a live bucket is reconfigured (bucket.Bucket.Reconfigure,
//     which keeps what was consumed, as Guava's setRate keeps the stored
//     permits) and then holds no more than it held before: a change of
//     limit or period never hands tokens back at once; a looser limit only
//     refills faster from there.
//
// A bucket of another algorithm is replaced by a new one, since the request
// defines the limit; the public API keeps algorithms apart by key, so that
// happens only to rule buckets whose rule changed algorithm. changed
// reports whether the limit of the bucket returned differs from b's.
func reconfigure(b bucket.Bucket, l bucket.Limit, now time.Time, hits int64) (_ bucket.Bucket, changed bool, _ error) {
	if b.Config() == l || hits == 0 {
		return b, false, nil
	}
	if b.Config().Algorithm != l.Algorithm {
		nb, err := bucket.New(l, now)
		return nb, err == nil, err
	}
	before, err := b.Take(now, 0)
	if err != nil || before.Remaining < hits {
		return b, false, nil
	}
	if err := b.Reconfigure(now, l); err != nil {
		return b, false, err
	}
	if after, err := b.Take(now, 0); err == nil && after.Remaining > before.Remaining {
		_ = b.Drain(now, after.Remaining-before.Remaining)
	}
	return b, true, nil
}

// sweepEntries evicts the keys of s whose state equals a fresh bucket's,
// that carry nothing to send and that were not used for grace (a sweep
// period: a key in steady use under a large limit is not evicted and
// created again); it forgets interest older than interestTTL, and records
// the shard's hottest keys.
func (st *store) sweepEntries(s *shard, now time.Time, c, grace, interestTTL uint32) {
	s.top = s.top[:0]
	for k, e := range s.m.all() {
		age := ageOf(c, e.used())
		if e.has(flagOwned) {
			if e.interested() && ageOf(c, e.u) > interestTTL {
				e.n1 = 0 // interest.go: no interest
			}
			if age >= grace && !e.interested() && !e.has(flagChanged) && e.b.Idle(now) {
				st.removeEntry(s, k, e)
				continue
			}
		} else if age >= grace && !e.has(flagDirty) && e.n1 == 0 && e.n2 == 0 && s.leases[k] == nil && e.b.Idle(now) {
			st.removeEntry(s, k, e)
			continue
		}
		s.noteHot(k, e, c)
	}
	for _, m := range []map[string]*entry{s.local, s.share} {
		for k, e := range m {
			if ageOf(c, e.used()) >= grace && e.b.Idle(now) {
				st.removeFrom(m, k, e)
			}
		}
	}
}

// hotPerShard is how many hot keys a shard remembers between sweeps.
const hotPerShard = 4

// noteHot keeps key in the shard's top list if its demand is among the
// highest seen in this sweep.
func (s *shard) noteHot(key string, e *entry, c uint32) {
	rate := float64(e.dem*decayFactor(ageOf(c, e.used()))) / demandTau.Seconds()
	if rate < minHotRate {
		return
	}
	h := HotKey{Key: key, Rate: rate, Owned: e.has(flagOwned)}
	if len(s.top) < hotPerShard {
		s.top = append(s.top, h)
	} else if i := s.minTop(); hotLess(s.top[i], h) {
		s.top[i] = h
	}
}

func (s *shard) minTop() int {
	m := 0
	for i := range s.top {
		if hotLess(s.top[i], s.top[m]) {
			m = i
		}
	}
	return m
}

// hotLess orders hot keys by rate, then by key (deterministic ties).
func hotLess(a, b HotKey) bool {
	if a.Rate != b.Rate {
		return a.Rate < b.Rate
	}
	return a.Key > b.Key
}

// lookupRun is the most keys of one shard that lookupRuns looks up at once.
const lookupRun = 16

// lookupRuns cuts the items 0..n-1 of a message into runs of up to
// lookupRun consecutive items of one shard (key(i) gives item i's key, or
// false to skip the item), looks up the entries of a run's keys, and then
// calls apply(s, i, e) for each item i of the run, in order, with s its
// shard and e its entry (nil if none). Looking a run's entries up
// before applying any lets those lookups, mostly cache misses, overlap
// instead of each waiting behind the work on the item before. It pays when
// the sender lists its items shard by shard (flush answers, pushes); apply
// must not add or remove entries of the shard.
func (st *store) lookupRuns(n int, key func(int) (string, bool), apply func(s *shard, i int, e *entry)) {
	var (
		s      *shard
		idx    [lookupRun]int
		keys   [lookupRun]string
		hashes [lookupRun]uint64
		es     [lookupRun]*entry
		k      int
	)
	for i := 0; i <= n; i++ {
		var is *shard
		var ki string
		var hi uint64
		if i < n {
			var ok bool
			if ki, ok = key(i); !ok {
				continue
			}
			is, hi = st.shardOf(ki), st.hash(ki)
		}
		if k > 0 && (is != s || k == lookupRun) {
			for r := range k {
				es[r] = s.m.get(hashes[r], keys[r])
			}
			for r := range k {
				apply(s, idx[r], es[r])
			}
			k = 0
		}
		s = is
		if is != nil {
			idx[k], keys[k], hashes[k] = i, ki, hi
			k++
		}
	}
}
