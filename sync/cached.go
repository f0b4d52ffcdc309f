package sync

import (
	"math"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// cachedEntry returns the cached view of key, creating a fresh one (a new
// bucket, never synced) if there is none, or o, its owned record if this
// node holds one (the key is still to be handed off). reconf reports that a
// request of hits under l reconfigured the record's bucket (configure).
func (n *Node) cachedEntry(s *shard, key string, l bucket.Limit, hits int64, now time.Time, c uint32) (e *cachedKey, o *ownedKey, fresh, reconf bool, err error) {
	h := n.st.hash(key)
	if e = s.view.get(h, key); e != nil {
		reconf, err = configure(&e.b, l, n.bt(now), hits)
		return e, nil, false, reconf, err
	}
	if o = s.own.get(h, key); o != nil {
		reconf, err = configure(&o.b, l, n.bt(now), hits)
		return nil, o, false, reconf, err
	}
	if e, err = n.st.newCachedMarked(key, l, n.bt(now), c); err != nil { // evicted.go
		return nil, nil, false, false, err
	}
	n.st.insertEntry(s, h, e, n.bt(now), c)
	return e, nil, true, false, nil
}

// shareExact is the share above which a node decides as if it were alone.
const shareExact = 0.999

// decideCached decides r on a non-owner from its cached view of the owner's
// state, never waiting: the view with this node's own admissions since the
// last sync taken from it, under the budget rule (takeBudget) with the share
// the owner gave it. A key never synced gets the share 1/N (N members) and
// asks for an immediate flush, so a node seeing a key for the first time
// admits at most limit/N before it hears from the owner. Once the hits the
// owner has not seen reach the sync threshold, it flushes early. kh is
// ring.KeyHash(r.Key).
func (n *Node) decideCached(now time.Time, c uint32, v *view, p *peer, r *check.Request, resp *check.Response, kh uint64) {
	s := n.st.shardAt(kh)
	e, o, fresh, reconf, err := n.cachedEntry(s, r.Key, r.Limit, r.Hits, now, c)
	resp.Reconfigured = reconf
	if err != nil {
		resp.Err = err
		return
	}
	if o != nil {
		// Owned until the membership walk hands it off: decide exactly; the
		// hit goes with the hand-off.
		o.touch(c, r.Hits, true)
		resp.Decision, resp.Err = take(o.b, n.bt(now), r)
		n.admitted(now, r, resp)
		return
	}
	e.touch(c, r.Hits)
	e.asked = satAdd32(e.asked, r.Hits)
	members := v.size()
	share := 1 / float64(members) // first sight, or no share given since a move
	if e.has(flagSynced) && e.share > 0 {
		share = float64(e.share)
	}
	t := n.syncThreshold(&r.Limit, members)
	// The hits this node admitted by the partition policy and still owes
	// the key (charge.go) are its own unseen hits too, and the view does
	// not show them: decided as if they were not, a survivor of a crashed
	// owner whose unreachable mark lapsed before the crash was detected
	// admitted its share of the view again, on top of its local share
	// (TestShareHitsCountedInViewAfterMarkLapses).
	hidden, unsent := n.unshown(r.Key)
	if share >= shareExact && hidden == 0 {
		resp.Decision, resp.Err = take(e.b, n.bt(now), r)
	} else {
		resp.Decision, resp.Err = n.takeBudget(e.b, e.has(flagSynced), n.bt(now), r, share, e.pending+e.inFlight+unsent, hidden, members, t)
	}
	n.admitted(now, r, resp)
	if resp.Err == nil && resp.Allowed {
		e.pending += r.Hits
	}
	// Sync at once on first sight, and early once the hits the owner has
	// not seen reach the sync threshold.
	urgent := fresh && !e.has(flagSynced) || r.Hits > 0 && e.pending >= t && !p.urgent
	full := n.markRouted(s, r.Key, e, p, v)
	if urgent || full {
		n.flushSoon(now, p)
	}
}

// keepView keeps this node's view of a key whose cached-mode checks go to
// the owner (smallForShares). The view decides nothing while the owner is
// reachable; it is what the partition policy starts from when the owner is
// lost (local-share starts from the view, policy.go), so a spent key stays
// spent through a failover. The check's forward registers this node's
// interest with the owner, and the owner's answer carries the key's state,
// which refreshes the view (refreshView); the owner's pushes tell it when
// the key is spent meanwhile. The view itself is flushed only to report a
// state that came from another owner (flagMoved), or hits and debts it
// still holds. Before, each view was also flushed every FlushInterval while
// the key was checked, a flush and its answer per key and node besides the
// forward and its reply: at 20 nodes and more, where the bench's keys are
// all too small for shares, a third of the messages (issue #19). kh is
// ring.KeyHash(r.Key).
func (n *Node) keepView(now time.Time, c uint32, v *view, p *peer, r *check.Request, kh uint64) {
	s := n.st.shardAt(kh)
	e, _, _, _, err := n.cachedEntry(s, r.Key, r.Limit, r.Hits, now, c)
	if err != nil || e == nil {
		return // the owner reports the error; an owned key is handed off
	}
	e.touch(c, r.Hits)
	switch {
	case e.has(flagMoved):
		// The new owner rebuilds from the view (applyFlushItem): sent at
		// once, it usually arrives before the check's forward, so the
		// owner decides on it rather than waiting for the key's hand-off.
		n.markRouted(s, r.Key, e, p, v)
		n.flushSoon(now, p)
	case e.pending > 0 || e.asked > 0:
		// A debt (charge.go) or hits from when the key had shares.
		if n.markRouted(s, r.Key, e, p, v) {
			n.flushSoon(now, p)
		}
	}
}

// answerView completes the answer d to a cached-mode check of key that this
// node, its owner, decided for member m (its index in the view, -1 if
// none): m's interest in the key is registered, as a flush's would be, and
// d carries the key's state and m's share, appended to buf, which it
// returns (keepView). The state is read after the check, so m's copy is
// current: addInterest clears it from the members to push to. kh is
// ring.KeyHash(key).
func (n *Node) answerView(c uint32, m int, key string, kh uint64, d *peerv1.Decision, buf []byte) []byte {
	s := n.st.shardAt(kh)
	e := n.st.lookupOwned(s, key)
	if e == nil {
		return buf
	}
	e.lastFlush = c
	n.addInterest(s, key, e, m) // interest.go
	at := len(buf)
	buf, _ = n.st.lims.AppendBinary(buf, e.b)
	d.State = buf[at:len(buf):len(buf)]
	d.Share = activeShare(e, n.interestCount(s, key, e))
	return buf
}

// refreshView installs the state d carries, the owner p's answer to this
// node's cached-mode check of key, in the key's view (keepView). The view's
// own hits not yet applied at the owner, if any, are taken from it again,
// as with a flush's answer.
func (n *Node) refreshView(now time.Time, c uint32, p *peer, key string, d *peerv1.Decision) {
	kh := ring.KeyHash(key) // the key's owner and shard
	if n.view.ownerAt(kh) != p.name {
		return // the key moved meanwhile: its new owner answers for it
	}
	s := n.st.shardAt(kh)
	e := n.st.lookupCached(s, key)
	if e == nil {
		return
	}
	ks := peerv1.KeyState{State: d.State, Share: d.Share}
	b, ok := n.decodeSharedFor(e, &ks, false)
	if !ok {
		return
	}
	n.install(e, b, ks.Share, e.pending+e.inFlight, now, c, false)
}

// smallForShares reports whether a key of limit l is too small for cached
// mode's shares among members nodes: SyncFraction x its capacity is less
// than one hit per member (at the default 0.02, a capacity under 150 at 3
// members, under 1500 at 30). A node seeing such a key for the first time
// would have a share of limit / members, less than 1/SyncFraction requests
// (50 at the default): a limit of 1 a minute over 3 nodes gives a third of
// a request, so two first checks in three would be rejected, and each
// node's unseen hits, at least one request, would add up to more than the
// drift cached mode allows itself (SyncFraction of the capacity). A
// non-owner sends such a key's checks to its owner, as in owner mode
// (keeping a view only for the partition policy, keepView): small limits
// (5 logins a minute, 1 OTP a minute) are exact and never refused for want
// of a share, at one round trip.
func (n *Node) smallForShares(l *bucket.Limit, members int) bool {
	return n.cfg.SyncFraction*float64(l.Capacity()) < float64(max(members, 1))
}

// satAdd32 adds a non-negative count to a saturating uint32.
func satAdd32(a uint32, b int64) uint32 {
	if b >= int64(math.MaxUint32-a) {
		return math.MaxUint32
	}
	return a + uint32(b)
}

// markDirty lists a cached view for the next flush to p, and reports
// whether p's batch is full.
func (n *Node) markDirty(s *shard, key string, e *cachedKey, p *peer) bool {
	return n.markRouted(s, key, e, p, nil)
}

// markRouted is markDirty for a p known to be the key's owner
// under view v (see route).
func (n *Node) markRouted(s *shard, key string, e *cachedKey, p *peer, v *view) bool {
	if e.has(flagDirty) {
		return false
	}
	e.set(flagDirty)
	r := route{e: e, p: p, v: v}
	if v != nil && v.peers[p.name] != p {
		r.v = nil // not one of v's peers (a stand-in): routed again on flush
	}
	n.st.listDirty(s, key, r)
	p.dirty++
	n.wake(p)
	return p.dirty >= int64(n.cfg.MaxBatch)
}

// flushSoon sends a flush to p now if none is in flight, and otherwise marks
// it urgent: it goes as soon as the one in flight is acknowledged.
func (n *Node) flushSoon(now time.Time, p *peer) {
	p.urgent = true
	n.wake(p)
	if p.flight == nil && !p.gone {
		v := n.view
		n.flushOne(now, v, p)
	}
}

// flight is a flush in flight, kept to be sent again after RequestTimeout.
type flight struct {
	msg *peerv1.Flush
	// first is when it was first sent: a lease granted in its answer expires
	// LeaseTTL after first, never later than LeaseTTL after the owner drained
	// it. sentAt is the latest send; retries counts the sends after the first.
	first, sentAt time.Time
	retries       int
	// flush, items and slab hold msg, its first items and their list, in
	// the flight's own allocation: a flush of a few keys costs one
	// allocation instead of four. nslab counts the items taken from slab.
	flush peerv1.Flush
	items [flightItems]*peerv1.FlushItem
	slab  [flightSlab]peerv1.FlushItem
	nslab int
}

// flightItems is the number of items a flight lists without an allocation
// of its own, and flightSlab the number it holds: most flushes carry fewer
// (the keys of one flush interval).
const (
	flightItems = 8
	flightSlab  = 4
)

// item returns a new, empty item for f's message, from f's own slab while
// it lasts, then from a.
func (f *flight) item(a *msgAlloc) *peerv1.FlushItem {
	if f.nslab < len(f.slab) {
		f.nslab++
		return &f.slab[f.nslab-1]
	}
	return a.flushItem()
}

// newFlight returns a flight whose message has room for n items.
func newFlight(n int64) *flight {
	f := new(flight)
	f.msg = &f.flush
	if n <= flightItems {
		f.flush.Items = f.items[:0]
	} else {
		f.flush.Items = make([]*peerv1.FlushItem, 0, n)
	}
	return f
}

// flushPeers builds and sends one flush to each of peers (distinct), from
// the shards' dirty lists: every key with hits, demand or a lease request
// bound for that peer, up to MaxBatch items. Keys for other peers, or
// beyond a full batch, stay listed.
func (n *Node) flushPeers(now time.Time, v *view, peers []*peer) {
	var buf [8]*flight // on the stack for a cluster of up to 9 nodes
	t := flushTargets{peers: peers, fls: buf[:0]}
	if len(peers) > len(buf) {
		t.fls = make([]*flight, 0, len(peers))
	}
	t.fls = t.fls[:len(peers)]
	n.flushTo(now, v, &t)
}

// flushOne is flushPeers to the one peer p.
func (n *Node) flushOne(now time.Time, v *view, p *peer) {
	var fl [1]*flight
	peers := [1]*peer{p}
	n.flushTo(now, v, &flushTargets{peers: peers[:], fls: fl[:]})
}

// flushTargets is the set of peers a flush pass builds flights for, and
// the flight for each (nil until its first item, so a pass that finds
// nothing for a peer allocates nothing). A few peers are searched faster
// than a map is hashed, and need no allocation.
type flushTargets struct {
	peers []*peer
	fls   []*flight
}

// batch returns the index of p among the targets, or -1.
func (t *flushTargets) batch(p *peer) int {
	for i, q := range t.peers {
		if q == p {
			return i
		}
	}
	return -1
}

func (n *Node) flushTo(now time.Time, v *view, t *flushTargets) {
	var a msgAlloc
	hint := 0
	for _, p := range t.peers {
		p.urgent = false
		hint += int(min(max(p.dirty, 0), int64(n.cfg.MaxBatch)))
	}
	a.reserve(max(hint-len(t.peers)*flightSlab, 0)) // beyond the flights' own slabs
	for i := range n.st.shards {
		s := &n.st.shards[i]
		if n.st.dirtyShards&s.bit == 0 {
			continue
		}
		k := 0
		for j, key := range s.dirty {
			e, p, ok := n.st.resolveRoute(s, j, v)
			if !ok {
				continue
			}
			ti := t.batch(p)
			if ti < 0 && !p.listed {
				// Listed for a peer Tick does not visit: p.dirty is an
				// approximation; make sure the key is flushed.
				p.dirty = max(p.dirty, 1)
				n.wake(p)
			}
			if ti < 0 || t.fls[ti] != nil && len(t.fls[ti].flush.Items) >= n.cfg.MaxBatch {
				s.dirty[k], s.routes[k] = key, route{e: e, p: p, v: v}
				k++
				continue
			}
			f := t.fls[ti]
			if f == nil {
				f = newFlight(min(max(p.dirty, 1), int64(n.cfg.MaxBatch)))
				t.fls[ti] = f
			}
			f.flush.Items = append(f.flush.Items, n.flushItemOf(s, key, e, p.name, now, f.item(&a)))
			e.clear(flagDirty)
			p.dirty--
		}
		n.st.keepDirty(s, k)
	}
	for _, name := range v.names {
		p := v.peers[name]
		ti := t.batch(p)
		if ti < 0 || t.fls[ti] == nil {
			continue
		}
		f := t.fls[ti]
		p.seq++
		f.flush.Seq = p.seq
		f.first, f.sentAt = now, now
		p.flight = f
		n.send(p.name, flushBody{f.msg}) // kept in flight, never modified again: shared
		n.metrics.FlushesSent.Add(1)
	}
}

// flushItemOf moves a cached view's pending hits, demand and lease
// traffic into it, a new flush item, and returns it.
func (n *Node) flushItemOf(s *shard, key string, e *cachedKey, to string, now time.Time, it *peerv1.FlushItem) *peerv1.FlushItem {
	it.Key = key
	it.Limit = n.limitWire(e.b.Config())
	it.Hits = e.pending
	n.debtFlushed(key, e, to) // charge.go
	it.Demand = int64(e.asked)
	it.Rate = e.dem * decayFactor(ageOf(coarse(now), e.used()))
	if e.has(flagMoved) {
		it.View = n.movedView(key, e, now)
	}
	if l := s.leases[key]; l != nil {
		l.fill(it, to, now, n.cfg.LeaseTTL)
	}
	e.inFlight += e.pending
	e.pending, e.asked = 0, 0
	return it
}

// ownHits returns the hits of key's cached view e that are this node's own
// and that no owner has confirmed yet: those pending and those in flight.
// The view includes them (decideCached takes them from it, install drains
// them again). A debt added to pending (charge.go, tickCharges)
// is in the view only once an answer was installed since, so the hits in
// transit for a debt are not counted here: a caller that takes ownHits off
// the view and adds them back after a merge may count those twice, as
// before, never less than once.
func (n *Node) ownHits(key string, e *cachedKey) int64 {
	return max(0, e.pending+e.inFlight-n.inTransit(key))
}

// movedView returns the view a flush reports of e, key's view that came
// from another owner (flagMoved): e's state without this node's own hits
// (ownHits), those the flush item carries and those in flight. The new
// owner merges the view, keeping the most consumed, before it applies the
// item's hits: reported with them, the view counted them twice whenever it
// was the more consumed state. That cost a crashed owner's key every hit
// its other survivor had admitted while failure detection lasted, less
// what the new owner had admitted meanwhile (a key of 1000 with 500 spent
// ended at 835 admitted, 166 of them during the detection,
// TestCrashedOwnerViewHitsCountedOnce; 840 in TestOwnerKilledMidKey once
// in CI).
func (n *Node) movedView(key string, e *cachedKey, now time.Time) []byte {
	b := e.b
	if own := n.ownHits(key, e); own > 0 {
		b = b.Clone()
		_ = b.Refund(n.bt(now), own)
	}
	view, _ := b.AppendBinary(nil)
	return view
}

// onFlushAck installs the owner's answer to the flush in flight to p.
func (n *Node) onFlushAck(now time.Time, v *view, p *peer, ack *peerv1.FlushAck) {
	f := p.flight
	if f == nil || ack.Seq != f.msg.Seq || ack.FlushIncarnation != n.cfg.Incarnation {
		return // a late answer to a flush already answered, or to a past life
	}
	p.flight = nil
	p.lastAcked = f.msg.Seq
	n.metrics.FlushesAcked.Add(1)
	items := f.msg.Items
	if len(ack.Items) != len(items) {
		n.metrics.Malformed.Add(1)
	}
	if !validGrantIDs(ack.LeaseGrantIds, len(items)) {
		n.metrics.Malformed.Add(1) // wirelimits.go
	}
	c := coarse(now)
	// The items were listed shard by shard (flushTo).
	n.st.lookupRuns(len(items), func(k int) (string, uint64, bool) { return items[k].Key, ring.KeyHash(items[k].Key), true },
		func(s *shard, k int, e *cachedKey) {
			var ks *peerv1.KeyState
			if k < len(ack.Items) && ack.Items[k].GetKey() == items[k].Key {
				ks = ack.Items[k]
			}
			var id int64 // the grant's, leasecap.go
			if k < len(ack.LeaseGrantIds) {
				id = max(0, ack.LeaseGrantIds[k]) // a negative id names no grant
			}
			n.installAck(now, c, v, p, s, e, items[k], ks, id, f.first)
		})
	if p.urgent || p.dirty >= int64(n.cfg.MaxBatch) {
		n.flushOne(now, v, p)
	}
}

// installAck applies the owner's answer ks (nil if missing) to the
// flush item it answers, id naming its lease grant if any; s is the key's
// shard, and e the key's view in it (nil if none, or if the key is owned
// here).
func (n *Node) installAck(now time.Time, c uint32, v *view, p *peer, s *shard, e *cachedKey, it *peerv1.FlushItem, ks *peerv1.KeyState, id int64, first time.Time) {
	if it.Hits > 0 && (ks == nil || !ks.NotOwner) {
		// Applied: an answer that was not (malformed, or no entry at the
		// owner) carries no state (charge.go).
		if ks != nil && len(ks.State) > 0 {
			n.delivered(it.Key, p.name, it.Hits)
		} else {
			n.refused(it.Key, p.name)
		}
	}
	if e == nil {
		return
	}
	// The lease is looked up only for an item that carried lease traffic:
	// for any other, unfill and grant would do nothing.
	var l *lease
	if it.LeaseWant > 0 || it.LeaseReturn > 0 || it.LeaseSettled > 0 {
		l = s.leases[it.Key]
	}
	if ks != nil && ks.NotOwner {
		// Not applied: route the hits again with the next flush.
		e.pending += it.Hits
		e.inFlight = max(0, e.inFlight-it.Hits)
		e.asked = satAdd32(e.asked, it.Demand)
		if l != nil {
			l.unfill(it)
		}
		if dp := v.peers[v.owner(it.Key)]; dp != nil {
			n.markRouted(s, it.Key, e, dp, v)
		}
		return
	}
	e.inFlight = max(0, e.inFlight-it.Hits)
	if l != nil && it.LeaseWant > 0 {
		// Only an answer to a lease request is a grant: one to a flush of
		// hits alone grants nothing, and is not an empty grant.
		l.asking = false
		if ks != nil {
			l.grant(now, ks.LeaseGranted, id, p.name, first, n.cfg.LeaseTTL, &n.metrics)
		}
	}
	reported := len(it.View) > 0
	b, ok := n.decodeSharedFor(e, ks, reported)
	if !ok {
		return
	}
	n.install(e, b, ks.Share, e.pending+e.inFlight, now, c, reported)
	if l != nil && l.zero {
		// An empty grant from a bucket that has tokens: the owner's fence
		// held it back (fence.go), or a minority side granted nothing.
		// Checks the lease cannot cover go to the owner, not rejected here.
		if d, err := e.b.Take(n.bt(now), 0); err == nil && d.Remaining > 0 {
			l.zero = false
		}
	}
}

// install replaces a cached view with the owner's state b, then takes
// this node's own hits not yet included in it (since) again, and records
// the node's share of the tokens for the budget until the next sync. A view
// that came from another owner (flagMoved) and that the owner has not been
// sent yet (reported false) is merged in, keeping the most consumed, and
// stays flagged: the next flush reports it, so an owner that lost its state
// rebuilds from it.
func (n *Node) install(e *cachedKey, b bucket.Bucket, share float32, since int64, now time.Time, c uint32, reported bool) {
	old := e.b
	e.b = b
	if since > 0 {
		_ = e.b.Drain(n.bt(now), since)
	}
	if e.has(flagMoved) && !reported {
		_ = e.b.Merge(n.bt(now), old)
	} else {
		e.clear(flagMoved)
	}
	n.shownInView(e.key) // charge.go: since held its debt in transit
	e.touch(c, 0)
	e.share = share
	e.set(flagSynced)
}

// decodeState decodes the bucket state of ks, counting a malformed one.
func (n *Node) decodeState(ks *peerv1.KeyState) (bucket.Bucket, bool) {
	return n.decodeStateInto(nil, ks)
}

// decodeStateInto is decodeState that may decode into spare, a bucket the
// caller holds the only reference to (nil: none), as bucket.DecodeInto
// does; spare is unchanged when it reports false.
func (n *Node) decodeStateInto(spare bucket.Bucket, ks *peerv1.KeyState) (bucket.Bucket, bool) {
	if ks == nil || len(ks.State) == 0 {
		if ks != nil && !ks.NotOwner {
			n.metrics.Malformed.Add(1)
		}
		return nil, false
	}
	if !finite(ks.Demand) || ks.LeaseGranted < 0 {
		n.metrics.Malformed.Add(1)
		return nil, false
	}
	b, err := n.st.lims.DecodeInto(spare, ks.State)
	if err != nil {
		n.metrics.Malformed.Add(1)
		return nil, false
	}
	return n.rebase(b), true // clock.go: to this node's time
}

// decodeShared is decodeState for an owner's answer or push, which also
// carries the receiver's share.
func (n *Node) decodeShared(ks *peerv1.KeyState) (bucket.Bucket, bool) {
	b, ok := n.decodeState(ks)
	if ok && !(ks.Share > 0 && ks.Share <= 1) {
		n.metrics.Malformed.Add(1)
		return nil, false
	}
	return b, ok
}

// decodeSharedFor is decodeShared for a state to be installed in e by
// install(..., reported): it decodes into e's bucket, saving an
// allocation, unless install still needs the old bucket to merge.
func (n *Node) decodeSharedFor(e *cachedKey, ks *peerv1.KeyState, reported bool) (bucket.Bucket, bool) {
	if e.has(flagMoved) && !reported {
		return n.decodeShared(ks)
	}
	if ks == nil || len(ks.State) == 0 || !finite(ks.Demand) || ks.LeaseGranted < 0 || !(ks.Share > 0 && ks.Share <= 1) {
		return n.decodeShared(ks) // invalid: counted there, nothing decoded
	}
	b, err := n.st.lims.DecodeInto(e.b, ks.State)
	if err != nil {
		n.metrics.Malformed.Add(1)
		return nil, false
	}
	return n.rebase(b), true // clock.go: to this node's time
}

// finite reports whether f is a finite, non-negative count.
func finite(f float32) bool { return f >= 0 && f <= math.MaxFloat32 }

// onPush installs fresh states pushed by their owner.
func (n *Node) onPush(now time.Time, v *view, p *peer, push *peerv1.Push) {
	n.metrics.PushesReceived.Add(1)
	var applied uint64
	if push.AppliedIncarnation == n.cfg.Incarnation {
		applied = push.AppliedSeq
	}
	stale := applied < p.lastAcked
	inflight := p.flight != nil && p.flight.msg.Seq > applied
	if stale {
		return // older than an answer already installed
	}
	c := coarse(now)
	// The owner lists the items shard by shard (tickPushes), under the
	// same shard function.
	items := push.Items
	n.st.lookupRuns(len(items), func(k int) (string, uint64, bool) {
		ks := items[k]
		if ks == nil {
			return "", 0, false
		}
		kh := ring.KeyHash(ks.Key) // the key's owner and shard
		if v.ownerAt(kh) != p.name {
			return "", 0, false
		}
		return ks.Key, kh, true
	}, func(_ *shard, k int, e *cachedKey) {
		n.installPush(now, c, e, items[k], inflight)
	})
}

// installPush installs the pushed state ks of a key whose view is e (nil
// if none, or if the key is owned here).
func (n *Node) installPush(now time.Time, c uint32, e *cachedKey, ks *peerv1.KeyState, inflight bool) {
	if e == nil {
		n.decodeShared(ks) // counted if malformed, else unused
		return
	}
	if b, ok := n.decodeSharedFor(e, ks, false); ok {
		since := e.pending
		if inflight {
			since += e.inFlight
		}
		n.install(e, b, ks.Share, since, now, c, false)
	}
}
