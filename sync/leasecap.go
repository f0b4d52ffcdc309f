package sync

import (
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
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
// every instant. It costs a lookup per owned check on a shard with live
// grants, and what it withholds is refill a full bucket would have dropped
// anyway while the leases' tokens were counted in it. Other algorithms than
// the token bucket are not capped.

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

// noteGrant records g tokens of key granted to the member named to at now.
func (n *Node) noteGrant(s *shard, key, to string, g int64, now time.Time) {
	if g <= 0 {
		return
	}
	if s.granted == nil {
		s.granted = map[string][]liveGrant{}
	}
	exp := n.bt(now).Add(n.cfg.LeaseTTL).UnixNano()
	gs, ok := s.granted[key]
	if !ok {
		key = strings.Clone(key) // key may point into a message
	}
	i := len(gs) // by expiry: cluster time may step back
	for i > 0 && gs[i-1].exp > exp {
		i--
	}
	s.granted[key] = slices.Insert(gs, i, liveGrant{exp: exp, tokens: g, to: to})
}

// capLeased applies the cap (see above) to b, the owned bucket of key, up
// to now, and forgets the grants expired by now.
func (n *Node) capLeased(s *shard, key string, b bucket.Bucket, now time.Time) {
	if len(s.granted) == 0 {
		return
	}
	gs, ok := s.granted[key]
	if !ok {
		return
	}
	l := b.Config()
	if l.Algorithm != bucket.TokenBucket {
		delete(s.granted, key)
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
		live -= gs[i].held()
		if gs[i].back > 0 {
			_ = b.Refund(at, gs[i].back) // within the cap: back <= tokens
		}
	}
	capTokens(b, t, c-live)
	if i == len(gs) {
		delete(s.granted, key)
	} else if i > 0 {
		s.granted[key] = slices.Delete(gs, 0, i)
	}
}

// returnLive takes up to ret tokens of key that the member named to gave
// back unspent as tokens of its grants still counted live here, the oldest
// first, and returns how many: they are refunded when their grant expires
// here (capLeased), since refunded now they would be counted twice, in the
// bucket and in the live grants, and the cap would drop them. Whichever
// grant they came from, a refund at a grant's expiry of at most its
// tokens never raises the bucket and the live grants together.
func (n *Node) returnLive(s *shard, key, to string, ret int64) int64 {
	return claimLive(s.granted[key], to, ret, func(g *liveGrant) *int64 { return &g.back })
}

// spentLive counts up to spent tokens of key's grants to the member named
// to as spent, the oldest grants first: from now on they no longer hold the
// cap. A member reporting more than it holds moves nothing beyond its own
// live grants, and at worst lets the bucket refill as it would with no
// leases at all.
func (n *Node) spentLive(s *shard, key, to string, spent int64) {
	claimLive(s.granted[key], to, spent, func(g *liveGrant) *int64 { return &g.spent })
}

// claimLive moves up to k tokens of the grants gs to the member named to,
// the oldest first, into the counter mark returns (back or spent), never
// more than a grant has neither given back nor spent, and returns how many
// it moved.
func claimLive(gs []liveGrant, to string, k int64, mark func(*liveGrant) *int64) int64 {
	var took int64
	for i := range gs {
		if k <= 0 {
			break
		}
		if g := &gs[i]; g.to == to && g.back+g.spent < g.tokens {
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
// and forgets them: a key not looked at again is not left uncapped.
func (n *Node) sweepGrants(s *shard, now time.Time) {
	if len(s.granted) == 0 {
		return
	}
	t := n.bt(now).UnixNano()
	for key, gs := range s.granted {
		if gs[len(gs)-1].exp > t {
			continue
		}
		if e := n.st.lookup(s, key); e != nil && e.has(flagOwned) {
			n.capLeased(s, key, e.b, now)
		}
		delete(s.granted, key)
	}
}
