package sync

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestLateViewChargedAfterTakeover is TestOwnerKilledMidKey's traced
// interleaving at the sync level: a key of 1000 an hour, 500 spent
// through a, b and its owner c; then c's backups and pushes to b are lost
// while a spends lag more through c (c applies them and answers a: a's
// view shows them, b's view and c's backup with b do not); c crashes; b
// takes the key over from that backup and decides checks before a's view
// reaches it; then a checks, and its flush carries its view of c's state.
// The view shows lag more consumed than the state b started from: b
// charges them (lateview.go). Before, b merged the view keeping the most
// consumed, which changed nothing once b had decided past it, and the lag
// was admitted twice (1030 of 1000 with a lag of 30). A SlidingLog key's
// merge counts the view's entries itself (the union of the logs): charged
// on top, the lag was drained twice (971 admitted of 1000, mergeView).
func TestLateViewChargedAfterTakeover(t *testing.T) {
	const limit, spent = 1000, 500
	members, survivors := []string{"a", "b", "c"}, []string{"a", "b"}
	key := keyMoving(t, "c", "b", members, survivors)
	for _, tc := range []struct {
		pol     check.Policy
		lag     int // hits a spends through c that b's backup and view miss
		byOwner int // checks b decides before a's view arrives
		alg     bucket.Algorithm
	}{
		{check.PolicyFailClosed, 30, 200, bucket.TokenBucket},
		{check.PolicyLocalShare, 30, 200, bucket.TokenBucket},
		{check.PolicyFailClosed, 30, 0, bucket.TokenBucket},  // the view arrives first: the merge alone counts it
		{check.PolicyFailClosed, 0, 200, bucket.TokenBucket}, // no lag: nothing to charge
		{check.PolicyFailClosed, 30, 200, bucket.SlidingLog}, // the merge counts the view's entries: nothing to charge on top
		{check.PolicyFailClosed, 30, 200, bucket.FixedWindow},
	} {
		t.Run(fmt.Sprintf("%v/%v/lag %d/%d by b first", tc.alg, tc.pol, tc.lag, tc.byOwner), func(t *testing.T) {
			nw := newTestNet(t, withWait, members...)
			a, b, c := nw.nodes["a"], nw.nodes["b"], nw.nodes["c"]
			l := perHour(limit)
			l.Algorithm = tc.alg
			req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached, Policy: tc.pol}
			admitted := 0
			try := func(n *Node) {
				if r := nw.checkAnswered(n, req); r.Allowed {
					admitted++
				}
			}
			nw.spendInTurn(try, &admitted, spent, a, b, c)
			nw.drop = func(from, to string, env *peerv1.Envelope) bool {
				return from == "c" && to == "b" && (bodyName(env) == "push" || bodyName(env) == "backup")
			}
			nw.lagThenCrash(try, a, tc.lag, survivors, "a", "b") // b confirms the takeover and decides (cached mode)
			started := remainingOn(b, nw.now, key)
			for range tc.byOwner {
				try(b)
				nw.run(time.Millisecond)
			}
			try(a)                         // its flush reports its view of c's state
			nw.run(250 * time.Millisecond) // a flush interval and a tick
			if mk := b.late[key]; mk == nil || !slices.Contains(mk.shown, "a") {
				t.Errorf("b's mark of the key does not name a as sent its state, after answering its flush")
			}
			nw.run(time.Second)
			for i := range 2000 {
				try([]*Node{a, b}[i%2])
				nw.run(time.Millisecond)
			}
			charged := b.Metrics().LateViewHits.Load()
			t.Logf("b started from %d left (c had %d), charged %d from a's late view; %d admitted in all",
				started, limit-spent-tc.lag, charged, admitted)
			// A 1000/h key refills about one token over the run's 4.5 s.
			if admitted > limit+1 || admitted < limit-1 {
				t.Errorf("%d admitted in all, want %d (±1)", admitted, limit)
			}
		})
	}
}

// TestLateViewChargesMostOverViews steps the views of a failed owner's
// state that reach b, which took its key over from a state with 500 left:
// each is charged only what it shows beyond the start and the views and
// states before it (the most over them, not their sum); a member b sent
// the key's state to is never charged; nor is any view once the mark
// lapsed.
func TestLateViewChargesMostOverViews(t *testing.T) {
	nw, b, key, left := takenOverFromC(t, []string{"a", "b", "c"})
	for _, st := range []struct {
		name  string
		from  string
		shown bool          // from is sent the key's state first
		state bucket.Bucket // merged as a hand-off would be, instead of a view
		after time.Duration // run first
		view  int64         // consumed the view shows
		want  int64         // charged
	}{
		{name: "a view 30 ahead", from: "a", view: 530, want: 30},
		{name: "an older view", from: "a", view: 520, want: 0},
		{name: "a later view", from: "a", view: 545, want: 15},
		{name: "a state merged, then a view as far", from: "a", state: left(560), view: 560, want: 0},
		{name: "a view from a member shown the state", from: "d", shown: true, view: 600, want: 0},
		{name: "a view 5 beyond, from another", from: "e", view: 565, want: 5},
		{name: "a view after the mark lapsed", from: "a", after: 3 * time.Second, view: 700, want: 0},
	} {
		nw.run(st.after)
		if st.shown {
			mk := b.late[key]
			if mk == nil {
				t.Fatalf("%s: the mark is gone", st.name)
			}
			mk.shown = append(mk.shown, st.from)
		}
		if st.state != nil {
			b.lateMerged(b.bt(nw.now), key, st.state)
		}
		if got := b.lateBeyond(b.bt(nw.now), key, st.from, left(st.view)); got != st.want {
			t.Errorf("%s: charged %d, want %d", st.name, got, st.want)
		}
	}
}

