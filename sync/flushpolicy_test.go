package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestTakeoverBoundsFirstFlush: the takeover's bound (lostkey.go) when
// the first input on the key at its new owner is a flush asking for a
// lease, not a check. c owns a key of 100 an hour, its backups all lost;
// 100 are admitted in cached mode, and b, c's successor, is left with a
// stale view of 50 (its pushes lost for the last 50, "stale view") or no
// state at all (the 100 admitted through a alone, "no state"). Checks of
// policy fail-closed in leased mode go through b and d from the moment c
// crashes and b takes its partition over; a, whose view is fresh, is
// idle. d's key is warm after its first check, so the first input on it
// at b is d's flush asking for a lease (checks are not decided while the
// takeover waits, confirm.go). A flush carried no policy: on a node of
// default policy local-share, it took the key out of the bound (a fresh
// bucket, or the view unbounded), and d's leases and b's checks spent it
// again: 150 and 200 admitted of a key of 100. The flush now names the
// policy of the leased checks behind it (FlushItem.fail_closed): 100 in
// all, as on a node of default fail-closed.
func TestTakeoverBoundsFirstFlush(t *testing.T) {
	nodes := []struct {
		name  string
		tweak func(*Config)
	}{{"local-share node", localShareNode}, {"fail-closed node", failClosed}}
	for _, state := range []string{"stale view", "no state"} {
		for _, node := range nodes {
			t.Run(state+"/"+node.name, func(t *testing.T) {
				firstFlushTakeover(t, node.tweak, state == "stale view", 0)
			})
		}
	}
}

// TestTakeoverBoundsFlushWhileUnconfirmed: TestTakeoverBoundsFirstFlush
// on nodes of default fail-closed, with the echoes to b lost for the
// first 300 ms after c's crash: d's flush arrives while b's takeover is
// unconfirmed, when there is no instant yet to bound the key from
// (takeoverStart). The flush took the key out of the bound all the same:
// 150 (stale view) and 200 (no state) admitted of a key of 100 once the
// takeover was confirmed and its wait over. The bound now waits for the
// first decision after the confirmation: 100.
func TestTakeoverBoundsFlushWhileUnconfirmed(t *testing.T) {
	for _, state := range []string{"stale view", "no state"} {
		t.Run(state, func(t *testing.T) {
			firstFlushTakeover(t, failClosed, state == "stale view", 300*time.Millisecond)
		})
	}
}

// firstFlushTakeover runs TestTakeoverBoundsFirstFlush's scenario on
// nodes configured by tweak, b's view stale or absent, the echoes to b
// lost for unheard after c's crash, and checks that the key admits at
// most its 100 in all.
func firstFlushTakeover(t *testing.T, tweak func(*Config), stale bool, unheard time.Duration) {
	t.Helper()
	members := []string{"a", "b", "c", "d"}
	key := keyMoving(t, "c", "b", members, []string{"a", "b", "d"})
	nw := newTestNet(t, tweak, members...)
	nw.drop = func(_, _ string, env *peerv1.Envelope) bool { return bodyName(env) == "backup" }
	cached := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeCached, Policy: check.PolicyLocalShare}
	var before ownerLoad
	if stale {
		before = runRequestLoad(t, nw, []string{"b", "d"}, cached, 25*5*time.Millisecond, nil)
		nw.run(time.Second)
		nw.drop = func(_, _ string, env *peerv1.Envelope) bool {
			return bodyName(env) == "backup" || bodyName(env) == "push"
		}
	}
	mid := runRequestLoad(t, nw, []string{"a"}, cached, 120*5*time.Millisecond, nil)
	if got := before.admitted + mid.admitted; got != 100 {
		t.Fatalf("admitted %d before the crash, want 100", got)
	}
	crashed := nw.now
	nw.drop = func(_, to string, env *peerv1.Envelope) bool {
		return to == "b" && bodyName(env) == "clock" && nw.now.Sub(crashed) < unheard
	}
	crash := map[time.Duration]func(){0: func() {
		nw.isolate("c")
		nw.nodes["c"] = nil
		nw.failNode([]string{"a", "b", "d"}, []string{"c"}, "a", "b", "d")
	}}
	leased := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeLeased, Policy: check.PolicyFailClosed}
	after := runRequestLoad(t, nw, []string{"b", "d"}, leased, 4*time.Second, crash)
	t.Logf("admitted 100 before c's crash, %d after it (%v, %d degraded; unconfirmed checks %d, drained starts %d)", after.admitted,
		after.byNode, after.degraded, nw.nodes["b"].Metrics().UnconfirmedChecks.Load(), nw.nodes["b"].Metrics().DrainedStarts.Load())
	if total := 100 + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}
