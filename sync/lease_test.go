package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestLeaseLifecycle walks a lease through grant, spending, renewal, expiry
// and return, checking the owner's accounting at each step.
func TestLeaseLifecycle(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	l := perMinute(600) // 10 a second
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}

	// t0: no lease, a cold key: the check is forwarded, no lease asked for.
	for i := range 2 {
		p := checkAsync(a, nw.now, req)
		if p.done {
			t.Fatalf("check %d: leased check without a lease did not wait for the owner", i)
		}
		nw.settle()
		if !p.done || !p.resps[0].Allowed {
			t.Fatalf("check %d: %+v, want admitted by the owner", i, p.resps[0])
		}
		// The first check leaves the key cold (no lease); the second,
		// a moment later, finds it warm and asks for one.
		if got, want := b.Metrics().LeasesGranted.Load(), int64(i); got != want {
			t.Fatalf("after check %d: %d leases granted, want %d", i, got, want)
		}
	}
	granted := b.Metrics().LeaseTokensGranted.Load()
	if granted < 1 {
		t.Fatalf("granted %d tokens, want at least one", granted)
	}
	// The owner consumed the grant at once: 600 - 2 (forwarded) - granted.
	if got := remainingOn(b, nw.now, key); got != 598-granted {
		t.Errorf("owner remaining %d, want %d", got, 598-granted)
	}

	// Spend the lease locally: no message per check.
	sent := nw.sent["forward"]
	spent := int64(0)
	for range granted {
		if r := checkSync(t, a, nw.now, req); r.Allowed {
			spent++
		}
	}
	if spent != granted || nw.sent["forward"] != sent {
		t.Errorf("spent %d of %d locally with %d forwards, want all, none", spent, granted, nw.sent["forward"]-sent)
	}
	// Half spent: a renewal was asked for; let it arrive.
	nw.run(10 * time.Millisecond)
	if got := a.Metrics().LeasesRenewed.Load() + b.Metrics().LeasesGranted.Load(); got < 2 {
		t.Errorf("no renewal after the lease was spent (renewed+granted %d)", got)
	}

	// Heavier traffic: the lease grows with the demand. A check the lease
	// does not cover goes to the owner (it is never rejected for want of a
	// lease), so it may wait for the network.
	var heavy []*pending
	for i := range 200 {
		heavy = append(heavy, checkAsync(a, nw.now, req))
		if i%5 == 4 {
			nw.run(5 * time.Millisecond)
		}
	}
	nw.settle()
	for i, p := range heavy {
		if !p.done || !p.resps[0].Allowed {
			t.Fatalf("heavy check %d: done %v, %+v: want admitted (200 checks in 200 ms of a key of 10/s after a burst of 600)", i, p.done, p.resps[0])
		}
	}
	// Stop: the unspent tokens expire after LeaseTTL and go back (found by
	// the store's sweep, which visits every shard within SweepInterval).
	nw.run(6 * time.Second)
	if got := b.Metrics().LeaseTokensReturned.Load(); got == 0 {
		t.Errorf("no lease tokens returned after expiry")
	}
	if !(b.Metrics().LeaseTokensGranted.Load() >= b.Metrics().LeaseTokensReturned.Load()) {
		t.Errorf("returned %d > granted %d", b.Metrics().LeaseTokensReturned.Load(), b.Metrics().LeaseTokensGranted.Load())
	}
}

// TestLeasedNeverOverInPartition: a node cut off from the owner spends only
// the lease it holds, then obeys the partition policy (fail-closed here);
// the cluster never admits more than one bucket.
func TestLeasedNeverOverInPartition(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.Policy = check.PolicyFailClosed }, "a", "b", "c")
	key := keyOwnedBy(t, "c", "a", "b", "c")
	l := perMinute(300)
	admitted := 0
	step := func(names ...string) {
		for _, name := range names {
			p := checkAsync(nw.nodes[name], nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased})
			nw.run(time.Millisecond)
			if p.done && p.resps[0].Allowed {
				admitted++
			}
		}
	}
	for range 300 {
		step("a", "b", "c")
	}
	nw.isolate("a")
	for range 300 {
		step("a", "b", "c")
	}
	nw.heal()
	for range 300 {
		step("a", "b", "c")
	}
	// 2700 checks over 2.7s: one bucket admits 300 + 2.7s * 5/s = 313.
	if admitted > 313 {
		t.Errorf("admitted %d, want at most 313", admitted)
	}
	if admitted < 250 {
		t.Errorf("admitted %d: far below the limit", admitted)
	}
}

