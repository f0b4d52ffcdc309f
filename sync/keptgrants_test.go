package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestStateKeptForLostOwnerKeepsGrants: the live lease grants of a key
// whose state is kept for its owner lost to a partition (keepForLost) go
// to that owner with the state when it is back (handBackToLost). x, h and
// l are members; the key is l's, and x's without l. l is cut off: x takes
// the key over and grants h a lease. Then x is cut off from h as well,
// alone: on its minority ring the key is l's again, lost, and x keeps the
// state for it. The cut heals: x hands l the state, and l decides the key.
// The key rests until l's bucket would have refilled, and just before the
// lease expires h spends it while l admits what its bucket holds. Before,
// x dropped the grants (handGrants forgets them here) and kept the state
// alone: l held its bucket under none and admitted the lease on top of a
// full bucket.
func TestStateKeptForLostOwnerKeepsGrants(t *testing.T) {
	const ttl = 10 * time.Second
	tweak := func(c *Config) { withWait(c); c.LeaseTTL = ttl }
	all := []string{"h", "l", "x"}
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, all...) == "l" && ownerOn(t, k, "h", "x") == "x" {
			key = k
		}
	}
	nw := newTestNet(t, tweak, all...)
	h, l, x := nw.nodes["h"], nw.nodes["l"], nw.nodes["x"]
	nw.split([]string{"l"}, []string{"h", "x"})
	nw.run(100 * time.Millisecond)
	ad, lim, granted := grantedLease(t, nw, x, h, key)
	grantedAt := nw.now
	// x is cut off from h too: alone, on a minority side, it keeps the
	// key's state for l.
	nw.split([]string{"l"}, []string{"h"}, []string{"x"})
	nw.run(100 * time.Millisecond)
	if len(x.dur.forLost["l"]) == 0 {
		t.Fatalf("x keeps nothing for l")
	}
	// The cut heals: x hands l the state (and the grants).
	nw.heal()
	nw.setMembers(all, all...)
	nw.run(200 * time.Millisecond)
	if !isOwned(l, key) {
		t.Fatalf("l does not own the key after the heal")
	}
	ad.spendBeforeExpiry(t, h, l, granted, grantedAt.Add(ttl), lim, "the state kept for l")
}

// spendBeforeExpiry rests until 400 ms before exp, the expiry of a lease
// of granted tokens, then has holder spend it while owner admits what its
// bucket holds, and checks l's envelope over every admission; across
// names the path the grant took.
func (ad *admissions) spendBeforeExpiry(t *testing.T, holder, owner *Node, granted int64, exp time.Time, l bucket.Limit, across string) {
	t.Helper()
	ad.nw.run(exp.Add(-400 * time.Millisecond).Sub(ad.nw.now))
	spent := ad.spendThenDrain(holder, owner, granted)
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on %s's lease across %s", granted, spent, holder.cfg.Self, across))
}

// TestEvictedOwnedKeyKeepsGrants: an owned key evicted while lease grants
// of it are out keeps them: the grants wait in shard.strayGrants for a
// record of the key made again (adoptGrants), and the eviction's mark
// holds the key's next record under them once they have expired and
// been forgotten. a owns the key and grants c a lease; a flood of other
// keys evicts the key at a. Just before the lease expires, c spends it,
// its reports held up on a link that drops them; the grants expire at a,
// and its sweep forgets them. Then a admits on the key. Before, the
// eviction marked the key as its bucket stood (uncapped since the grant,
// refilled to full: no mark at all), and a's next record started full:
// the lease was admitted on top of a full bucket.
func TestEvictedOwnedKeyKeepsGrants(t *testing.T) {
	const ttl = 10 * time.Second
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = ttl; c.MaxKeys = 64 * 8; c.SweepInterval = 640 * time.Millisecond }, "a", "c")
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyOwnedBy(t, "a", "a", "c")
	ad, l, granted := grantedLease(t, nw, a, c, key)
	grantedAt := nw.now
	nw.run(time.Second)
	for i := range 5000 { // the flood: local keys, one hit each
		checkSync(t, a, nw.now, check.Request{Key: fmt.Sprintf("flood%d", i), Hits: 1, Limit: perMinute(1000), Mode: check.ModeLocal})
	}
	s := a.st.shardOf(key)
	if a.st.lookup(s, key) != nil || s.strayGrants[key] == nil {
		t.Fatalf("the key was not evicted with its grants (stray: %v)", s.strayGrants[key] != nil)
	}
	ad.spendWhileStray(t, a, c, s, granted, grantedAt.Add(ttl), l, "the key's eviction")
}

