package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestCrashedOwnerViewHitsCountedOnce is TestOwnerKilledMidKey's cached,
// fail-closed case at the sync level, with the interleavings its real
// nodes allow: a key of 1000 an hour, 500 spent through a, b and its owner
// c; c crashes; b (c's backup holder, the key's next owner) and a detect it
// at different times, and the one that has not detected it yet admits from
// its view meanwhile, up to its share of what is left; then both drop c,
// one before the other, and 2000 more checks go through a and b. The
// cluster admits one bucket, less at most the hits of one flush whose
// answer the crash lost (lost reply: c applied the flush, and its state
// reached b, but a, with no answer, sends the hits again: at-least-once,
// which b cannot tell from hits c never saw), and at most cached mode's
// drift above it.
//
// A survivor's view includes its own hits not yet confirmed by an owner,
// and the new owner merges states keeping the most consumed. Before, both
// ends lost or doubled those hits in the merge:
//
//   - a's flush to b carried its view (it came from another owner:
//     flagMoved) along with those hits; b merged the view, then applied the
//     hits again. a's hits admitted during the detection were counted
//     twice, less what b admitted meanwhile: 835 in all when a admitted its
//     166 and b none (840 once in CI, 167 of them during the detection);
//   - b restored c's backup into its own view, keeping the most consumed:
//     when the backup was ahead of b's view (a's last hits, backed up by c
//     but not pushed to b, unseen below), b's own admissions during the
//     detection were lost, up to that lead: 1064 in all with a lead of 60.
func TestCrashedOwnerViewHitsCountedOnce(t *testing.T) {
	const limit, spent = 1000, 500
	members, survivors := []string{"a", "b", "c"}, []string{"a", "b"}
	key := keyMoving(t, "c", "b", members, survivors)
	for _, tc := range []struct {
		detects   string // the survivor that finds c unreachable at once; the other only by its flush's timeout
		checks    int    // checks each survivor decides after the crash, one pair per ms
		learns    string // the survivor that drops c first, 100 ms before the other
		lostReply bool   // c applies a flush of a's, and its answer is lost
		unseen    int    // hits a spends before the crash that c backs up with b but does not push to b
	}{
		{detects: "b", checks: 400, learns: "b"}, // the CI run: a spends its share unseen
		{detects: "b", checks: 400, learns: "a"},
		{detects: "b", checks: 50, learns: "b"},
		{detects: "b", checks: 5, learns: "b"},
		{detects: "a", checks: 400, learns: "b"},
		{detects: "b", checks: 0, learns: "b", lostReply: true},
		{detects: "b", checks: 400, learns: "b", lostReply: true},
		{detects: "b", checks: 400, learns: "a", lostReply: true},
		{detects: "a", checks: 400, learns: "b", unseen: 60}, // b spends its share on a stale view
		{detects: "a", checks: 400, learns: "a", unseen: 60},
		{detects: "a", checks: 10, learns: "b", unseen: 20},
	} {
		name := fmt.Sprintf("%s detects/%d checks/%s learns/lost reply %v/%d unseen", tc.detects, tc.checks, tc.learns, tc.lostReply, tc.unseen)
		t.Run(name, func(t *testing.T) {
			nw := newTestNet(t, withWait, members...)
			a, b, c := nw.nodes["a"], nw.nodes["b"], nw.nodes["c"]
			req := check.Request{Key: key, Hits: 1, Limit: perHour(limit), Mode: check.ModeCached, Policy: check.PolicyFailClosed}
			admitted := 0
			try := func(n *Node) {
				if r := nw.checkAnswered(n, req); r.Allowed {
					admitted++
				}
			}
			nw.spendInTurn(try, &admitted, spent, a, b, c)
			if tc.unseen > 0 {
				nw.drop = func(from, to string, env *peerv1.Envelope) bool {
					return from == "c" && to == "b" && bodyName(env) == "push"
				}
				for range tc.unseen {
					try(a)
					nw.run(time.Millisecond)
				}
				nw.run(150 * time.Millisecond) // c applies a's hits and backs them up with b
			}
			var replayed int64 // hits of a's flush that c applied and a never heard of
			if tc.lostReply {
				nw.drop = func(from, to string, _ *peerv1.Envelope) bool { return from == "c" && to == "a" }
				for range 40 {
					try(a)
				}
				f := a.view.peers["c"].flight
				if f == nil {
					t.Fatal("no flush of a's in flight to c")
				}
				for _, it := range f.msg.Items {
					replayed += it.Hits
				}
				nw.run(150 * time.Millisecond) // c applies it, pushes to b, backs it up
				if got := c.view.peers["a"].inSeq; got < f.msg.Seq {
					t.Fatalf("c applied a's flushes up to %d, want %d", got, f.msg.Seq)
				}
			}
			before := admitted
			nw.isolate("c")
			nw.nodes["c"] = nil // crashed
			nw.nodes[tc.detects].Unreachable(nw.now, "c")
			for range tc.checks {
				try(a)
				try(b)
				nw.run(time.Millisecond)
			}
			nw.run(time.Second)
			during := admitted - before
			other := map[string]string{"a": "b", "b": "a"}[tc.learns]
			nw.nodes[tc.learns].SetMembership(nw.now, survivors, []string{"c"})
			nw.run(100 * time.Millisecond)
			nw.nodes[other].SetMembership(nw.now, survivors, []string{"c"})
			nw.run(time.Second)
			for i := range 2000 {
				try([]*Node{a, b}[i%2])
				nw.run(time.Millisecond)
			}
			// A 1000/h key refills about one token over the run's 4 s.
			least, most := limit-int(replayed)-1, limit+25
			t.Logf("%d admitted before the crash, %d during the detection, %d after: %d in all (%d hits replayed); want %d to %d",
				before, during, admitted-before-during, admitted, replayed, least, most)
			if admitted < least || admitted > most {
				t.Errorf("%d admitted in all, want %d to %d", admitted, least, most)
			}
		})
	}
}