// TestForgedLeaseReturn: a member that was granted no lease gives back 100
// tokens of a spent key (the attack of issue 16, which refilled the key):
// the owner refunds nothing and counts the tokens refused. A real grant
// is refunded once, up to what was granted.
func TestForgedLeaseReturn(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	l := perMinute(10)
	for range 10 {
		nw.checkAnswered(b, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
	}
	if got := remainingOn(b, nw.now, key); got != 0 {
		t.Fatalf("t0: remaining %d after 10 of 10, want 0", got)
	}
	forged := func(seq uint64, ret int64) {
		b.Step(nw.now, &peerv1.Envelope{From: "a", To: "b", Incarnation: a.cfg.Incarnation,
			Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: seq, Items: []*peerv1.FlushItem{
				{Key: key, Limit: limitToWire(l), LeaseReturn: ret}}}}})
	}
	forged(1000, 100)
	if got := remainingOn(b, nw.now, key); got != 0 {
		t.Errorf("after a forged return of 100: remaining %d, want 0 (the key stays spent)", got)
	}
	if got := b.Metrics().LeaseTokensRefused.Load(); got != 100 {
		t.Errorf("tokens refused %d, want 100", got)
	}
	if got := b.Metrics().LeaseTokensReturned.Load(); got != 0 {
		t.Errorf("tokens refunded %d, want 0", got)
	}
}

// TestGrantBook steps one peer's account of grants over fixed instants.
func TestGrantBook(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const mem = 10 * time.Second
	p := &peer{name: "a"}
	steps := []struct {
		name  string
		at    time.Duration
		grant int64 // granted on "k" at this step, before the return
		ret   int64 // returned on "k"
		want  int64 // refunded
	}{
		{"return with no grant", 0, 0, 5, 0},
		{"grant 5, return 7", 0, 5, 7, 5},
		{"the same tokens again", time.Second, 0, 5, 0},
		{"grant 3 and 4, return 2", 2 * time.Second, 7, 2, 2},
		{"return 5 of the 5 left", 3 * time.Second, 0, 5, 5},
		{"grant 4, return after the memory", 4 * time.Second, 4, 0, 0},
		{"late return", 4*time.Second + mem + 1, 0, 4, 0},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		p.recordGrant("k", s.grant, now, mem)
		if s.ret == 0 {
			continue
		}
		if got := p.takeReturn("k", s.ret, now, mem); got != s.want {
			t.Errorf("%s: refunded %d, want %d", s.name, got, s.want)
		}
	}
	if len(p.grants.m) != 0 {
		t.Errorf("book holds %v at the end, want nothing", p.grants.m)
	}
}

// TestLeasedNoFalseRejectionWhileRenewing: a lease that runs out while its
// renewal is on its way (a slow network, or owners slowed by load) sends
// the checks it cannot cover to the owner, which admits them: the key,
// 1000 a second, is nowhere near its limit. Before, each was rejected with
// a retry after FlushInterval: on 3 real nodes on 2 loaded cores, 62 of
// 240,000 checks of such keys (100 per call, 10,000 keys, c=8).
func TestLeasedNoFalseRejectionWhileRenewing(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(60000), Mode: check.ModeLeased}
	// Warm the key and get a lease.
	for range 3 {
		if r := nw.checkAnswered(a, req); !r.Allowed {
			t.Fatalf("warm-up: %+v", r)
		}
		nw.run(10 * time.Millisecond)
	}
	if a.Metrics().LeasesRenewed.Load()+nw.nodes["b"].Metrics().LeasesGranted.Load() == 0 {
		t.Fatal("no lease granted")
	}
	// Spend it with the network held: the renewal is asked for, and stays
	// on its way.
	var held []*pending
	for range 2000 {
		p := checkAsync(a, nw.now, req)
		held = append(held, p)
		if p.done && !p.resps[0].Allowed {
			t.Fatalf("check rejected while the lease's renewal was on its way: %+v", p.resps[0])
		}
	}
	nw.settle()
	for i, p := range held {
		if !p.done || !p.resps[0].Allowed || p.resps[0].Degraded {
			t.Fatalf("check %d: done %v, %+v: want admitted by the lease or the owner", i, p.done, p.resps[0])
		}
	}
}

