package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// localShareNode is the node configuration of e2e's silent scenarios: the
// hand-off wait on and the default policy local-share (the shipped one);
// the requests name fail-closed.
func localShareNode(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyLocalShare }

// failNode gives the members of on the live members live, failed reported
// failed.
func (nw *testNet) failNode(live, failed []string, on ...string) {
	for _, o := range on {
		nw.nodes[o].SetMembership(nw.now, live, failed)
	}
}

// TestMajorityTakeoverHolderOnMinority: 5 nodes split silently {n1,n2} |
// {n3,n4,n5}; n1 owns the key, n2 (on n1's side) holds its backups, n4
// owns it on the majority's ring. Whatever order the majority sees n1 and
// n2 fail in, n4 never decides the key on a fresh bucket: while only n1 is
// seen failed, n2 owns the key in the majority's view (n1's backup target
// is the owner on the ring without n1), and once both are, the partition
// is orphaned (quorum.go) and decided by the request's policy. Requests
// are fail-closed on nodes whose default is local-share (e2e's
// TestSilentSplit), in owner and leased mode. (A guard: main admitted no
// more than the key's 100 here either.)
func TestMajorityTakeoverHolderOnMinority(t *testing.T) {
	all := []string{"n1", "n2", "n3", "n4", "n5"}
	minority, majority := []string{"n1", "n2"}, []string{"n3", "n4", "n5"}
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, all...) == "n1" && ownerOn(t, k, without(all, "n1")...) == "n2" && ownerOn(t, k, majority...) == "n4" {
			key = k
		}
	}
	orders := map[string][][]string{
		"n1 then n2": {{"n1"}, {"n1", "n2"}},
		"n2 then n1": {{"n2"}, {"n1", "n2"}},
		"n1 only":    {{"n1"}, {"n1"}},
		"together":   {{"n1", "n2"}, {"n1", "n2"}},
	}
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeLeased} {
		for name, order := range orders {
			t.Run(fmt.Sprintf("%v/%s", mode, name), func(t *testing.T) {
				nw := newTestNet(t, localShareNode, all...)
				req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: mode, Policy: check.PolicyFailClosed}
				first := runRequestLoad(t, nw, all, req, 40*5*time.Millisecond, nil)
				nw.cutBetween(minority, majority)
				events := map[time.Duration]func(){
					time.Second:             func() { nw.failNode(without(all, order[0]...), order[0], majority...) },
					1500 * time.Millisecond: func() { nw.failNode(without(all, order[1]...), order[1], majority...) },
					2 * time.Second:         func() { nw.failNode(minority, majority, minority...) },
				}
				cut := runRequestLoad(t, nw, all, req, 8*time.Second, events)
				t.Logf("%s: admitted %d before the cut, %d after it (%v, %d degraded)", key, first.admitted, cut.admitted, cut.byNode, cut.degraded)
				if total := first.admitted + cut.admitted; total > 100 {
					t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
				}
			})
		}
	}
}

// crashTakeover crashes c of {a, b, c} (the survivors see it fail) and
// runs the network until b, c's backup holder for key, decides c's
// partitions as owner: past the confirmation and OwnerLeaseTTL's wait.
func crashTakeover(t *testing.T, nw *testNet) {
	t.Helper()
	nw.isolate("c")
	nw.nodes["c"] = nil
	nw.failNode([]string{"a", "b"}, []string{"c"}, "a", "b")
	nw.run(3 * time.Second)
}

// TestTakeoverWithoutStateStartsDrained: the cost of the drained start
// after a takeover (lostkey.go). c owns a key nobody used; c crashes, b
// takes its partition over from the failed c, with no hand-off, backup or
// kept state of the key (there is none). A check of policy fail-closed
// then starts the key drained as of the moment b began deciding the
// partition, refilling at the rate: over 4 s at 50 per 5 s it admits the
// rate since then (about 49: 10/s for the 0.9 s since the wait's end and
// the 4 s of load), where a fresh bucket admitted its burst and the rate
// (90). Requests of policy local-share keep the fresh bucket (90).
func TestTakeoverWithoutStateStartsDrained(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 50, Period: 5 * time.Second}
	members := []string{"a", "b", "c"}
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	for _, tc := range []struct {
		pol      check.Policy
		min, max int
	}{
		{check.PolicyFailClosed, 45, 52},
		{check.PolicyLocalShare, 89, 91},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			nw := newTestNet(t, localShareNode, members...)
			crashTakeover(t, nw)
			req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner, Policy: tc.pol}
			got := runRequestLoad(t, nw, []string{"a", "b"}, req, 4*time.Second, nil)
			t.Logf("admitted %d in 4 s (%v, %d degraded; drained starts %d)", got.admitted, got.byNode, got.degraded,
				nw.nodes["b"].Metrics().DrainedStarts.Load())
			if got.admitted < tc.min || got.admitted > tc.max {
				t.Errorf("admitted %d in 4 s, want %d to %d", got.admitted, tc.min, tc.max)
			}
		})
	}
}

