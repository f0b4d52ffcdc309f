package sync

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// serveFlush applies a flush from p, once per (incarnation, seq), and
// answers it with the authoritative state of each key. A duplicate (a retry
// of a flush already applied) is counted and answered again without being
// applied; a flush from an older incarnation of p is ignored.
func (n *Node) serveFlush(now time.Time, v *view, p *peer, inc uint64, f *peerv1.Flush) {
	switch {
	case inc < p.inInc:
		return
	case inc > p.inInc:
		p.inInc, p.inSeq, p.lastAck = inc, 0, nil
	}
	if f.Seq <= p.inSeq {
		n.metrics.FlushDuplicates.Add(1)
		if f.Seq == p.inSeq && p.lastAck != nil {
			n.send(p.name, flushAckBody{p.lastAck})
		}
		return
	}
	p.inSeq = f.Seq
	ack, slots := newAck(f, inc)
	m := n.view.member(p.name) // the index of p in the keys' interest
	c := coarse(now)
	for i, it := range f.Items {
		var id int64
		ack.Items[i], id = n.applyFlushItem(now, c, v, p, m, it, &slots[i])
		if id != 0 {
			if ack.LeaseGrantIds == nil {
				ack.LeaseGrantIds = make([]int64, len(f.Items))
			}
			ack.LeaseGrantIds[i] = id
		}
	}
	p.lastAck = ack
	n.send(p.name, flushAckBody{ack})
}

// ackHead is a flush's answer with room for the list of its first
// answers, and ackSlot one answer with room for its encoded state (as
// much as msgAlloc leaves for one: bucket's AppendBinary grows a buffer
// with less room before it appends). A flush of n keys is answered with two
// allocations sized for n, one ackHead and n slots, where msgAlloc would
// make four with room for at least four items: most flushes carry a few
// keys (a non-owner flushes on first sight of a key, see decideCached).
// What they hold belongs to the answer, which is never modified once sent,
// so they are never reused.
type ackHead struct {
	ack   peerv1.FlushAck
	items [ackItems]*peerv1.KeyState
}

type ackSlot struct {
	ks    peerv1.KeyState
	state [stateRoom]byte
}

// ackItems is the number of answers an ackHead lists.
const ackItems = 8

// newAck returns the answer to f from a flush of incarnation inc, with
// room for an answer per item, and a slot for each.
func newAck(f *peerv1.Flush, inc uint64) (*peerv1.FlushAck, []ackSlot) {
	h := new(ackHead)
	h.ack.Seq, h.ack.FlushIncarnation = f.Seq, inc
	if len(f.Items) <= ackItems {
		h.ack.Items = h.items[:len(f.Items)]
	} else {
		h.ack.Items = make([]*peerv1.KeyState, len(f.Items))
	}
	return &h.ack, make([]ackSlot, len(f.Items))
}

// validItem reports whether a flush item can be applied.
func (n *Node) validItem(it *peerv1.FlushItem) (bucket.Limit, bool) {
	if it == nil || it.Key == "" || len(it.Key) > n.cfg.MaxKeyLen || it.Hits < 0 || it.Demand < 0 ||
		!finite(it.Rate) || it.LeaseWant < 0 || it.LeaseReturn < 0 || it.LeaseSpent < 0 || it.LeaseSettled < 0 {
		return bucket.Limit{}, false
	}
	l, err := limitFromWire(it.Limit)
	return l, err == nil
}