// TestLeaseAskedAgainAfterEmptyGrant: a warm key's first grant may come
// empty from a bucket that has tokens, when the owner's fence holds it back
// until its backup target acknowledges room for it (fence.go). The
// non-owner then asks again with a later check; it used to forward every
// check of the key to the owner for good, never asking again (leased mode
// working as owner mode).
func TestLeaseAskedAgainAfterEmptyGrant(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	// A small key: the fence's reserve is one token (a tenth of the
	// capacity), so the first grant finds no room.
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 10 * time.Second}
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}
	for range 10 {
		nw.checkAnswered(a, req)
		nw.run(10 * time.Millisecond)
	}
	if got := b.Metrics().LeaseTokensGranted.Load(); got == 0 {
		t.Errorf("no lease token granted after 10 checks over 100 ms (leases granted %d)", b.Metrics().LeasesGranted.Load())
	}
	if l := a.st.shardOf(key).leases[key]; l == nil || l.last == 0 && l.avail() == 0 && !l.asking && !l.want {
		t.Errorf("a holds no lease and asks for none: %+v", l)
	}
}

// TestLeaseReportsSpendsOfLiveGrantsOnly: a holder reports the tokens it
// spent (FlushItem.lease_spent) only of grants with more than an eighth of
// their life left, so that the owner, which credits them to the holder's
// live grants oldest first, never credits spends of a grant it has let
// expire to a newer, unspent one (which would raise its cap by as much);
// and a report handed back unapplied is not restored, since it may have
// been applied.
func TestLeaseReportsSpendsOfLiveGrantsOnly(t *testing.T) {
	const ttl = time.Second
	now := t0
	l := &lease{cur: 10, curExp: now.Add(ttl).UnixNano()}
	if !l.spend(now.UnixNano(), 4) {
		t.Fatal("spend refused")
	}
	it := &peerv1.FlushItem{}
	l.fill(it, "o", now, ttl)
	if it.LeaseSpent != 4 {
		t.Errorf("reported %d spent of a fresh grant, want 4", it.LeaseSpent)
	}
	l.unfill(it)
	it2 := &peerv1.FlushItem{}
	l.fill(it2, "o", now, ttl)
	if it2.LeaseSpent != 0 {
		t.Errorf("a report handed back was reported again: %d", it2.LeaseSpent)
	}
	late := now.Add(ttl - ttl/10) // a tenth of its life left
	if !l.spend(late.UnixNano(), 3) {
		t.Fatal("spend refused")
	}
	it3 := &peerv1.FlushItem{}
	l.fill(it3, "o", late, ttl)
	if it3.LeaseSpent != 0 {
		t.Errorf("reported %d spent of a grant about to expire, want 0", it3.LeaseSpent)
	}
}