// TestLateViewSlidingCounterChargedOnce: a SlidingCounter key of 100 per
// 10 s taken over from a backup with 40 in the window before the current
// one; the failed owner's state a survivor reports holds 60 there and 10
// in the current window; the new owner has admitted 30 since. At 1 s into
// the window the key holds 0.9 x 60 + 10 + 30 = 94: 6 left. The view
// shows 0.9 x 20 + 10 = 28 beyond the start; the merge raises the
// previous window to 60 itself (18 of them), so only 10 are charged.
// Before mergeView, all 28 were drained into the current window and the
// merge then raised the previous one too: 18 counted twice, 0 left.
func TestLateViewSlidingCounterChargedOnce(t *testing.T) {
	nw := newTestNet(t, nil, "b")
	b := nw.nodes["b"]
	l := bucket.Limit{Algorithm: bucket.SlidingCounter, Limit: 100, Period: 10 * time.Second}
	w := time.Unix(1_000_000_000, 0)                                     // a window's start
	state := func(before, after int64, at time.Duration) bucket.Bucket { // as seen at w + at
		t.Helper()
		s, err := bucket.New(l, w.Add(-2*time.Second))
		if err != nil || s.Drain(w.Add(-time.Second), before) != nil || s.Drain(w.Add(at), after) != nil {
			t.Fatal(err)
		}
		return s
	}
	key := "k"
	start := state(40, 0, -time.Second)         // the backup: 40 in the previous window
	live := state(40, 30, 500*time.Millisecond) // and this owner's admissions since
	view := state(60, 10, 500*time.Millisecond) // 60 in the previous window, 10 in this one
	b.late = map[string]*lateStart{key: {seen: start, until: w.Add(time.Minute)}}
	e := &ownedKey{}
	e.b = live
	at := w.Add(time.Second)
	charged := b.mergeView(at, key, "a", e, view)
	d, err := e.b.Take(at, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("charged %d, %d left", charged, d.Remaining)
	if charged != 10 || d.Remaining != 6 {
		t.Errorf("charged %d, %d left; want 10 charged, 6 left (0.9 x 60 + 10 + 30 = 94 used)", charged, d.Remaining)
	}
}

// TestLateViewChargedWithoutStart: b takes over c's key with no state of
// it (c's backups and pushes to b lost, b never checked it), so it starts
// the key from the first survivor's view, a's; d spent 30 more through c
// than a's view shows, and d's view reaches b only after b decided 200
// checks. The key is marked as it starts (lateNew) and d's view is charged
// the 30 beyond a's. Before, only keys b held a state of at the
// membership change were marked: d's view merged as a no-op and the 30
// were admitted twice (1031 of 1000).
func TestLateViewChargedWithoutStart(t *testing.T) {
	const limit, spent, lag = 1000, 500, 30
	members, survivors := []string{"a", "b", "c", "d"}, []string{"a", "b", "d"}
	key := keyMoving(t, "c", "b", members, survivors)
	for _, pol := range []check.Policy{check.PolicyLocalShare, check.PolicyFailClosed} {
		t.Run(pol.String(), func(t *testing.T) {
			nw := newTestNet(t, withWait, members...)
			a, b, d := nw.nodes["a"], nw.nodes["b"], nw.nodes["d"]
			req := check.Request{Key: key, Hits: 1, Limit: perHour(limit), Mode: check.ModeCached, Policy: pol}
			admitted := 0
			try := func(n *Node) {
				if r := nw.checkAnswered(n, req); r.Allowed {
					admitted++
				}
			}
			nw.drop = func(from, to string, env *peerv1.Envelope) bool {
				return from == "c" && to == "b" && (bodyName(env) == "push" || bodyName(env) == "backup")
			}
			nw.spendInTurn(try, &admitted, spent, a, d, nw.nodes["c"])
			nw.lagThenCrash(try, d, lag, survivors, "a", "b", "d")
			if isOwned(b, key) {
				t.Fatal("b holds a state of the key before any survivor's view")
			}
			try(a) // b starts the key from a's view
			nw.run(250 * time.Millisecond)
			for range 200 {
				try(b)
				nw.run(time.Millisecond)
			}
			try(d) // its view shows the lag beyond a's
			nw.run(1250 * time.Millisecond)
			for i := range 2000 {
				try([]*Node{a, b, d}[i%3])
				nw.run(time.Millisecond)
			}
			charged := b.Metrics().LateViewHits.Load()
			t.Logf("charged %d from d's late view; %d admitted in all", charged, admitted)
			if charged != lag || admitted > limit+1 || admitted < limit-1 {
				t.Errorf("%d charged, %d admitted in all; want %d charged, %d (±1) admitted", charged, admitted, lag, limit)
			}
		})
	}
}

// lagThenCrash has by spend lag checks through c (try), lets c apply them
// and answer by, then crashes c, the survivors dropping it on the nodes
// on, and runs 500 ms: the new owner confirms the takeover.
func (nw *testNet) lagThenCrash(try func(*Node), by *Node, lag int, survivors []string, on ...string) {
	for range lag {
		try(by)
		nw.run(time.Millisecond)
	}
	nw.run(150 * time.Millisecond)
	nw.isolate("c")
	nw.nodes["c"] = nil // crashed
	nw.drop = nil
	nw.failNode(survivors, []string{"c"}, on...)
	nw.run(500 * time.Millisecond)
}

// TestLateMarkNamesEveryMemberShown: in a cluster of 23, b takes a key
// over from c, which crashed, and sends the key's state to 20 survivors
// (their flushes register interest): the mark names them all, so none of
// their views is charged, while a, never sent the state, is charged what
// its view shows beyond the start. Before, the 17th member shown dropped
// the mark, and every late view merged as before: the failed owner's
// admissions a's view showed were admitted again. The marks' charge to
// the byte budget is given back when they lapse.
func TestLateMarkNamesEveryMemberShown(t *testing.T) {
	members := []string{"a", "b", "c"}
	for i := range 20 {
		members = append(members, fmt.Sprintf("n%02d", i))
	}
	nw, b, key, view := takenOverFromC(t, members)
	mk := b.late[key]
	shown := 0
	for m, name := range b.view.names {
		if strings.HasPrefix(name, "n") {
			b.lateShown(key, m)
			shown++
		}
	}
	if b.late[key] != mk || len(mk.shown) != shown {
		t.Fatalf("after %d members shown the state, the mark is %v with %d named; want it kept, naming all", shown, b.late[key] != nil, len(mk.shown))
	}
	var charged int64
	for _, m := range b.late {
		charged += lateCharge(m)
	}
	if b.lateBytes != charged || charged <= lateBase {
		t.Errorf("marks charged %d bytes, want %d (more than a mark with no list, %d)", b.lateBytes, charged, lateBase)
	}
	if got := b.lateBeyond(b.bt(nw.now), key, "n19", view(560)); got != 0 {
		t.Errorf("a view from the 20th member shown the state charged %d, want 0", got)
	}
	if got := b.lateBeyond(b.bt(nw.now), key, "a", view(530)); got != 30 {
		t.Errorf("a view 30 beyond the start from a member never shown the state charged %d, want 30", got)
	}
	nw.run(3 * time.Second)
	b.sweepLate(b.bt(nw.now))
	if len(b.late) != 0 || b.lateBytes != 0 {
		t.Errorf("after the marks lapsed: %d marks, %d bytes charged; want none", len(b.late), b.lateBytes)
	}
}

// takenOverFromC returns a network of members where c admitted 500 of a
// key of 1000 an hour that b takes over when c crashes (backed up with b
// first), b, the key, and a function that returns a state of the key with
// 1000 - spent left now; b has marked the key's late start.
func takenOverFromC(t *testing.T, members []string) (*testNet, *Node, string, func(spent int64) bucket.Bucket) {
	t.Helper()
	survivors := slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == "c" })
	key := keyMoving(t, "c", "b", members, survivors)
	nw := newTestNet(t, withWait, members...)
	b := nw.nodes["b"]
	req := check.Request{Key: key, Hits: 500, Limit: perHour(1000), Mode: check.ModeCached, Policy: check.PolicyFailClosed}
	if r := nw.checkAnswered(nw.nodes["c"], req); !r.Allowed {
		t.Fatal("500 not admitted at c")
	}
	nw.run(300 * time.Millisecond) // backed up with b, pushed
	nw.isolate("c")
	nw.nodes["c"] = nil
	nw.failNode(survivors, []string{"c"}, survivors...)
	nw.run(100 * time.Millisecond)
	if b.late[key] == nil {
		t.Fatal("b marked no late start for the key it took over")
	}
	left := func(spent int64) bucket.Bucket {
		t.Helper()
		at := b.bt(nw.now)
		s, err := bucket.New(perHour(1000), at)
		if err != nil || s.Drain(at, spent) != nil {
			t.Fatal(err)
		}
		return s
	}
	return nw, b, key, left
}