// spendWhileStray has holder spend its lease of granted tokens just
// before exp, its expiry, with its reports to owner dropped until owner's
// sweep has forgotten the key's stray grants (s.strayGrants), then has
// owner admit what its bucket holds, and checks l's envelope over every
// admission; across names what the grants went through.
func (ad *admissions) spendWhileStray(t *testing.T, owner, holder *Node, s *shard, granted int64, exp time.Time, l bucket.Limit, across string) {
	t.Helper()
	nw := ad.nw
	nw.run(exp.Add(-300 * time.Millisecond).Sub(nw.now))
	nw.cut[[2]string{holder.cfg.Self, owner.cfg.Self}] = true
	spent := 0
	for range granted {
		if checkSync(t, holder, nw.now, ad.req).Allowed {
			ad.at = append(ad.at, nw.now)
			spent++
		}
	}
	for end := nw.now.Add(2 * owner.cfg.SweepInterval); len(s.strayGrants) != 0 && nw.now.Before(end); {
		nw.run(owner.cfg.TickInterval)
	}
	if len(s.strayGrants) != 0 {
		t.Fatalf("the grants are still stray at %s after they expired", owner.cfg.Self)
	}
	nw.heal()
	for ad.ask(owner) {
	}
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on %s's lease across %s", granted, spent, holder.cfg.Self, across))
}

// TestUnownedStateKeepsGrants: the live lease grants of a key that a
// leaving node keeps as unowned (keepUnowned: no live member to hand it
// to) go with the state to the key's owner it learns of later
// (handUnowned). x owns the key and grants h a lease; x and h are cut off
// from each other, and x leaves: on its ring without itself no one is
// left. Then j starts, with h, and the key is j's; x learns of j and hands
// it the state. The key rests until j's bucket would have refilled, and
// just before the lease expires h spends it while j admits what its
// bucket holds. Before, x dropped the grants (handGrants forgets them
// here) and kept the state alone: j held its bucket under none and
// admitted the lease on top of a full bucket.
func TestUnownedStateKeepsGrants(t *testing.T) {
	const ttl = 10 * time.Second
	tweak := func(c *Config) { c.LeaseTTL = ttl }
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, "h", "x") == "x" && ownerOn(t, k, "h", "j") == "j" && ownerOn(t, k, "h", "j", "x") == "j" {
			key = k
		}
	}
	nw := newTestNet(t, tweak, "h", "x")
	h, x := nw.nodes["h"], nw.nodes["x"]
	ad, lim, granted := grantedLease(t, nw, x, h, key)
	grantedAt := nw.now
	// h, back from its minority side below with x still suspect (quorum.go),
	// decides by the policy what its lease does not cover: fail-closed, so
	// that local-share's degraded admissions do not count here.
	ad.req.Policy = check.PolicyFailClosed
	// x and h are cut off from each other; x leaves, with no one to hand
	// the key to.
	nw.split([]string{"h"}, []string{"x"})
	x.Leave(nw.now)
	nw.run(100 * time.Millisecond)
	if x.unowned[key] == nil {
		t.Fatalf("x keeps no unowned state of the key")
	}
	// j starts, seeing h and x; x learns of j and hands it the key.
	j := nw.add("j", tweak)
	nw.names = []string{"h", "j", "x"}
	j.SetMembers(nw.now, nw.names)
	h.SetMembership(nw.now, []string{"h", "j"}, []string{"x"})
	x.SetMembership(nw.now, []string{"j", "x"}, []string{"h"})
	nw.run(200 * time.Millisecond)
	if !isOwned(j, key) || x.unowned[key] != nil {
		t.Fatalf("j owns the key: %v; x still keeps it: %v", isOwned(j, key), x.unowned[key] != nil)
	}
	ad.spendBeforeExpiry(t, h, j, granted, grantedAt.Add(ttl), lim, "the state x kept unowned")
}