// grantReturnScene is the start of TestLateReturnAfterFullBucket and
// TestSettledGrantFreesLaterReturns: b owns key, a key of 50 per 5 s, on
// the net {a, b}. flush steps at b a flush from a of one item of key (its
// next seq); own has b admit n checks of its own, each one a hit.
func grantReturnScene(t *testing.T) (nw *testNet, a, b *Node, key string, flush func(*peerv1.FlushItem), own func(n int)) {
	nw = newTestNet(t, nil, "a", "b")
	a, b = nw.nodes["a"], nw.nodes["b"]
	key = keyOwnedBy(t, "b", "a", "b")
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 50, Period: 5 * time.Second}
	seq := uint64(0)
	flush = func(it *peerv1.FlushItem) {
		seq++
		it.Key, it.Limit = key, limitToWire(l)
		b.Step(nw.now, &peerv1.Envelope{From: "a", To: "b", Incarnation: a.cfg.Incarnation,
			Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: seq, Items: []*peerv1.FlushItem{it}}}})
	}
	own = func(n int) {
		for range n {
			if r := nw.checkAnswered(b, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}); !r.Allowed {
				t.Fatalf("owner's check rejected: %+v", r)
			}
		}
	}
	return nw, a, b, key, flush, own
}

// TestLateReturnAfterFullBucket: a lease's tokens given back long after
// the grant, when the owner's bucket has been full since (the fault
// checker's leased seed 758: a holder's lease outlived by a 3.9 s
// isolation of the owner, its 6 unspent tokens returned on the next
// flush), are not refunded: a full bucket would have dropped them. b owns
// a key of 50 per 5 s; a is granted a lease, b's bucket refills to full
// over 6 s, a is granted a second lease, b admits 10 of its own, and a
// gives back both grants. The second grant's tokens are refunded at its
// expiry (leasecap.go); the first's never. The owner's book of a's grants
// kept the bound of the latest grant only (recordGrant replaced the
// entry): the first grant's tokens were refunded at once, 4 above the
// bucket's envelope (29 tokens left for 25). The flushes here name no
// settled grant (an older holder): the owner credits the tokens to a's
// grants oldest first.
func TestLateReturnAfterFullBucket(t *testing.T) {
	nw, _, b, key, flush, own := grantReturnScene(t)
	nw.run(time.Second) // b holds its owner lease (ownerlease.go)
	own(1)              // the key warm at b, its backup at a acknowledged
	nw.run(100 * time.Millisecond)
	before := remainingOn(b, nw.now, key)
	flush(&peerv1.FlushItem{LeaseWant: 20, Demand: 1, Rate: 1})
	g1 := before - remainingOn(b, nw.now, key)
	nw.run(6 * time.Second)
	if got := remainingOn(b, nw.now, key); got != 50 {
		t.Fatalf("after 6 s: remaining %d, want 50 (full)", got)
	}
	own(1)
	nw.run(100 * time.Millisecond)
	before = remainingOn(b, nw.now, key)
	flush(&peerv1.FlushItem{LeaseWant: 20, Demand: 1, Rate: 1})
	g2 := before - remainingOn(b, nw.now, key)
	if g1 <= 0 || g2 <= 1 {
		t.Fatalf("granted %d then %d, want both > 1", g1, g2)
	}
	own(10)
	want := remainingOn(b, nw.now, key)
	flush(&peerv1.FlushItem{LeaseReturn: g1 + g2})
	if got := remainingOn(b, nw.now, key); got != want {
		t.Errorf("after %d then %d granted, 10 admitted and both given back: remaining %d, want %d (the first grant's tokens dropped by the full bucket)", g1, g2, got, want)
	}
}

// grantIDOf returns the id of the latest grant the owner n made on key
// (its expiry there), or 0.
func grantIDOf(n *Node, key string) int64 {
	e := n.st.lookupOwned(n.st.shardOf(key), key)
	if e == nil || e.gr == nil || len(e.gr.live) == 0 {
		return 0
	}
	gs := e.gr.live
	return gs[len(gs)-1].exp
}