// applyFlushItem applies one flushed key from p as its owner: merges a view
// from a previous owner (rebuild), drains the hits, counts the demand,
// refunds returned lease tokens (at most those granted to p and not yet
// returned, lease.go) and grants a lease; it returns the answer, slot's
// when the item was applied, and the id of the lease granted (0: none,
// leasecap.go).
func (n *Node) applyFlushItem(now time.Time, c uint32, v *view, p *peer, m int, it *peerv1.FlushItem, slot *ackSlot) (*peerv1.KeyState, int64) {
	l, ok := n.validItem(it)
	if !ok {
		n.metrics.Malformed.Add(1)
		return &peerv1.KeyState{Key: it.GetKey()}, 0
	}
	kh := ring.KeyHash(it.Key) // the key's owner, backup target and shard
	if v.ownerAt(kh) != n.cfg.Self {
		n.metrics.NotOwner.Add(1)
		return &peerv1.KeyState{Key: it.Key, NotOwner: true}, 0
	}
	if _, ok := n.awaitFor(now, v, it.Key, it.FailClosed); ok && it.LeaseWant > 0 {
		// await.go: the key's state is on its way (a hand-off, or the
		// backup holder's answer to a probe) and none is held here: a
		// lease granted now would come from a fresh bucket. Answered
		// not-owner, the sender keeps its hits and asks again with its
		// next flush. (Cached mode's flushed hits are applied, and the
		// hand-off merged in later keeping the most consumed, as before.)
		// For leased checks of policy fail-closed the wait lasts until the
		// previous owner has handed the key off or answered not-owner
		// naming this node (awaitOpen): the sender's checks, forwarded
		// once its lease is spent, probe it.
		n.metrics.NotOwner.Add(1)
		return &peerv1.KeyState{Key: it.Key, NotOwner: true}, 0
	}
	s := n.st.shardAt(kh)
	// lostkey.go: the item's policy when it names fail-closed (a leased
	// check of that policy behind it, FlushItem.fail_closed), else the
	// node's default. Before, always the default: under local-share, a
	// lease request arriving first at a key taken over from a failed member
	// took a stale promoted view out of the takeover's bound, and leased
	// fail-closed checks spent it again (TestTakeoverBoundsFirstFlush: 150
	// admitted of a key of 100).
	closed := it.FailClosed || n.cfg.Policy == check.PolicyFailClosed
	e, reconf, err := n.ownedEntry(s, n.st.hash(it.Key), it.Key, l, it.Hits, now, c, closed)
	if err != nil {
		n.metrics.Malformed.Add(1)
		return &peerv1.KeyState{Key: it.Key}, 0
	}
	if len(it.View) > 0 {
		if vb, err := bucket.Decode(it.View); err != nil {
			n.metrics.Malformed.Add(1)
		} else {
			// Most consumed wins; another algorithm is ignored; then what the
			// view shows beyond the takeover's start (lateview.go).
			n.mergeView(n.bt(now), it.Key, p.name, e, n.rebase(vb))
		}
	}
	e.touch(c, it.Demand, false)
	e.lastFlush = c
	n.addInterest(s, it.Key, e, m) // interest.go
	if it.Hits > 0 {
		_ = e.b.Drain(n.bt(now), it.Hits)
	}
	if it.LeaseSpent > 0 {
		// leasecap.go: spent, those tokens no longer hold the cap (the
		// cap was applied up to now by ownedEntry, so they count as spent
		// from now on). Only p's live grants can be counted out.
		n.spentLive(e, p.name, it.LeaseSpent)
	}
	var refund int64
	if it.LeaseReturn > 0 || it.LeaseSettled > 0 {
		back := p.takeReturn(it.Key, it.LeaseReturn, now, n.grantMemory())
		later := int64(0)
		refund = back
		if l := e.b.Config(); l.Algorithm == bucket.TokenBucket {
			// leasecap.go: tokens of a grant still counted live are
			// refunded when it expires here; those of a grant expired
			// here now, up to what the bucket would have kept of them.
			refund, later = n.settleReturn(e, p.name, back, n.settledBound(it.LeaseSettled, now))
		}
		if refund > 0 {
			_ = e.b.Refund(n.bt(now), refund)
			n.capLeased(e, now)
		}
		if refund+later > 0 {
			n.metrics.LeasesReturned.Add(1)
			n.metrics.LeaseTokensReturned.Add(refund + later)
		}
		refund += later
		n.metrics.LeaseTokensRefused.Add(it.LeaseReturn - refund)
	}
	var granted, grantID int64
	// covered: the grant, if any, is within its fence's acknowledged bound
	// (fence.go).
	covered := true
	if it.LeaseWant > 0 && len(v.lost) == 0 && !v.orphaned(it.Key) && !v.takingOver(it.Key) { // a minority side grants nothing, nor an orphaned key (quorum.go), nor one taken over not OwnerLeaseTTL since its confirmation (confirm.go)
		granted, covered = n.grantLease(e, now, it, kh)
		p.recordGrant(it.Key, granted, now, n.grantMemory())
		grantID = n.noteGrant(s, e, p.name, granted, now) // leasecap.go
	}
	if it.Hits > 0 || refund > 0 || granted > 0 || len(it.View) > 0 {
		// A grant its fence covers, and a refund (the state only less
		// consumed than the one backed up), need no backup of their own
		// (fence.go, fenceSpent); drained hits, merged views and a new
		// limit do.
		backup := it.Hits > 0 || len(it.View) > 0 || granted > 0 && !covered || reconf
		n.markChangedBackup(s, it.Key, e, m, backup)
	}
	state, _ := n.st.lims.AppendBinary(slot.state[:0], e.b)
	ks := &slot.ks
	ks.Key, ks.State, ks.Demand, ks.Share, ks.LeaseGranted = it.Key, state[:len(state):len(state)], e.dem, activeShare(e, n.interestCount(s, it.Key, e)), granted
	return ks, grantID
}

// ownActiveMin is the owner's decayed demand (hits) above which it counts
// itself as active on a key: about one check in the last two seconds.
const ownActiveMin = 0.1

// activeShare returns the share of an owned key's tokens that each active
// node may spend between syncs in cached mode: an equal split among the k
// nodes that hold a live view of the key (its interest, interest.go), and
// the owner if it checked it recently. Equal shares always add up to one, whatever the
// nodes' traffic and however stale its measure, which is what bounds the
// over-admission; a node whose traffic exceeds its share is not starved
// while the bucket is far from empty (takeBudget's margin), and tokens the
// others leave unspent raise everyone's next budget.
func activeShare(e *ownedKey, k int) float32 {
	if e.ownDemand >= ownActiveMin {
		k++
	}
	return 1 / float32(max(k, 1))
}