// TestHandedGrantsKeptForLostOwner: lease grants handed to this node with
// a key's state while the key's owner in its view is lost to a partition
// (keepHandedForLost keeps the state for it) are kept with the state, and
// go to that owner after it when it is live again; the owner holds its
// bucket under them. c, back from a minority side with b still suspect,
// is handed by a the state of a key of b's and a grant of 4 to a; b comes
// back. Before, onHandedGrants dropped the grants of a key whose owner
// was no live member: b got the state alone.
func TestHandedGrantsKeptForLostOwner(t *testing.T) {
	all := []string{"a", "b", "c"}
	nw := newTestNet(t, nil, all...)
	b, c := nw.nodes["b"], nw.nodes["c"]
	key := keyOwnedBy(t, "b", all...)
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 10 * time.Second}
	// c is cut off, then sees a again: b, suspect, stays lost, owning the
	// key on c's ring.
	nw.isolate("c")
	c.SetMembership(nw.now, []string{"c"}, []string{"a", "b"})
	nw.run(10 * time.Millisecond)
	nw.heal()
	nw.cutBetween([]string{"b"}, []string{"c"})
	c.SetMembership(nw.now, []string{"a", "c"}, []string{"b"})
	if c.view.lost["b"] == nil || c.view.owner(key) != "b" {
		t.Fatalf("c's view: b lost %v, owner of the key %q", c.view.lost["b"] != nil, c.view.owner(key))
	}
	st, err := bucket.New(l, nw.now)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Drain(nw.now, 2) // 8 left: a full bucket is then over the cap

	state, _ := st.AppendBinary(nil)
	exp := nw.now.Add(c.cfg.LeaseTTL).UnixNano()
	c.Step(nw.now, &peerv1.Envelope{From: "a", To: "c", Incarnation: nw.nodes["a"].cfg.Incarnation,
		Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 1,
			Items:  []*peerv1.KeyState{{Key: key, State: state}},
			Grants: []*peerv1.LeaseGrant{{Key: key, To: "a", Id: exp, Held: 4}}}}})
	if len(c.dur.forLost["b"]) != 1 || len(c.dur.grantsForLost["b"]) != 1 {
		t.Fatalf("c keeps %d states and %d grants for b, want 1 and 1", len(c.dur.forLost["b"]), len(c.dur.grantsForLost["b"]))
	}
	// b is back: c hands it the state, then the grant.
	nw.heal()
	b.SetMembership(nw.now, all, nil)
	c.SetMembership(nw.now, all, nil)
	nw.nodes["a"].SetMembership(nw.now, all, nil)
	nw.run(50 * time.Millisecond)
	e := b.st.lookupOwned(b.st.shardOf(key), key)
	if e == nil {
		t.Fatalf("b holds no owned state of the key")
	}
	var held int64
	if e.gr != nil {
		for _, g := range e.gr.live {
			held += g.held()
		}
	}
	t.Logf("b: %d tokens left, %d held by live grants; c keeps %d grants for b", remainingOn(b, nw.now, key), held, len(c.dur.grantsForLost["b"]))
	if held != 4 {
		t.Errorf("b's live grants hold %d tokens, want the 4 handed to c", held)
	}
	if got := remainingOn(b, nw.now, key); got > 6 {
		t.Errorf("b's bucket holds %d tokens, want at most 6 (10 less the 4 out on a's lease)", got)
	}
}

// TestKeptGrantsBoundedAndCharged: grants kept with states to hand on are
// charged to the store's budget, given back when handed or expired, and
// bounded to maxKeyGrants per state kept beside them (a list not pruned
// again for each grant refused at the bound).
func TestKeptGrantsBoundedAndCharged(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	a.leaving = true
	a.unowned = map[string]*peerv1.KeyState{"k": {Key: "k"}}
	v := &view{peers: map[string]*peer{}}
	base := a.st.bytes
	exp := nw.now.Add(time.Second).UnixNano()
	var gs []*peerv1.LeaseGrant
	for i := range maxKeyGrants + 10 {
		id := exp
		if i%2 == 0 {
			id = nw.now.Add(time.Millisecond).UnixNano() // expires first
		}
		gs = append(gs, &peerv1.LeaseGrant{Key: "k", To: "c", Id: id, Held: 1})
	}
	for _, g := range gs {
		a.keepGrantsFor(nw.now, v, "", []*peerv1.LeaseGrant{g})
	}
	if n := len(a.unownedGrants); n != maxKeyGrants {
		t.Fatalf("kept %d grants for one state, want %d", n, maxKeyGrants)
	}
	if got, want := a.st.bytes-base, int64(maxKeyGrants)*keptGrantCharge; got != want {
		t.Errorf("charged %d bytes, want %d", got, want)
	}
	// Half have expired: they are dropped when the list is handed.
	held := map[*peer][]*peerv1.LeaseGrant{}
	a.handKeptUnowned(nw.now.Add(2*time.Millisecond), v, held)
	if n := len(a.unownedGrants); n != maxKeyGrants/2 {
		t.Errorf("kept %d grants after half expired, want %d", n, maxKeyGrants/2)
	}
	if got, want := a.st.bytes-base, int64(maxKeyGrants/2)*keptGrantCharge; got != want {
		t.Errorf("charged %d bytes after half expired, want %d", got, want)
	}
}