// TestSettledGrantFreesLaterReturns: a holder that names a grant settled
// (FlushItem.lease_settled: it holds none of it, what it did not give back
// it spent) has the owner forget it, so that tokens given back of a later
// grant are judged by that grant alone. b owns a key of 50 per 5 s; a is
// granted a lease, b's bucket refills to full over 6 s (the first grant is
// late at b, its bound the full bucket), b admits 40 of its own, a is
// granted a second lease and settles the first, and after the second
// expires gives its tokens back: all are refunded (the bucket held about
// 20 since). Credited oldest first to the first grant, as with no
// settlement, none would be: the session 13 fix for seed 758, which kept
// one bound per holder and key from its oldest grant, cost leased
// apikey-100h's false rejections 1.50% -> 4.40% so.
func TestSettledGrantFreesLaterReturns(t *testing.T) {
	nw, a, b, key, flush, own := grantReturnScene(t)
	nw.run(time.Second)
	own(1)
	nw.run(100 * time.Millisecond)
	flush(&peerv1.FlushItem{LeaseWant: 20, Demand: 1, Rate: 1})
	id1 := grantIDOf(b, key)
	nw.run(6 * time.Second)
	if got := remainingOn(b, nw.now, key); got != 50 {
		t.Fatalf("after 6 s: remaining %d, want 50 (full)", got)
	}
	own(40)
	nw.run(100 * time.Millisecond) // b's backup of the key acknowledged: room to grant (fence.go)
	before := remainingOn(b, nw.now, key)
	flush(&peerv1.FlushItem{LeaseWant: 20, Demand: 100, Rate: 100}) // a's share of the demand: most of it
	g2 := before - remainingOn(b, nw.now, key)
	id2 := grantIDOf(b, key)
	if id1 == 0 || id2 <= id1 || g2 <= 1 {
		t.Fatalf("second grant %d (ids %d, %d), want two grants, the second of 2 or more", g2, id1, id2)
	}
	flush(&peerv1.FlushItem{LeaseSettled: id1})
	nw.run(a.cfg.LeaseTTL + 100*time.Millisecond)
	want := remainingOn(b, nw.now, key) + g2
	flush(&peerv1.FlushItem{LeaseReturn: g2, LeaseSettled: id2})
	if got := remainingOn(b, nw.now, key); got != want {
		t.Errorf("the second grant's %d tokens given back after the first was settled: remaining %d, want %d", g2, got, want)
	}
}

// TestLeaseSettlesItsGrants: a holder names the owner's grants it holds no
// more (FlushItem.lease_settled) once, to their owner only: one spent out,
// then one expired with its unspent tokens given back in the same item,
// again after a flush handed back unapplied, and not to another owner.
func TestLeaseSettlesItsGrants(t *testing.T) {
	const ttl = time.Second
	now := t0
	l := &lease{}
	l.grant(now, 3, 100, "o", now, ttl, &Metrics{})
	l.grant(now, 2, 200, "o", now, ttl, &Metrics{})
	if !l.spend(now.UnixNano(), 3) {
		t.Fatal("spend refused")
	}
	it := &peerv1.FlushItem{}
	l.fill(it, "o", now, ttl)
	if it.LeaseSettled != 100 || it.LeaseReturn != 0 {
		t.Errorf("after the first grant spent out: settled %d, returned %d; want 100, 0", it.LeaseSettled, it.LeaseReturn)
	}
	it = &peerv1.FlushItem{}
	l.fill(it, "o", now, ttl)
	if it.LeaseSettled != 0 {
		t.Errorf("settled %d again, want 0 (reported once)", it.LeaseSettled)
	}
	later := now.Add(ttl)
	it = &peerv1.FlushItem{}
	l.fill(it, "o", later, ttl)
	if it.LeaseSettled != 200 || it.LeaseReturn != 2 {
		t.Errorf("after the second expired: settled %d, returned %d; want 200, 2", it.LeaseSettled, it.LeaseReturn)
	}
	l.unfill(it)
	it = &peerv1.FlushItem{}
	l.fill(it, "o", later, ttl)
	if it.LeaseSettled != 200 || it.LeaseReturn != 2 {
		t.Errorf("after a flush handed back: settled %d, returned %d; want 200, 2", it.LeaseSettled, it.LeaseReturn)
	}
	l.unfill(it)
	it = &peerv1.FlushItem{}
	l.fill(it, "p", later, ttl)
	if it.LeaseSettled != 0 || it.LeaseReturn != 2 {
		t.Errorf("to another owner: settled %d, returned %d; want 0, 2", it.LeaseSettled, it.LeaseReturn)
	}
}
