package sync

import (
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// numShards is the number of shards of the keyed store. A power of two, so a
// key's shard is a mask of its hash. Shards bound the work of one sweep step
// (a shard per step) and let flushes and pushes visit only the shards with
// work (dirtyShards, changedShards); they are not for concurrency: the Node
// is sequential.
const numShards = 64

// shard is one part of the store.
type shard struct {
	// own holds the owned records, view the cached views (record.go): a
	// key is in one of them at most.
	own  table[ownedKey]
	view table[cachedKey]
	// local holds the buckets of ModeLocal checks, and share those of the
	// local-share partition policy: separate from m because the same key may
	// be checked in several ways.
	local, share map[string]*localKey
	// leases holds this node's leases on keys owned elsewhere (leased mode).
	leases map[string]*lease
	// leased lists the owned records with lease grants (ownedKey.gr),
	// each once (flagGrants), for the sweep (sweepGrants); strayGrants
	// holds the grants of keys with no owned record here (leasecap.go,
	// looseGrants), nil until the first.
	leased      []*ownedKey
	strayGrants map[string]*keyGrants
	// dirty lists cached keys with something to flush (flagDirty set);
	// changed lists owned keys with stale interested nodes (flagChanged).
	dirty, changed []string
	// routes holds, at the same index as dirty, the view of the key and
	// the peer it was routed to when listed (see route); changedE the
	// record of each changed key (trusted while it is flagChanged: a record
	// removed from m or replaced in it loses its flags).
	routes   []route
	changedE []*ownedKey
	// backup lists owned keys changed since their last backup (flagBackup
	// set, see backup.go).
	backup []*ownedKey
	// top is the hottest keys of the shard at its last sweep.
	top []HotKey
	// bit is the shard's bit in the store's masks.
	bit uint64
}

// route is a dirty key's view and its owner's peer under view v, noted when
// the key is listed, so that a flush pass that does not send to that peer
// skips the key without looking it up or hashing it again. It is trusted
// only while e is still dirty (a dirty view is never removed from the
// store, and one replaced by an owned record loses its flags, so e is then
// the key's record) and v is the current view; otherwise the key is looked
// up and routed again. v is nil when unknown.
type route struct {
	e *cachedKey
	p *peer
	v *view
}

// resolveRoute returns the view of s.dirty[j] and the peer it is to be
// flushed to under v, or ok false when it is to be dropped from the list
// (its view is gone, owned or no longer dirty, or it has no owner to go
// to; its flagDirty is then cleared).
func (st *store) resolveRoute(s *shard, j int, v *view) (e *cachedKey, p *peer, ok bool) {
	r := s.routes[j]
	e = r.e
	if e == nil || !e.has(flagDirty) {
		e = st.lookupCached(s, s.dirty[j])
	}
	if e == nil || !e.has(flagDirty) {
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
	// lims interns the limits of the buckets built and decoded here
	// (newOwned, decodeStateInto): most are under one limit.
	lims bucket.Interner
	// heldNext is the shard a held backup evicts from next.
	heldNext int
	// cands is evict's list of candidates, kept for the next eviction.
	cands []evictCand
	// marks remembers the keys evicted while not fresh (evicted.go), and
	// the grants folded for want of room (leasecap.go, foldGrants).
	marks marks
	// leaseTTL is Config.LeaseTTL (foldGrants); foldedUntil the latest
	// mark of grants folded so far (capFolded), Unix ns, 0 before the
	// first.
	leaseTTL    time.Duration
	foldedUntil int64
	metrics     *Metrics
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
	// fenced holds the fences (fence.go) of keys with no owned record in
	// the store: fenced before their record came, or whose record was
	// removed or became a view while checks waited on them (forgetFence
	// forgets the others; settleLoose these, once a sweep). An owned
	// record holds its key's fence itself (ownedKey.fen). nfences counts
	// the fences, both kinds.
	fenced  map[string]*fence
	nfences int
	// gone holds, per ring partition (partitionOf), the holds of the fences
	// forgotten with their records (forgetFence): a fence of the partition
	// made afresh takes them (newFence). partitions is the ring's
	// partition count (Config.Ring.PartitionCount).
	gone       map[int]*fence
	partitions int
	// released holds the last states of the keys whose fence was forgotten
	// with their record, to send to their backup targets with reserve 0
	// (backup.go, sendReleases), at most maxReleases.
	released []*peerv1.KeyState
}

// partitionOf returns key's ring partition, whatever the members.
func (st *store) partitionOf(key string) int { return ring.PartitionOf(key, st.partitions) }

// newFence returns a new fence for key, counted in nfences, that takes the
// holds of the fences of its partition forgotten before (forgetFence).
func (st *store) newFence(key string) *fence {
	f := &fence{}
	st.nfences++
	if len(st.gone) == 0 {
		return f
	}
	if g := st.gone[st.partitionOf(key)]; g != nil {
		f.holdUntil, f.holdEcho, f.holdFrom, f.holdFor = g.holdUntil, g.holdEcho, g.holdFrom, g.holdFor
	}
	return f
}

// forgetFence forgets f, the fence of key, whose record left the store,
// and reports whether it did: when no check waits on it and all it spent
// is within the bound its target acknowledged. Its holds (resetFences,
// holdForOldTarget) go to its partition's entry in gone, for the fences
// of the partition made afresh; a fence held from another old target than
// the one its partition's entry is held from is not forgotten.
//
// Why a fence so forgotten admits nothing beyond the envelope (fence.go):
// the key's next fence starts with bound 0, so its owner drains nothing
// as owner before its target acknowledges a backup of the key's state
// then, sent after every backup of the old fence (one link delivers in
// order); the holder merges that state into what it held (keeping the
// most consumed) and keeps the new reserve, which covers all the new fence
// lets the owner drain. Until that acknowledgement the holder's state,
// its old reserve drained, is at least as consumed as the owner's when the
// record left (spent within bound), and the owner drains nothing more.
// A hold in progress, or one that a later membership change starts for
// the partition (resetFences visits gone as it visits the fences), goes
// on for the new fence. What the owner admits again from a fresh record
// after an eviction is the eviction's cost (budget.go), kept fence or
// not.
func (st *store) forgetFence(key string, f *fence) bool {
	if len(f.holds) > 0 || f.listed || f.spent > f.bound || st.partitions <= 0 {
		return false
	}
	p := st.partitionOf(key)
	g := st.gone[p]
	if g != nil && f.holdFrom != "" && g.holdFrom != "" && (g.holdFrom != f.holdFrom || g.holdFor != f.holdFor) {
		return false
	}
	if g == nil {
		if st.gone == nil {
			st.gone = map[int]*fence{}
		}
		g = &fence{}
		st.gone[p] = g
	}
	if f.holdUntil.After(g.holdUntil) {
		g.holdUntil = f.holdUntil
	}
	g.holdEcho = max(g.holdEcho, f.holdEcho)
	if f.holdFrom != "" {
		g.holdFrom, g.holdFor = f.holdFrom, f.holdFor
	}
	st.nfences--
	return true
}

// releaseGone ends the holds of store.gone held from the old target from
// (holdForOldTarget) for a target that from's acknowledgement shows it
// knows (known), as fenceHeld ends a fence's.
func (st *store) releaseGone(from string, known []string) {
	for _, g := range st.gone {
		if g.holdFrom == from && slices.Contains(known, g.holdFor) {
			g.holdFrom, g.holdFor = "", ""
		}
	}
}

// settleLoose forgets the fences in store.fenced that may be forgotten
// now (forgetFence): those kept when their record left, while checks
// waited on them.
func (st *store) settleLoose() {
	for key, f := range st.fenced {
		if st.forgetFence(key, f) {
			delete(st.fenced, key)
		}
	}
}

// adoptFence gives e, an owned record just put in the store, its key's
// fence if store.fenced holds one.
func (st *store) adoptFence(e *ownedKey) {
	if len(st.fenced) == 0 {
		return
	}
	if f, ok := st.fenced[e.key]; ok {
		e.fen = f
		delete(st.fenced, e.key)
	}
}

// looseFence forgets the fence of e, an owned record leaving the store
// (or its owned table), or moves it to store.fenced when it may not be
// forgotten yet (forgetFence).
func (st *store) looseFence(e *ownedKey) {
	f := e.fen
	if f == nil {
		return
	}
	e.fen = nil
	if st.forgetFence(e.key, f) {
		st.noteRelease(e, f) // backup.go: its held state may be swept
		return
	}
	if st.fenced == nil {
		st.fenced = map[string]*fence{}
	}
	st.fenced[e.key] = f
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

// listChanged appends key, whose record is e, to s's changed list.
func (st *store) listChanged(s *shard, key string, e *ownedKey) {
	if len(s.changed) == 0 {
		st.changedShards |= s.bit
	}
	s.changed = append(s.changed, key)
	s.changedE = append(s.changedE, e)
}

// changedEntry returns the record of s.changed[j] if it is still an owned,
// changed record of s.m, or nil.
func (st *store) changedEntry(s *shard, j int) *ownedKey {
	e := s.changedE[j]
	if !e.has(flagChanged) {
		e = st.lookupOwned(s, s.changed[j])
	}
	if e == nil || !e.has(flagChanged) {
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

// removeEntry deletes key, whose record is e, from s's tables, and clears
// e's flags, so that a list that still holds e (see route and
// shard.changedE) looks the key up again.
func (st *store) removeEntry(s *shard, key string, e record) {
	switch e := e.(type) {
	case *ownedKey:
		s.own.del(st.hash(key), e)
		st.looseFence(e)
		st.looseGrants(s, e)
	case *cachedKey:
		s.view.del(st.hash(key), e)
	}
	st.charge(-recordCharge(len(key)))
	headOf(e).meta &^= flagMask
	st.forget()
}

// removeFrom deletes key, whose bucket is l, from m, s.local or s.share of
// its shard.
func (st *store) removeFrom(m map[string]*localKey, key string, l *localKey) {
	delete(m, key)
	st.charge(-localCharge(len(key)))
	st.forget()
}

// forget counts the removal of a key.
func (st *store) forget() {
	st.metrics.Evicted.Add(1)
	st.metrics.Keys.Add(-1)
}

func newStore(maxKeys int, maxBytes int64, partitions int, m *Metrics) *store {
	st := &store{maxKeys: int64(maxKeys), maxBytes: maxBytes, partitions: partitions, metrics: m, seed: maphash.MakeSeed()}
	st.marks.size = markSlots(st.maxKeys)
	for i := range st.shards {
		s := &st.shards[i]
		s.bit = 1 << i
		s.local = make(map[string]*localKey)
		s.share = make(map[string]*localKey)
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
func (st *store) shardOf(key string) *shard { return st.shardAt(ring.KeyHash(key)) }

// shardAt returns the shard of the key whose ring.KeyHash is kh: shardOf
// for a caller that has the key's hash already (it places the key on the
// ring too).
func (st *store) shardAt(kh uint64) *shard { return &st.shards[kh&(numShards-1)] }

// lookup returns the record of key in s's tables, or nil; s is key's
// shard.
func (st *store) lookup(s *shard, key string) record { return st.lookupAt(s, st.hash(key), key) }

// lookupAt is lookup for a caller that has key's store hash h already.
func (st *store) lookupAt(s *shard, h uint64, key string) record {
	if o := s.own.get(h, key); o != nil {
		return o
	}
	if v := s.view.get(h, key); v != nil {
		return v
	}
	return nil
}

// lookupOwned returns the owned record of key, or nil (none, or a cached
// view); s is key's shard.
func (st *store) lookupOwned(s *shard, key string) *ownedKey {
	return s.own.get(st.hash(key), key)
}

// lookupCached returns the cached view of key, or nil (none, or an owned
// record); s is key's shard.
func (st *store) lookupCached(s *shard, key string) *cachedKey {
	return s.view.get(st.hash(key), key)
}

// entries returns the number of keys the shard stores.
func (s *shard) entries() int { return s.own.len() + s.view.len() + len(s.local) + len(s.share) }

// insertInto adds l under a copy of key to the map into, first evicting
// the least recently used keys of its shard if the store is full; now is
// the bucket time.
func (st *store) insertInto(s *shard, into map[string]*localKey, key string, l *localKey, now time.Time, c uint32) {
	need := localCharge(len(key))
	if st.full(need) {
		st.makeRoom(s, now, c, need)
	}
	into[strings.Clone(key)] = l // never pin a caller's larger buffer
	st.charge(need)
	st.metrics.Keys.Add(1)
	st.inserts++
}

// insertEntry adds e, a record whose key has the store hash h and is in
// neither of s's tables, to its role's, first evicting as insertInto does.
func (st *store) insertEntry(s *shard, h uint64, e record, now time.Time, c uint32) {
	need := recordCharge(len(headOf(e).key))
	if st.full(need) {
		st.makeRoom(s, now, c, need)
	}
	switch e := e.(type) {
	case *ownedKey:
		s.own.put(h, e)
		st.adoptFence(e)
		st.adoptGrants(s, e, now)
	case *cachedKey:
		s.view.put(h, e)
	}
	st.charge(need)
	st.metrics.Keys.Add(1)
	st.inserts++
}

// configure makes the bucket *b run under l for a request of hits at now, as
// reconfigure says, and reports whether the live bucket's limit changed.
func configure(pb *bucket.Bucket, l bucket.Limit, now time.Time, hits int64) (bool, error) {
	b, changed, err := reconfigure(*pb, l, now, hits)
	if err != nil {
		return false, err
	}
	*pb = b
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
// the shard's hottest keys. An owned record with lease grants not yet
// capped (live, or expired since the shard's last sweep: sweepGrants runs
// after this) stays: idle, its bucket is full uncapped, and the cap
// (leasecap.go) would hold it under them; the eviction's mark instead
// (markGrants) would hold it also under the tokens its holders report
// spent.
func (st *store) sweepEntries(s *shard, now time.Time, c, grace, interestTTL uint32) {
	s.top = s.top[:0]
	for k, e := range s.own.all() {
		if e.interested() && ageOf(c, e.lastFlush) > interestTTL {
			e.interest = 0 // interest.go: no interest
		}
		if ageOf(c, e.used()) >= grace && !e.interested() && !e.has(flagChanged) && e.b.Idle(now) && !e.grantsLive() {
			st.removeEntry(s, k, e)
			continue
		}
		s.noteHot(k, &e.keyHead, true, c)
	}
	for k, e := range s.view.all() {
		if ageOf(c, e.used()) >= grace && !e.has(flagDirty) && e.pending == 0 && e.inFlight == 0 && s.leases[k] == nil && e.b.Idle(now) {
			st.removeEntry(s, k, e)
			continue
		}
		s.noteHot(k, &e.keyHead, false, c)
	}
	for _, m := range []map[string]*localKey{s.local, s.share} {
		for k, e := range m {
			if ageOf(c, e.used()) >= grace && e.b.Idle(now) {
				st.removeFrom(m, k, e)
			}
		}
	}
}

// hotPerShard is how many hot keys a shard remembers between sweeps.
const hotPerShard = 4

// noteHot keeps key, whose record's head is e, in the shard's top list if
// its demand is among the highest seen in this sweep; owned says its role.
func (s *shard) noteHot(key string, e *keyHead, owned bool, c uint32) {
	rate := float64(e.dem*decayFactor(ageOf(c, e.used()))) / demandTau.Seconds()
	if rate < minHotRate {
		return
	}
	h := HotKey{Key: key, Rate: rate, Owned: owned}
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
// lookupRun consecutive items of one shard (key(i) gives item i's key and
// its ring.KeyHash, or false to skip the item), looks up the cached views of a run's keys, and
// then calls apply(s, i, e) for each item i of the run, in order, with s its
// shard and e its view (nil if none: no record, or an owned one). Looking a
// run's views up before applying any lets those lookups, mostly cache
// misses, overlap instead of each waiting behind the work on the item
// before. It pays when the sender lists its items shard by shard (flush
// answers, pushes); apply must not add or remove records of the shard.
func (st *store) lookupRuns(n int, key func(int) (string, uint64, bool), apply func(s *shard, i int, e *cachedKey)) {
	var (
		s      *shard
		idx    [lookupRun]int
		keys   [lookupRun]string
		hashes [lookupRun]uint64
		es     [lookupRun]*cachedKey
		k      int
	)
	for i := 0; i <= n; i++ {
		var is *shard
		var ki string
		var hi uint64
		if i < n {
			var kh uint64
			var ok bool
			if ki, kh, ok = key(i); !ok {
				continue
			}
			is, hi = st.shardAt(kh), st.hash(ki)
		}
		if k > 0 && (is != s || k == lookupRun) {
			for r := range k {
				es[r] = s.view.get(hashes[r], keys[r])
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