// grantLease sizes and grants a lease on an owned key: the asking node's
// share of the demand (its rate over the owner's total) times the tokens
// available now, at least one token when any is available, at most what it
// asked for. The tokens are drained at once, so the leases outstanding never
// exceed what the bucket had. covered reports whether the key's fence
// covers the grant (fenceSpent): it needs no backup of its own. kh is
// ring.KeyHash(it.Key).
func (n *Node) grantLease(e *ownedKey, now time.Time, it *peerv1.FlushItem, kh uint64) (g int64, covered bool) {
	peek, err := e.b.Take(n.bt(now), 0)
	if err != nil || peek.Remaining <= 0 {
		return 0, false
	}
	share := 1.0
	if e.dem > 0 {
		share = math.Min(1, float64(it.Rate)/float64(e.dem))
	}
	g = int64(share * float64(peek.Remaining))
	g = min(max(g, 1), it.LeaseWant, peek.Remaining)
	if room := n.fenceRoom(now, n.view, e, it.Key, kh, e.b.Config(), g); room >= 0 {
		g = min(g, room) // fence.go: within what the backup target knows
	}
	if g <= 0 {
		return 0, false
	}
	if err := e.b.Drain(n.bt(now), g); err != nil {
		return 0, false
	}
	covered = n.spendFence(now, n.view, e.fen, it.Key, kh, g, e.b.Config())
	n.metrics.LeasesGranted.Add(1)
	n.metrics.LeaseTokensGranted.Add(g)
	return g, covered
}

// tickPushes sends, once per FlushInterval, the fresh state of every
// owned key that changed to the interested nodes whose copy is stale, one
// push message per node (chunked at MaxBatch), in member order. Each push
// of a key rotates its interest (interest.go). A key too small for shares
// is pushed only when nearly spent (pushInterest).
func (n *Node) tickPushes(now time.Time, v *view, force bool) {
	if !force && now.Before(n.nextPush) {
		return
	}
	if !force {
		n.nextPush = nextDue(n.nextPush, now, n.cfg.FlushInterval)
	}
	if n.st.changedShards == 0 {
		return
	}
	// out holds the states to push to each member index that has some.
	out := map[int][]*peerv1.KeyState{}
	var a msgAlloc
	a.reserve(16)
	for i := range n.st.shards {
		s := &n.st.shards[i]
		if n.st.changedShards&s.bit == 0 {
			continue
		}
		for j, key := range s.changed {
			e := n.st.changedEntry(s, j)
			if e == nil {
				continue
			}
			e.clear(flagChanged)
			e.ownAdmitted = 0 // published: the owner's early-push count starts again
			var ks *peerv1.KeyState
			l := e.b.Config()
			small := n.smallForShares(&l, v.size())
			spent := (small || n.dormantStale(s, key, e)) && n.nearlySpent(e, now)
			k := n.pushInterest(s, key, e, !force, !small, spent, func(m int) {
				if v.peers[v.names[m]] == nil {
					return // this node, or a lost member
				}
				if ks == nil {
					ks = a.keyState()
				}
				out[m] = append(out[m], ks)
			})
			if ks != nil {
				ks.Key, ks.State, ks.Demand, ks.Share = key, a.state(&n.st.lims, e.b), e.dem, activeShare(e, k)
			}
		}
		n.st.clearChanged(s)
	}
	for _, i := range slices.Sorted(maps.Keys(out)) {
		p := v.peers[v.names[i]]
		items := out[i]
		for len(items) > 0 {
			k := min(len(items), n.cfg.MaxBatch)
			n.send(p.name, pushBody{&peerv1.Push{AppliedSeq: p.inSeq, AppliedIncarnation: p.inInc, Items: items[:k:k]}})
			n.metrics.PushesSent.Add(1)
			items = items[k:]
		}
	}
}

// nearlySpent reports whether an owned key has less than SyncFraction of
// its capacity left (at least one hit): what the drift of cached mode
// allows a view to be off by. Such a state is pushed to every node that
// may hold a view of the key (interest.go).
func (n *Node) nearlySpent(e *ownedKey, now time.Time) bool {
	d, err := e.b.Take(n.bt(now), 0) // a peek, on cluster time
	if err != nil {
		return false
	}
	l := e.b.Config()
	return float64(d.Remaining) < max(1, n.cfg.SyncFraction*float64(l.Capacity()))
}

// nextDue returns the next instant of a schedule of period d that was due at
// prev, keeping the cadence unless it fell more than a period behind now.
func nextDue(prev, now time.Time, d time.Duration) time.Time {
	if prev.IsZero() || now.Sub(prev) >= d {
		return now.Add(d)
	}
	return prev.Add(d)
}

// pushSoon pushes the changed keys now (an owner's own admissions of a key
// reached the sync threshold). A call from within a push is ignored.
func (n *Node) pushSoon(now time.Time) {
	if n.pushing {
		return
	}
	n.pushing = true
	n.tickPushes(now, n.view, true)
	n.pushing = false
}
