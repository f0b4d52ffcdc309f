package sync

import (
	"math"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The owner's cap for live lease grants (leased mode).
//
// A lease's tokens are drained from the owner's bucket when granted and
// spent at the non-owner later, up to LeaseTTL after. Were the bucket free
// to refill to its capacity meanwhile, a span could admit the lease's tokens
// on top of a full bucket: up to rate × LeaseTTL beyond the token bucket's
// envelope (capacity + rate × span), with no fault at all.
//
// So the owner holds a token bucket key to at most its capacity minus the
// tokens it granted on the key that may still be spent: those granted less
// than LeaseTTL ago and not yet reported spent by their holder (on cluster time; a non-owner's lease expires LeaseTTL
// after it sent the flush that asked for it, so never later). The bucket
// and the tokens out on live leases then hold at most one bucket together;
// they refill at the bucket's rate and no faster; every admission, the
// owner's or a lease's, takes from them; a grant moves tokens from one to
// the other. Whatever a span admits is then within the envelope, as for
// one bucket. A token returned unspent is refunded under the same cap.
//
// The cap rises only when a grant lives out its TTL, and is applied
// (capLeased) before the owner decides on the key, grants from it or
// refunds to it: at each expiry in turn, then at the present, so the refill
// between two accesses is capped as it would be were the bucket looked at
// every instant. The grants are in the key's owned record (ownedKey.gr),
// so it costs a load of a pointer per owned check, nil for a key with none,
// and what it withholds is refill a full bucket would have dropped anyway
// while the leases' tokens were counted in it. Other algorithms than the
// token bucket are not capped.
//
// The owner knows its grants one by one: it names each in its answer
// (FlushAck.lease_grant_ids) and the holder names in a later flush the
// latest it holds no more (FlushItem.lease_settled), with its unspent
// tokens given back; the owner then forgets the grants up to it. A grant
// that expires here before it is settled becomes late (lateGrant): the
// tokens given back of it later are refunded only as far as the bucket
// would have kept them. When the key moves to another owner, its live
// grants go with its state (handGrants, sendGrants), also when that
// hand-off follows the key on or comes back (followHandoffs, abandon),
// or when the state is kept to be handed later (keptgrants.go), and the
// new owner holds its bucket under them (onHandedGrants). A record that
// leaves the store with live grants has its key marked, once they have
// expired and been forgotten, so that the next one is held under them
// (evicted.go, markGrants); the sweep of idle keys leaves it while they
// live (sweepEntries).

// liveGrant is tokens granted on a key to the member named to, spendable
// at most until exp (cluster time, Unix ns); back of them were given back
// unspent before exp, to be refunded at exp; spent of them were reported
// spent by the member (its flushes' lease_spent): admissions made, they no
// longer hold the cap, as a token taken from the bucket itself would not.
type liveGrant struct {
	exp, tokens, back, spent int64
	to                       string
}

// held returns the tokens of g that still hold the cap.
func (g *liveGrant) held() int64 { return g.tokens - g.spent }

// A grant's id (FlushAck.lease_grant_ids) is its expiry here, exp.

// lateGrant is a grant (id, to the member named to) that expired here
// while left of its tokens were neither reported spent nor given back: its
// holder may yet give them back (after a partition, say), or may have
// spent them (spends close to a grant's expiry are not reported, lease.go's
// fill). It no longer holds the cap. Given back, the tokens would have
// been in the bucket since the expiry, where the cap kept them before: the
// bucket and the live grants together would have held them on top of what
// they held, and dropped what went beyond the capacity. So they are
// refunded only up to capacity - peak, peak being the most the bucket and
// the live grants held together since the expiry (as whole tokens, a
// fraction counted as one), raised by every refund of another late grant
// since (those tokens too would have been there all along). The holder's
// flush that names the grant settled (FlushItem.lease_settled) ends it:
// what it did not give back was spent. An unsettled one is forgotten
// after grantMemory.
type lateGrant struct {
	id, left, peak int64
	// level is what the bucket and the live grants held together when
	// last observed, at (Unix ns; see observeLate).
	level, at int64
	to        string
}

// keyGrants is an owned key's grants: live ones by expiry, late ones in
// the order they expired. An owned record holds them (ownedKey.gr) while
// either list is not empty, nil otherwise; shard.strayGrants holds those
// of a key with no owned record (looseGrants).
type keyGrants struct {
	live []liveGrant
	late []lateGrant
	// full is, for the grants of an evicted record (markGrants), when its
	// bucket held under its live grants would be full again at the
	// soonest (Unix ns, cluster time; 0: none): the key's mark once they
	// are forgotten unadopted (sweepGrants).
	full int64
}

// grantsFor returns e's grants, new if it has none, and lists e in s's
// leased list for the sweep.
func (s *shard) grantsFor(e *ownedKey) *keyGrants {
	if e.gr == nil {
		e.gr = &keyGrants{}
	}
	if !e.has(flagGrants) {
		e.set(flagGrants)
		s.leased = append(s.leased, e)
	}
	return e.gr
}

// grantsLive reports whether e has live grants, or expired ones whose
// cap capLeased has not applied yet: leased mode's cap holds its bucket.
func (e *ownedKey) grantsLive() bool { return e.gr != nil && len(e.gr.live) > 0 }

// tidyGrants drops e's grants when it has none left.
func (e *ownedKey) tidyGrants() {
	if g := e.gr; g != nil && len(g.live) == 0 && len(g.late) == 0 {
		e.gr = nil
	}
}

// looseGrants moves the grants of e, an owned record leaving s's owned
// table, to s.strayGrants: a key's grants outlive its record, as its fence
// does (looseFence), and a record of the key made again takes them back
// (adoptGrants).
func (st *store) looseGrants(s *shard, e *ownedKey) {
	if e.gr == nil {
		return
	}
	if st.sideFull(st.strays(), 0, 0) {
		st.foldGrants(e)
		return
	}
	if s.strayGrants == nil {
		s.strayGrants = map[string]*keyGrants{}
	}
	s.strayGrants[e.key] = e.gr
	e.gr = nil
}

// adoptGrants gives e, an owned record just put in s's owned table at now
// (bucket time), its key's grants if s.strayGrants holds some, or holds
// its bucket under the mark of grants folded (foldGrants) if it has one.
func (st *store) adoptGrants(s *shard, e *ownedKey, now time.Time) {
	if st.foldedUntil != 0 { // a load and a compare until the first fold
		st.capFolded(e, now)
	}
	if len(s.strayGrants) == 0 {
		return
	}
	if g, ok := s.strayGrants[e.key]; ok {
		delete(s.strayGrants, e.key)
		g.full = 0 // held under them by the cap again
		e.gr = g
		s.grantsFor(e)
	}
}

// The stray grants are a side structure (budget.go): the keys of all
// shards' strayGrants are at most MaxKeys (a member leasing 100,000
// distinct keys of an owner whose budget evicted their records grew them
// by as many, TestStrayGrantsBounded). Beyond that a record's grants are
// not kept but folded into a mark (foldGrants), in the evicted marks'
// table under a salt of its own (markFolded): full no sooner than the
// eviction's grant mark says (grantsFull, evicted.go). The eviction's
// mark holds only a record made by a check or a flush (markedStart); the
// folded one holds a record of the key made by any path (a hand-off, a
// kept state, a view promoted: adoptGrants, capFolded) at or below the
// level a bucket drained from it would hold: under the cap its grants
// held, never above it. Tokens given back of a folded grant are refused
// (settleReturn finds no grant), and late grants are dropped on the same
// ground: under-admission, the safe side. A mark shared by two keys (a
// flood beyond the marks' slots too) applies to both: new keys of a
// shared slot start as drained as it says, until it lapses (at most
// LeaseTTL and a refill of the bucket ahead).

// markFolded is the salt of the marks of folded grants (foldGrants).
const markFolded uint64 = 0x85ebca6b0c2b2ae9

// strays returns the keys of all shards' strayGrants.
func (st *store) strays() int {
	k := 0
	for i := range st.shards {
		k += len(st.shards[i].strayGrants)
	}
	return k
}

// foldGrants marks e's key, an owned record leaving the owned table with
// grants when the stray grants are full, as full no sooner than its live
// grants allow (see above), and forgets its grants.
func (st *store) foldGrants(e *ownedKey) {
	st.metrics.FloodCapped.Add(1)
	full, ok := grantsFull(e)
	if ok {
		// The latest grant was made LeaseTTL before its expiry, no later
		// than now: a mark of a slot live then is kept (the safe side).
		made := time.Unix(0, e.gr.live[len(e.gr.live)-1].exp).Add(-st.leaseTTL)
		st.marks.mark(st.hash(e.key)^markFolded, made, full)
		st.foldedUntil = max(st.foldedUntil, full.UnixNano())
	}
	e.gr = nil // late grants alone: their returns are refused
}

// capFolded holds the token bucket of e, an owned record made at now
// (bucket time), at most as full as a bucket drained from its key's mark
// of folded grants on (markedStart, foldGrants), if it has a live one.
// Only while a folded mark may be live (st.foldedUntil): else the lookup,
// in a table the evicted marks share, would apply their shared slots to
// keys a second time.
func (st *store) capFolded(e *ownedKey, now time.Time) {
	if now.UnixNano() >= st.foldedUntil {
		return
	}
	l := e.b.Config()
	if l.Algorithm != bucket.TokenBucket {
		return
	}
	at, ok := st.markedStart(st.hash(e.key)^markFolded, l, now)
	if !ok {
		return
	}
	probe, ok := newDrained(l, at) // evicted.go
	if !ok {
		return
	}
	if d, err := probe.Take(now, 0); err == nil {
		capTokens(e.b, now, d.Remaining)
	}
}

// observeLate raises the peak of every late grant in ls to what the
// bucket b and the live tokens on live grants held together at t: what
// they hold now, or, if more, what they held when last observed plus the
// refill since (up to the capacity). Every decision on the key is preceded
// by an observation (capLeased); the second term covers a decrease of the
// bucket that was not (a hand-off merged in, say), before which the bucket
// held at most that much.
func observeLate(ls []lateGrant, b bucket.Bucket, t time.Time, live int64) {
	if len(ls) == 0 {
		return
	}
	d, err := b.Take(t, 0)
	if err != nil {
		return
	}
	l := b.Config()
	c := l.Capacity()
	level := d.Remaining
	if level < c {
		level++ // a fraction of a token, perhaps
	}
	level += live
	now := t.UnixNano()
	rate := float64(l.Limit) / float64(max(1, l.Period.Nanoseconds()))
	for i := range ls {
		g := &ls[i]
		most := level
		if g.at != 0 && now > g.at {
			most = max(most, min(c, g.level+int64(math.Ceil(rate*float64(now-g.at)))))
		}
		g.peak = max(g.peak, most)
		g.level, g.at = level, max(g.at, now)
	}
}

// noteGrant records g tokens granted to the member named to at now on the
// key of e, an owned record of s, and returns the grant's id (its expiry
// here; 0 for no grant).
func (n *Node) noteGrant(s *shard, e *ownedKey, to string, g int64, now time.Time) int64 {
	if g <= 0 {
		return 0
	}
	exp := n.bt(now).Add(n.cfg.LeaseTTL).UnixNano()
	gr := s.grantsFor(e)
	gr.live = insertGrant(gr.live, liveGrant{exp: exp, tokens: g, to: to}) // wirelimits.go
	return exp
}

// capLeased applies the cap (see above) to the bucket of e, an owned
// record, up to now, and forgets the grants expired by now.
func (n *Node) capLeased(e *ownedKey, now time.Time) {
	gr := e.gr
	if gr == nil {
		return
	}
	b := e.b
	gs, ls := gr.live, gr.late
	l := b.Config()
	if l.Algorithm != bucket.TokenBucket {
		e.gr = nil
		return
	}
	var live int64
	for i := range gs {
		live += gs[i].held()
	}
	c := l.Capacity()
	t := n.bt(now)
	i := 0
	for ; i < len(gs) && gs[i].exp <= t.UnixNano(); i++ {
		at := time.Unix(0, gs[i].exp)
		capTokens(b, at, c-live)
		observeLate(ls, b, at, live)
		g := gs[i]
		live -= g.held()
		if g.back > 0 {
			_ = b.Refund(at, g.back) // within the cap: back <= tokens
		}
		if left := g.tokens - g.spent - g.back; left > 0 {
			ls = append(ls, lateGrant{id: g.exp, left: left, to: g.to})
			observeLate(ls[len(ls)-1:], b, at, live)
		}
	}
	capTokens(b, t, c-live)
	observeLate(ls, b, t, live)
	if i == len(gs) {
		gr.live = nil
	} else if i > 0 {
		gr.live = slices.Delete(gs, 0, i)
	}
	n.keepLate(gr, ls, t.UnixNano())
	e.tidyGrants()
}

// keepLate stores ls as the late grants of gr, less those forgotten by t
// (older than grantMemory).
func (n *Node) keepLate(gr *keyGrants, ls []lateGrant, t int64) {
	mem := int64(n.grantMemory())
	ls = slices.DeleteFunc(ls, func(g lateGrant) bool { return g.left <= 0 || t-g.id > mem })
	if len(ls) == 0 {
		ls = nil
	}
	gr.late = ls
}

// settleReturn applies, for key's owned token bucket b (capped up to now
// by capLeased), back tokens that the member named to gave back (at most
// what it was granted and did not give back before: grantBook) and its
// report that it holds none of its grants up to the id settled (0: no
// report, an older member: no bound). The tokens are credited to its late
// grants up to settled first, the oldest first (the oldest has the highest
// peak: the safe side), then to its live ones: refund is what b may take
// back now (each late grant's up to capacity - its peak - what the late
// grants before it refunded), later what is refunded at a live grant's
// expiry (claimLive). Then its grants up to settled are over: a late one
// is forgotten, and a live one's tokens not given back count as spent
// (they no longer hold the cap). Before, the owner kept one entry per
// member and key, its bound that of the latest grant only: a late return
// was refunded into a bucket that had been full since an earlier grant
// (the fault checker's leased seed 758, TestLateReturnAfterFullBucket).
func (n *Node) settleReturn(e *ownedKey, to string, back, settled int64) (refund, later int64) {
	upto := settled
	if upto <= 0 {
		upto = math.MaxInt64
	}
	c := e.b.Config().Capacity()
	gr := e.gr
	if gr == nil {
		gr = &keyGrants{} // none: nothing to credit (not kept)
	}
	ls := gr.late
	rest := back
	for i := range ls {
		g := &ls[i]
		if rest <= 0 {
			break
		}
		if g.to != to || g.id > upto {
			continue
		}
		k := min(rest, g.left)
		// The tokens refunded of the grants before would have shared
		// the bucket with these since their expiry: less room by as much.
		refund += min(k, max(0, c-g.peak-refund))
		g.left -= k
		rest -= k
	}
	// Then to its live grants granted before the latest settled one
	// expired here (id - LeaseTTL < settled): not only those up to it.
	// The member reports the spends of its grants together, which are
	// counted out of its live grants the oldest first (spentLive): spends
	// of a newer grant can so have used up an older one's count here, whose
	// tokens given back have then no room but the newer grant's. Tokens
	// given back of a grant expired before a live grant was made are not
	// credited to it: the bucket alone held the room for them since.
	liveUpto := upto
	if settled > 0 {
		liveUpto = settled + n.cfg.LeaseTTL.Nanoseconds()
	}
	later = claimLive(gr.live, to, rest, liveUpto, func(g *liveGrant) *int64 { return &g.back })
	if refund > 0 {
		// Another late grant's tokens would have shared the bucket with
		// these since its expiry: its room is less by as much.
		for i := range ls {
			ls[i].peak += refund
		}
	}
	if settled > 0 {
		for i := range ls {
			if ls[i].to == to && ls[i].id <= settled {
				ls[i].left = 0
			}
		}
		gs := gr.live
		for i := range gs {
			if g := &gs[i]; g.to == to && g.exp <= settled {
				g.spent = g.tokens - g.back
			}
		}
	}
	if len(ls) > 0 {
		n.keepLate(gr, ls, math.MinInt64/2)
		e.tidyGrants()
	}
	return refund, later
}

// spentLive counts up to spent tokens of e's grants to the member named
// to as spent, the oldest grants first: from now on they no longer hold the
// cap. A member reporting more than it holds moves nothing beyond its own
// live grants, and at worst lets the bucket refill as it would with no
// leases at all.
func (n *Node) spentLive(e *ownedKey, to string, spent int64) {
	if e.gr == nil {
		return
	}
	claimLive(e.gr.live, to, spent, math.MaxInt64, func(g *liveGrant) *int64 { return &g.spent })
}

// claimLive moves up to k tokens of the grants gs to the member named to
// up to the id upto, the oldest first, into the counter mark returns (back
// or spent), never more than a grant has neither given back nor spent, and
// returns how many it moved. Tokens given back (back) of a grant still
// live here are refunded at its expiry (capLeased), since refunded now
// they would be counted twice, in the bucket and in the live grants, and
// the cap would drop them. Whichever grant they came from, a refund at a
// grant's expiry of at most its tokens never raises the bucket and the
// live grants together.
func claimLive(gs []liveGrant, to string, k, upto int64, mark func(*liveGrant) *int64) int64 {
	var took int64
	for i := range gs {
		if k <= 0 {
			break
		}
		if g := &gs[i]; g.to == to && g.exp <= upto && g.back+g.spent < g.tokens {
			m := min(k, g.tokens-g.back-g.spent)
			*mark(g) += m
			k -= m
			took += m
		}
	}
	return took
}

// capTokens lowers the tokens of token bucket b at t to at most most (not
// below zero), exactly: its fraction of a token is dropped too. A t before
// b's latest instant acts at that instant (a lower cap, later: the safe
// side).
func capTokens(b bucket.Bucket, t time.Time, most int64) {
	most = max(most, 0)
	d, err := b.Take(t, 0)
	if err != nil || d.Remaining < most {
		return // fewer than most whole tokens: fewer than most
	}
	c := b.Config().Capacity()
	_ = b.Refund(t, c)     // full, no fraction (whole >= 0 here)
	_ = b.Drain(t, c-most) // most, no fraction
}

// sweepGrants applies the cap of s's keys whose grants have all expired
// and forgets them: a key not looked at again is not left uncapped. It
// forgets late grants older than grantMemory, of keys with no live grant.
// The grants of a key with no owned record (strayGrants) are forgotten
// uncapped, live ones once all have expired, and the key is then marked
// so that its next record is held under them (markGrants, evicted.go).
func (n *Node) sweepGrants(s *shard, now time.Time) {
	t := n.bt(now).UnixNano()
	keep := s.leased[:0]
	for _, e := range s.leased {
		if !e.has(flagGrants) {
			continue // retired: its grants went with looseGrants
		}
		if gr := e.gr; gr != nil {
			if len(gr.live) == 0 {
				n.keepLate(gr, gr.late, t)
			} else if gr.live[len(gr.live)-1].exp <= t {
				n.capLeased(e, now) // forgets them all
			}
			e.tidyGrants()
		}
		if e.gr == nil {
			e.clear(flagGrants)
			continue
		}
		keep = append(keep, e)
	}
	clear(s.leased[len(keep):])
	s.leased = keep
	for key, gr := range s.strayGrants {
		if len(gr.live) == 0 {
			n.keepLate(gr, gr.late, t)
		} else if gr.live[len(gr.live)-1].exp <= t {
			gr.live = nil
			if gr.full > t {
				n.st.marks.mark(n.st.hash(key)^markOwned, n.bt(now), time.Unix(0, gr.full))
			}
		}
		if len(gr.live) == 0 && len(gr.late) == 0 {
			delete(s.strayGrants, key)
		}
	}
}

// handGrants returns the grants of key that may still be spent at their
// holders, as the key's state is handed off to a new owner (capped up to
// now first, so that the state handed is held under them), and forgets
// key's grants here. They follow the state (sendGrants), and the new owner
// holds its bucket under them in turn (onHandedGrants): without them, it
// refilled to the capacity while the tokens were spent (the fault
// checker's leased seed 105, TestLeaseCapSurvivesHandoff). Only the
// tokens neither reported spent nor given back go: those given back,
// which this node would have refunded at the grant's expiry, are neither
// refunded by the new owner nor hold it (under-admission, the safe side);
// late grants do not go either: their tokens given back later are refused
// by the new owner.
func (n *Node) handGrants(e *ownedKey, now time.Time) []*peerv1.LeaseGrant {
	n.capLeased(e, now)
	if e.gr == nil {
		return nil
	}
	var out []*peerv1.LeaseGrant
	for _, g := range e.gr.live {
		if h := g.tokens - g.spent - g.back; h > 0 {
			out = append(out, &peerv1.LeaseGrant{Key: e.key, To: g.to, Id: g.exp, Held: h})
		}
	}
	e.gr = nil
	return out
}

// sendGrants sends each member of v its grants in held, after the states
// of their keys (Handoffs of grants alone, MaxBatch at most in each, on
// the same ordered queue, acknowledged and sent again as any hand-off).
// The states' batches are unchanged: a KeyState that carried them grew by
// a slice, and every hand-off's heap by as much (TestHandoffHeap).
func (n *Node) sendGrants(now time.Time, v *view, held map[*peer][]*peerv1.LeaseGrant) {
	for _, name := range v.names {
		p := v.peers[name]
		gs := held[p]
		if p == nil {
			continue
		}
		for len(gs) > 0 { // in batches of MaxBatch, as the states (TestHandedGrantsChunked)
			k := min(len(gs), n.cfg.MaxBatch)
			n.sendHandoff(now, p, &peerv1.Handoff{Grants: gs[:k:k]}) // membership.go
			gs = gs[k:]
		}
	}
}

// onHandedGrants counts the grants handed from p with the states of their
// keys (handGrants) as live grants of the keys this node owns, and
// applies the cap; those of a key owned by another live member in v are
// passed on to it, as onHandoff passes on the states. A grant already
// counted here (the same holder and id: a hand-off received twice) is not
// counted again; one that expired, or that would expire later than a grant
// made now, or of a key held here in no owned bucket, is ignored; one of
// a key whose state is kept here to hand on later (its owner lost, or
// none while leaving) is kept with it (keptgrants.go).
func (n *Node) onHandedGrants(now time.Time, v *view, p *peer, gs []*peerv1.LeaseGrant) {
	if len(gs) == 0 {
		return
	}
	var on map[*peer][]*peerv1.LeaseGrant
	t := n.bt(now)
	most := t.Add(n.cfg.LeaseTTL).UnixNano()
	for _, hg := range gs {
		key := hg.GetKey()
		if !n.validGrant(hg) {
			n.metrics.Malformed.Add(1) // wirelimits.go
			continue
		}
		if hg.Id <= t.UnixNano() || hg.Id > most {
			continue
		}
		if o := v.owner(key); o != n.cfg.Self {
			// A copy: the received message may share its buffers.
			switch q := v.peers[o]; {
			case q != nil && q != p && !q.gone:
				if on == nil {
					on = map[*peer][]*peerv1.LeaseGrant{}
				}
				on[q] = append(on[q], grantCopy(hg))
			case q == nil:
				// Kept with the state, for an owner lost, or unowned
				// while leaving (keptgrants.go).
				n.keepGrantsFor(now, v, o, []*peerv1.LeaseGrant{keptCopy(v, hg)})
			}
			continue
		}
		s := n.st.shardOf(key)
		e := n.st.lookupOwned(s, key)
		if e == nil || e.b.Config().Algorithm != bucket.TokenBucket {
			continue
		}
		c := e.b.Config().Capacity()
		if hg.Held > c {
			n.metrics.Malformed.Add(1) // a grant is at most a bucket
			continue
		}
		if hg.To == n.cfg.Self {
			// This node's own lease on the key was dropped when the key
			// became its own (dropLease): its tokens are never spent, and
			// would only hold the bucket down (TestHandedGrantToSelf).
			continue
		}
		var have []liveGrant
		if e.gr != nil {
			have = e.gr.live
		}
		// A folded grant (foldedHolder: several holders' tokens, kept for
		// a lost owner, keptCopy) is never a doubled one: folded again,
		// an equal id of another grant would otherwise be dropped.
		if hg.To != foldedHolder && slices.ContainsFunc(have, func(g liveGrant) bool { return g.to == hg.To && g.exp == hg.Id }) {
			continue
		}
		if have = addHandedGrant(have, hg, c, memberName(v, hg.To)); len(have) > 0 { // wirelimits.go: bounded
			s.grantsFor(e).live = have
		}
		n.capLeased(e, now)
	}
	n.sendGrants(now, v, on)
}
