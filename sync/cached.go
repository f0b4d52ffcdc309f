package sync

import (
	"math"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// cachedLocked returns the cached entry of key, creating a fresh view (a new
// bucket, never synced) if there is none.
func (n *Node) cachedLocked(s *shard, key string, l bucket.Limit, now time.Time, c uint32) (e *entry, fresh bool, err error) {
	e = s.m[key]
	if e == nil {
		if e, err = newEntry(l, now, c); err != nil {
			return nil, false, err
		}
		n.st.insertLocked(s, s.m, key, e, c)
		return e, true, nil
	}
	return e, false, configure(e, l, now)
}

// shareExact is the share above which a node decides as if it were alone.
const shareExact = 0.999

// decideCached decides r on a non-owner from its cached view of the owner's
// state, never waiting: the view with this node's own admissions since the
// last sync taken from it, under the budget rule (takeBudget) with the share
// the owner gave it. A key never synced gets the share 1/N (N members) and
// asks for an immediate flush, so a node seeing a key for the first time
// admits at most limit/N before it hears from the owner. Once the hits the
// owner has not seen reach the sync threshold, it flushes early.
func (n *Node) decideCached(now time.Time, c uint32, v *view, p *peer, r *Request, resp *Response) {
	s := n.st.shardOf(r.Key)
	s.mu.Lock()
	e, fresh, err := n.cachedLocked(s, r.Key, r.Limit, now, c)
	if err != nil {
		s.mu.Unlock()
		resp.Err = err
		return
	}
	if e.has(flagOwned) {
		// Owned until the membership walk hands it off: decide exactly; the
		// hit goes with the hand-off.
		e.touch(c, r.Hits, true)
		resp.Decision, resp.Err = take(e.b, now, r)
		s.mu.Unlock()
		return
	}
	e.touch(c, r.Hits, false)
	e.u = satAdd32(e.u, r.Hits)
	members := v.size()
	share := 1 / float64(members)
	if e.has(flagSynced) {
		share = float64(e.f)
	}
	t := n.syncThreshold(&r.Limit, members)
	if share >= shareExact {
		resp.Decision, resp.Err = take(e.b, now, r)
	} else {
		resp.Decision, resp.Err = n.takeBudget(e, now, r, share, e.n1+e.n2, members, t)
	}
	if resp.Err == nil && resp.Allowed {
		e.n1 += r.Hits
	}
	// Sync at once on first sight, and early once the hits the owner has
	// not seen reach the sync threshold.
	urgent := fresh && !e.has(flagSynced) || r.Hits > 0 && e.n1 >= t && !p.urgent.Load()
	full := n.markDirtyLocked(s, r.Key, e, p)
	s.mu.Unlock()
	if urgent || full {
		n.flushSoon(now, p)
	}
}

// satAdd32 adds a non-negative count to a saturating uint32.
func satAdd32(a uint32, b int64) uint32 {
	if b >= int64(math.MaxUint32-a) {
		return math.MaxUint32
	}
	return a + uint32(b)
}

// markDirtyLocked lists a cached entry for the next flush to p, and reports
// whether p's batch is full.
func (n *Node) markDirtyLocked(s *shard, key string, e *entry, p *peer) bool {
	if e.has(flagDirty) {
		return false
	}
	e.set(flagDirty)
	s.dirty = append(s.dirty, key)
	return p.dirty.Add(1) >= int64(n.cfg.MaxBatch)
}

// flushSoon sends a flush to p now if none is in flight, and otherwise marks
// it urgent: it goes as soon as the one in flight is acknowledged.
func (n *Node) flushSoon(now time.Time, p *peer) {
	p.urgent.Store(true)
	n.mu.Lock()
	defer n.mu.Unlock()
	if p.flight == nil && !p.gone {
		v := n.view.Load()
		n.flushLocked(now, v, map[*peer]*peerv1.Flush{p: {}})
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
}

// flushLocked builds and sends one flush to each peer in batches (whose
// values must be empty messages), from the shards' dirty lists: every key
// with hits, demand or a lease request bound for that peer, up to MaxBatch
// items. Keys for other peers, or beyond a full batch, stay listed.
func (n *Node) flushLocked(now time.Time, v *view, batches map[*peer]*peerv1.Flush) {
	for p := range batches {
		p.urgent.Store(false)
	}
	for i := range n.st.shards {
		s := &n.st.shards[i]
		s.mu.Lock()
		keep := s.dirty[:0]
		for _, key := range s.dirty {
			e := s.m[key]
			if e == nil || e.has(flagOwned) || !e.has(flagDirty) {
				if e != nil {
					e.clear(flagDirty)
				}
				continue
			}
			p := v.peers[v.owner(key)]
			if p == nil {
				// The key is this node's now, or the ring is empty.
				e.clear(flagDirty)
				continue
			}
			f, ok := batches[p]
			if !ok || len(f.Items) >= n.cfg.MaxBatch {
				keep = append(keep, key)
				continue
			}
			f.Items = append(f.Items, n.flushItemLocked(s, key, e, now))
			e.clear(flagDirty)
			p.dirty.Add(-1)
		}
		clear(s.dirty[len(keep):])
		s.dirty = keep
		s.mu.Unlock()
	}
	for _, name := range v.names {
		p := v.peers[name]
		f := batches[p]
		if f == nil || len(f.Items) == 0 {
			continue
		}
		p.seq++
		f.Seq = p.seq
		p.flight = &flight{msg: f, first: now, sentAt: now}
		n.send(p.name, flushBody{clone(f)})
		n.metrics.FlushesSent.Add(1)
	}
}

// flushItemLocked moves a cached entry's pending hits, demand and lease
// traffic into a flush item.
func (n *Node) flushItemLocked(s *shard, key string, e *entry, now time.Time) *peerv1.FlushItem {
	it := &peerv1.FlushItem{
		Key:    key,
		Limit:  limitToWire(e.b.Config()),
		Hits:   e.n1,
		Demand: int64(e.u),
		Rate:   e.dem * decayFactor(ageOf(coarse(now), e.used())),
	}
	if e.has(flagMoved) {
		it.View, _ = e.b.AppendBinary(nil)
	}
	if l := s.leases[key]; l != nil {
		l.fill(it, now, n.cfg.LeaseTTL)
	}
	e.n2 += e.n1
	e.n1, e.u = 0, 0
	return it
}

// onFlushAck installs the owner's answer to the flush in flight to p.
func (n *Node) onFlushAck(now time.Time, v *view, p *peer, ack *peerv1.FlushAck) {
	n.mu.Lock()
	defer n.mu.Unlock()
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
	c := coarse(now)
	for i, it := range items {
		var ks *peerv1.KeyState
		if i < len(ack.Items) && ack.Items[i].GetKey() == it.Key {
			ks = ack.Items[i]
		}
		n.installAck(now, c, v, p, it, ks, f.first)
	}
	if p.urgent.Load() || p.dirty.Load() >= int64(n.cfg.MaxBatch) {
		n.flushLocked(now, v, map[*peer]*peerv1.Flush{p: {}})
	}
}

// installAck applies the owner's answer ks (nil if missing) to the flush
// item it answers.
func (n *Node) installAck(now time.Time, c uint32, v *view, p *peer, it *peerv1.FlushItem, ks *peerv1.KeyState, first time.Time) {
	s := n.st.shardOf(it.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[it.Key]
	if e == nil || e.has(flagOwned) {
		return
	}
	l := s.leases[it.Key]
	if ks != nil && ks.NotOwner {
		// Not applied: route the hits again with the next flush.
		e.n1 += it.Hits
		e.n2 = max(0, e.n2-it.Hits)
		e.u = satAdd32(e.u, it.Demand)
		if l != nil {
			l.unfill(it)
		}
		if dp := v.peers[v.owner(it.Key)]; dp != nil {
			n.markDirtyLocked(s, it.Key, e, dp)
		}
		return
	}
	e.n2 = max(0, e.n2-it.Hits)
	if l != nil {
		l.asking = false
		if ks != nil {
			l.grant(now, ks.LeaseGranted, first, n.cfg.LeaseTTL, &n.metrics)
		}
	}
	b, ok := n.decodeShared(ks)
	if !ok {
		return
	}
	n.installLocked(e, b, ks.Share, e.n1+e.n2, now, c, len(it.View) > 0)
}

// installLocked replaces a cached view with the owner's state b, then takes
// this node's own hits not yet included in it (since) again, and records
// the node's share of the tokens for the budget until the next sync. A view
// that came from another owner (flagMoved) and that the owner has not been
// sent yet (reported false) is merged in, keeping the most consumed, and
// stays flagged: the next flush reports it, so an owner that lost its state
// rebuilds from it.
func (n *Node) installLocked(e *entry, b bucket.Bucket, share float32, since int64, now time.Time, c uint32, reported bool) {
	old := e.b
	e.b = b
	if since > 0 {
		_ = e.b.Drain(now, since)
	}
	if e.has(flagMoved) && !reported {
		_ = e.b.Merge(now, old)
	} else {
		e.clear(flagMoved)
	}
	e.touch(c, 0, false)
	e.f = share
	e.set(flagSynced)
}

// decodeState decodes the bucket state of ks, counting a malformed one.
func (n *Node) decodeState(ks *peerv1.KeyState) (bucket.Bucket, bool) {
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
	b, err := bucket.Decode(ks.State)
	if err != nil {
		n.metrics.Malformed.Add(1)
		return nil, false
	}
	return b, true
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

// finite reports whether f is a finite, non-negative count.
func finite(f float32) bool { return f >= 0 && f <= math.MaxFloat32 }

// onPush installs fresh states pushed by their owner.
func (n *Node) onPush(now time.Time, v *view, p *peer, push *peerv1.Push) {
	n.metrics.PushesReceived.Add(1)
	n.mu.Lock()
	var applied uint64
	if push.AppliedIncarnation == n.cfg.Incarnation {
		applied = push.AppliedSeq
	}
	stale := applied < p.lastAcked
	inflight := p.flight != nil && p.flight.msg.Seq > applied
	n.mu.Unlock()
	if stale {
		return // older than an answer already installed
	}
	c := coarse(now)
	for _, ks := range push.Items {
		if ks == nil || v.owner(ks.Key) != p.name {
			continue
		}
		b, ok := n.decodeShared(ks)
		if !ok {
			continue
		}
		s := n.st.shardOf(ks.Key)
		s.mu.Lock()
		if e := s.m[ks.Key]; e != nil && !e.has(flagOwned) {
			since := e.n1
			if inflight {
				since += e.n2
			}
			n.installLocked(e, b, ks.Share, since, now, c, false)
		}
		s.mu.Unlock()
	}
}