// TestShareHitsCountedInViewAfterMarkLapses is TestOwnerKilledMidKey's
// cached, local-share case at the sync level, with the timing its loaded
// runs had: a key of 1000 an hour, 500 spent through a, b and its owner
// c; c crashes; a and b find it unreachable (their sends fail) and admit
// by local-share, each on a share started from its view (limit / 3 of
// the view's 500, 166), charged as a debt; then the unreachable mark
// (UnreachableAfter, 1 s) lapses before the failure detection has
// dropped c (over 1.1 s on loaded cores, 0.7 s idle), and checks come
// in before a failed send marks c down again. In that window cached mode
// decides on the view again. A survivor's debt is hits it admitted that
// its view does not show (the view holds the owner's last state, less the
// node's own cached admissions): before, the budget rule ignored it, and
// each survivor admitted its share of the view a second time, about 160,
// which the new owner was charged afterwards, into debt (1163 to 1176 of
// 1000 in 3 of 110 loaded runs of TestOwnerKilledMidKey; here 1158, and
// 156 on each view after the lapse; now 1000, and 0). With a flush of
// each survivor's in flight at the crash (its answer lost, kept in flight
// for RequestTimeout) the debt cannot go to the owner (tickCharges waits
// for the flight); without one it goes as pending hits the view does not
// show either (before: 56 on each view, charged before the new owner
// spent them, 1000 in all; now 0).
func TestShareHitsCountedInViewAfterMarkLapses(t *testing.T) {
	const limit, spent = 1000, 500
	members, survivors := []string{"a", "b", "c"}, []string{"a", "b"}
	key := keyMoving(t, "c", "b", members, survivors)
	patient := func(cfg *Config) {
		withWait(cfg)
		cfg.RequestTimeout = 5 * time.Second // the root test's patientTimeouts
		cfg.OwnerLeaseTTL = 10 * time.Second
	}
	for _, tc := range []struct {
		name     string
		tweak    func(*Config)
		inFlight bool // a and b each have a flush in flight to c when it crashes
		window   int  // checks each survivor decides between the mark's lapse and the next failed send, one pair per ms
	}{
		{name: "flights lost, patient timeouts", tweak: patient, inFlight: true, window: 200},
		{name: "no flight, patient timeouts", tweak: patient, window: 200},
		{name: "no flight, default timeouts", tweak: withWait, window: 200},
		{name: "flights lost, short window", tweak: patient, inFlight: true, window: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, tc.tweak, members...)
			a, b, c := nw.nodes["a"], nw.nodes["b"], nw.nodes["c"]
			req := check.Request{Key: key, Hits: 1, Limit: perHour(limit), Mode: check.ModeCached, Policy: check.PolicyLocalShare}
			admitted, degraded := 0, 0
			try := func(n *Node) {
				r := nw.checkAnswered(n, req)
				if r.Allowed {
					admitted++
					if r.Degraded {
						degraded++
					}
				}
			}
			nw.spendInTurn(try, &admitted, spent, a, b, c)
			nw.isolate("c")
			nw.nodes["c"] = nil // crashed
			if tc.inFlight {
				for range 10 {
					try(a)
					try(b)
				}
				nw.run(a.cfg.FlushInterval)
				if a.view.peers["c"].flight == nil || b.view.peers["c"].flight == nil {
					t.Fatal("no flush in flight to c")
				}
			}
			down := func() {
				for _, n := range []*Node{a, b} {
					n.Unreachable(nw.now, "c") // the driver's failed sends
				}
			}
			down()
			marked := nw.now
			before := admitted
			for range 400 {
				try(a)
				try(b)
				nw.run(time.Millisecond)
			}
			share := admitted - before
			nw.run(marked.Add(a.cfg.UnreachableAfter).Sub(nw.now) + time.Millisecond)
			lapsed := admitted
			for range tc.window {
				try(a)
				try(b)
				nw.run(time.Millisecond)
			}
			afterLapse := admitted - lapsed
			down()
			b.SetMembership(nw.now, survivors, []string{"c"})
			nw.run(100 * time.Millisecond)
			a.SetMembership(nw.now, survivors, []string{"c"})
			nw.run(time.Second)
			during := admitted - before
			for i := range 2000 {
				try([]*Node{a, b}[i%2])
				nw.run(time.Millisecond)
			}
			// A 1000/h key refills about one token over the run's 4 s.
			least, most := limit-limit/10-50, limit+25
			t.Logf("%d admitted before the crash, %d by local-share (%d degraded), %d on the views after the mark lapsed, %d during the detection, %d after: %d in all; want %d to %d",
				before, share, degraded, afterLapse, during, admitted-before-during, admitted, least, most)
			if admitted < least || admitted > most {
				t.Errorf("%d admitted in all, want %d to %d", admitted, least, most)
			}
			// Each survivor's local share was its share of the view: its
			// budget on the view is spent (a hit of rounding each).
			if afterLapse > 2 {
				t.Errorf("%d admitted on the views after the mark lapsed, want at most 2: a survivor spent its share twice", afterLapse)
			}
		})
	}
}

// spendInTurn checks through nodes in turn, one check a millisecond,
// counting with try into admitted, until spent are admitted; then lets the
// views, pushes and backups settle: a key's spending before its owner
// crashes.
func (nw *testNet) spendInTurn(try func(*Node), admitted *int, spent int, nodes ...*Node) {
	for i := 0; *admitted < spent; i++ {
		try(nodes[i%len(nodes)])
		nw.run(time.Millisecond)
	}
	nw.run(300 * time.Millisecond)
}