// TestIdleSweepKeepsRecordWithLiveGrants: the sweep of idle keys leaves an
// owned record whose bucket looks full while it has live lease grants
// (uncapped since its last decision), and removes it once the sweep of
// grants applied their cap at their expiry and the bucket refilled.
// Before, it was removed, and a record made again after the grants
// expired (the sweep forgets stray ones) started full under none.
func TestIdleSweepKeepsRecordWithLiveGrants(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = 2 * time.Minute }, "a")
	a := nw.nodes["a"]
	const key = "user:0000042"
	s, _ := grantedRecord(t, a, key)
	grace := toCoarse(a.cfg.SweepInterval)
	at := t0.Add(40 * time.Second) // idle: full again (uncapped), unused for the grace
	a.st.sweepEntries(s, at, coarse(at), grace, grace)
	if a.st.lookupOwned(s, key) == nil {
		t.Fatalf("swept while its grants live")
	}
	at = t0.Add(a.cfg.LeaseTTL + time.Second)
	a.st.sweepEntries(s, at, coarse(at), grace, grace)
	if a.st.lookupOwned(s, key) == nil {
		t.Fatalf("swept before the cap of its expired grants was applied")
	}
	a.sweepGrants(s, at) // capped at the expiry: 30 left, a late grant
	if got := remainingOn(a, at, key); got > 31 {
		t.Errorf("after the sweep of grants: %d tokens, want at most 31 (30 + a second's refill)", got)
	}
	at = at.Add(time.Minute)
	a.st.sweepEntries(s, at, coarse(at), grace, grace)
	if a.st.lookupOwned(s, key) != nil {
		t.Errorf("kept after its grants expired and it refilled")
	}
}

// grantedRecord has a, alone, own key (60 a minute) from a check at t0,
// then grant b 30 of its tokens: its shard and owned record.
func grantedRecord(t *testing.T, a *Node, key string) (*shard, *ownedKey) {
	t.Helper()
	checkSync(t, a, t0, check.Request{Key: key, Hits: 1, Limit: perMinute(60)})
	s := a.st.shardOf(key)
	e := a.st.lookupOwned(s, key)
	_ = e.b.Drain(t0, 30) // the grant's tokens
	a.noteGrant(s, e, "b", 30, t0)
	return s, e
}

// TestDeposedKeyKeepsGrants: a key an owner drops on its return from a
// minority side (deposed, quorum.go) with lease grants of it out is held
// under them as an evicted key is: its next record, made from the state
// kept at the drop (keptState) once the grants have expired and been
// forgotten, starts no fuller than the grants' mark. a owns the key and
// grants c a lease; a alone sees b and c fail (the majority never does,
// so no hand-off comes), and is back 100 ms later. Just before the lease
// expires, c spends it, its reports dropped until a's sweep has forgotten
// the grants; then a admits on the key.
func TestDeposedKeyKeepsGrants(t *testing.T) {
	const ttl = 10 * time.Second
	all := []string{"a", "b", "c"}
	nw := newTestNet(t, func(c *Config) { withWait(c); c.LeaseTTL = ttl; c.SweepInterval = 640 * time.Millisecond }, all...)
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyOwnedBy(t, "a", all...)
	ad, l, granted := grantedLease(t, nw, a, c, key)
	grantedAt := nw.now
	nw.isolate("a")
	a.SetMembership(nw.now, []string{"a"}, []string{"b", "c"})
	nw.run(100 * time.Millisecond)
	nw.heal()
	a.SetMembership(nw.now, all, nil)
	s := a.st.shardOf(key)
	if a.st.lookup(s, key) != nil || a.dur.kept[key] == nil || s.strayGrants[key] == nil {
		t.Fatalf("a did not drop the key with its grants (kept: %v, stray: %v)", a.dur.kept[key] != nil, s.strayGrants[key] != nil)
	}
	ad.spendWhileStray(t, a, c, s, granted, grantedAt.Add(ttl), l, "the key's drop at a's return")
}
