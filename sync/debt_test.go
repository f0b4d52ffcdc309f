package sync

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// owedDuringCut checks key (owned by c) once in cached mode through a,
// then cuts c off and has a admit owed hits of it by local-share, which a
// then owes c (charge.go).
func owedDuringCut(t *testing.T, nw *testNet, key string, l bucket.Limit, owed int) check.Request {
	t.Helper()
	a := nw.nodes["a"]
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached, Policy: check.PolicyLocalShare}
	nw.checkAnswered(a, req)
	nw.run(300 * time.Millisecond) // a's view is synced
	nw.isolate("c")
	a.Unreachable(nw.now, "c")
	for range owed {
		if r := checkSync(t, a, nw.now, req); !r.Allowed || !r.Degraded {
			t.Fatalf("%+v: want a degraded admission", r)
		}
	}
	if got := a.owes(key); got != int64(owed) {
		t.Fatalf("a owes %d, want %d", got, owed)
	}
	return req
}

// TestRefusedDebtOwedAgain: the owner answers the flush that carries a
// debt with no state (an item it cannot apply: here its limit is lost on
// the way), so it applied none of it. The debt is owed again and drained
// with a later flush. Before, it stayed in transit, and the answer to the
// view's next flush of at least as many hits marked it paid: the owner's
// bucket never counted the 30 hits admitted without it (969 left of 1000
// after 1 + 30 hits flushed, where 939 were due).
func TestRefusedDebtOwedAgain(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	const owed = 30
	req := owedDuringCut(t, nw, key, perHour(1000), owed)
	nw.heal()
	tampered := false
	nw.drop = func(from, to string, env *peerv1.Envelope) bool {
		if tampered || from != "a" || to != "c" || env.GetFlush() == nil {
			return false
		}
		m := proto.Clone(env).(*peerv1.Envelope)
		for _, it := range m.GetFlush().Items {
			if it.Key == key && it.Hits > 0 {
				it.Limit, tampered = nil, true
			}
		}
		if tampered {
			nw.seq++
			nw.queue = append(nw.queue, &netMsg{at: nw.now.Add(nw.latency), seq: nw.seq, from: from, to: to, env: m})
		}
		return tampered
	}
	nw.run(a.cfg.UnreachableAfter + 50*time.Millisecond)
	if !tampered || c.Metrics().Malformed.Load() != 1 {
		t.Fatalf("tampered %v, Malformed %d at c: want the debt's flush refused once", tampered, c.Metrics().Malformed.Load())
	}
	req.Hits = owed
	if r := nw.checkAnswered(a, req); !r.Allowed {
		t.Fatalf("%+v: want the %d hits admitted", r, owed)
	}
	nw.run(500 * time.Millisecond)
	wantPaid(t, a, key, owed)
	// Refill of a 1000/h key over the test: under 1.
	if got, want := remainingOn(c, nw.now, key), int64(1000-1-owed-owed); got < want || got > want+1 {
		t.Errorf("owner remaining %d, want %d (1 + %d hits flushed, and the %d owed)", got, want, owed, owed)
	}
}

// wantPaid fails the test unless n owes nothing of key and drained
// PolicyHitsDrained hits in all.
func wantPaid(t *testing.T, n *Node, key string, drained int64) {
	t.Helper()
	if got := n.owes(key); got != 0 {
		t.Errorf("%s still owes %d", n.cfg.Self, got)
	}
	if got := n.Metrics().PolicyHitsDrained.Load(); got != drained {
		t.Errorf("PolicyHitsDrained %d, want %d", got, drained)
	}
}

// TestHotKeyDebtSent: a key checked so often that a flush of it is in
// flight at every tick still gets its debt sent. Before, the debt waited
// for a tick with no flush of the key in flight, which never came while
// the key stayed hot (2 s here, all 30 hits still owed at the end): the
// owner never counted them, and the node's budget took them off the view
// all along (unshown).
func TestHotKeyDebtSent(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	// 10000 tokens refilled every 100 ms: 100 a millisecond, above the
	// sync threshold (0.02 x 10000 / 3 = 66) that a check of 70 reaches.
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10000, Period: 100 * time.Millisecond}
	const owed = 30
	req := owedDuringCut(t, nw, key, l, owed)
	nw.heal()
	// a hears from c (its ticks send to a) between two of its own ticks;
	// the key is checked before a's next tick.
	for a.view.peers["c"].down(nw.now) {
		nw.deliver(nw.now.Add(time.Millisecond))
		nw.nodes["c"].Tick(nw.now)
	}
	req.Hits = 70
	s := a.st.shardOf(key)
	idle, rejected := 0, 0
	// 2 s, a check every millisecond, a tick every TickInterval (5 ms).
	for i := range 2000 {
		if r := checkSync(t, a, nw.now, req); !r.Allowed {
			rejected++
		}
		nw.deliver(nw.now.Add(time.Millisecond))
		if (i+1)%5 != 0 {
			continue
		}
		nw.tick()
		if e := a.st.lookupCached(s, key); e == nil || e.inFlight == 0 {
			idle++
		}
	}
	if idle > 0 {
		t.Fatalf("no flush of the key in flight at %d of 400 ticks: the key is not flushed back to back", idle)
	}
	t.Logf("%d of 2000 checks rejected; %d hits in transit, %d owed", rejected, a.inTransit(key), a.owes(key))
	wantPaid(t, a, key, owed)
}

// TestDroppedShownDebtCountedOnce: a debt's hits sit in the view's pending
// hits when the owner's state is installed in the view, which then shows
// them; they are then dropped unsent (dropDirty) and owed again. The view
// still shows them, so the budget does not count them again: not while
// they are owed, nor once they go with a flush again. Before, they were
// hidden again (30 of 30) until the next install, counted twice.
func TestDroppedShownDebtCountedOnce(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	const owed = 30
	owedDuringCut(t, nw, key, perHour(1000), owed)
	step := func(name string, wantHidden, wantUnsent int64) {
		t.Helper()
		if hidden, unsent := a.unshown(key); hidden != wantHidden || unsent != wantUnsent {
			t.Errorf("%s: unshown %d, %d; want %d, %d", name, hidden, unsent, wantHidden, wantUnsent)
		}
	}
	nw.heal()
	nw.deliver(nw.now.Add(a.cfg.UnreachableAfter + 10*time.Millisecond)) // no tick: nothing flushed
	a.tickCharges(nw.now, a.view)
	s, cs := a.st.shardOf(key), c.st.shardOf(key)
	e, o := a.st.lookupCached(s, key), c.st.lookupOwned(cs, key)
	if e == nil || o == nil || e.pending != owed {
		t.Fatalf("view %v, owned %v: want a view with the %d owed hits pending", e, o, owed)
	}
	step("pending, not shown", owed, 0)
	state, err := o.b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	a.installPush(nw.now, coarse(nw.now), e, &peerv1.KeyState{Key: key, State: state, Share: 0.5}, true)
	step("pending, the owner's state installed", 0, 0)
	a.dropDirty(a.view, a.view.peers["c"], 1)
	if e.pending != 0 || a.owes(key) != owed {
		t.Fatalf("pending %d, owes %d: want the pending hits dropped and the debt owed", e.pending, a.owes(key))
	}
	step("dropped, shown", 0, owed)
	a.tickCharges(nw.now, a.view)
	step("pending again, shown", 0, 0)
	nw.run(500 * time.Millisecond)
	wantPaid(t, a, key, owed)
	if got, want := remainingOn(c, nw.now, key), int64(1000-1-owed); got < want || got > want+1 {
		t.Errorf("owner remaining %d, want %d", got, want)
	}
}
