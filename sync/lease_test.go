package sync

import (
	"testing"
	"time"
)

// TestLeaseLifecycle walks a lease through grant, spending, renewal, expiry
// and return, checking the owner's accounting at each step.
func TestLeaseLifecycle(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	l := perMinute(600) // 10 a second
	req := Request{Key: key, Hits: 1, Limit: l, Mode: ModeLeased}

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
		if r := check(t, a, nw.now, req); r.Allowed {
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

	// Heavier traffic: the lease grows with the demand.
	for i := range 200 {
		check(t, a, nw.now.Add(time.Duration(i)*time.Millisecond), req)
		if i%5 == 0 {
			nw.run(5 * time.Millisecond)
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
	nw := newTestNet(t, func(c *Config) { c.Policy = PolicyFailClosed }, "a", "b", "c")
	key := keyOwnedBy(t, "c", "a", "b", "c")
	l := perMinute(300)
	admitted := 0
	step := func(names ...string) {
		for _, name := range names {
			p := checkAsync(nw.nodes[name], nw.now, Request{Key: key, Hits: 1, Limit: l, Mode: ModeLeased})
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