// TestTakeoverWithBackupUnchanged: a takeover whose backup holder is
// reachable starts from the backup, as before the drained start: c owns a
// key of 100 an hour, 30 admitted; c crashes, b restores its backup (the
// reserve, 10, drained) and admits the 60 left in owner mode; in leased
// mode 40 (the tokens of a's lease, granted from c's bucket, are not
// a's to spend after the crash), with requests of policy fail-closed: the
// figures of main before the drained start after a takeover.
func TestTakeoverWithBackupUnchanged(t *testing.T) {
	members := []string{"a", "b", "c"}
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	for _, tc := range []struct {
		mode check.Mode
		want int
	}{{check.ModeOwner, 60}, {check.ModeLeased, 40}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			nw := newTestNet(t, localShareNode, members...)
			req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: tc.mode, Policy: check.PolicyFailClosed}
			first := runRequestLoad(t, nw, []string{"a"}, req, 30*5*time.Millisecond, nil)
			nw.run(time.Second) // backups go out
			crashTakeover(t, nw)
			after := runRequestLoad(t, nw, []string{"a", "b"}, req, 2*time.Second, nil)
			t.Logf("admitted %d, then %d after c's crash (%v, %d degraded; drained starts %d)", first.admitted, after.admitted,
				after.byNode, after.degraded, nw.nodes["b"].Metrics().DrainedStarts.Load())
			if first.admitted != 30 {
				t.Fatalf("admitted %d before the crash, want 30", first.admitted)
			}
			if after.admitted != tc.want {
				t.Errorf("admitted %d after the crash, want %d", after.admitted, tc.want)
			}
		})
	}
}

// TestTakeoverBoundsStaleView: the new owner of a crashed owner's key holds
// no backup of it (every backup lost) but a cached view, stale: c, the
// owner, admitted 50 of 100 (an hour) in cached mode through a and b, then
// 50 more through a while its pushes to b were lost. c crashes; b takes
// its partition over and its view, 50 left, became the owned state: main
// admitted those 50 again for requests of policy fail-closed (150 in all).
// Now the view is bounded by the drained start of the takeover (none
// refills in a test of an hour): 100 in all. Local-share requests decide
// on the view as before.
func TestTakeoverBoundsStaleView(t *testing.T) {
	members := []string{"a", "b", "c"}
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	for _, tc := range []struct {
		pol  check.Policy
		want int
	}{{check.PolicyFailClosed, 100}, {check.PolicyLocalShare, 150}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			nw := newTestNet(t, localShareNode, members...)
			nw.drop = func(_, _ string, env *peerv1.Envelope) bool { return bodyName(env) == "backup" }
			cached := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeCached, Policy: check.PolicyLocalShare}
			first := runRequestLoad(t, nw, []string{"a", "b"}, cached, 25*5*time.Millisecond, nil)
			nw.run(time.Second)
			nw.cut[[2]string{"c", "b"}] = true
			mid := runRequestLoad(t, nw, []string{"a"}, cached, 60*5*time.Millisecond, nil)
			nw.run(time.Second)
			nw.drop = nil // b's own backups, to a, go through
			crashTakeover(t, nw)
			req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: tc.pol}
			after := runRequestLoad(t, nw, []string{"b"}, req, time.Second, nil)
			total := first.admitted + mid.admitted + after.admitted
			t.Logf("admitted %d, %d with c->b cut, %d after c's crash (%d degraded)", first.admitted, mid.admitted, after.admitted, after.degraded)
			if first.admitted+mid.admitted != 100 {
				t.Fatalf("admitted %d before the crash, want 100", first.admitted+mid.admitted)
			}
			if total != tc.want {
				t.Errorf("admitted %d in all, want %d", total, tc.want)
			}
		})
	}
}
