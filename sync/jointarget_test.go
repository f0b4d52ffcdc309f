package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestJoinedTargetOnCutOffSideRaisesNothing: the fault checker's owner seed
// 726 at the core. a owns a key whose backup target is tg on the ring of
// {a, b, c, d}. A silent cut puts {a, e} apart from {b, c, d}, and e
// joins on a's side: a sees it, the others never do. On a's ring without
// a the key is e's now, so a backed the key up to e, and e's
// acknowledgements raised a's fence: a spent the key on them until its
// ownership lease lapsed, while the majority, seeing a fail and no e, took
// the key over from tg's backup, which knew nothing of it. Now e's
// acknowledgements raise nothing until an acknowledgement of tg, still a
// member, shows that tg knows e (fence.go, holdForOldTarget), which never
// comes across the cut: a decides the key within what tg acknowledged. Owner
// mode, requests fail-closed, a key of 100 an hour: 150 admitted in all
// on main (40 before the cut, 60 by a after it, 50 by the majority), 100
// now (10 by a: the reserve tg drains; 50 by the majority).
func TestJoinedTargetOnCutOffSideRaisesNothing(t *testing.T) {
	before, _, _, key, tg := joinTargetKey(t)
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, before...)
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	first := runRequestLoad(t, nw, []string{"a"}, req, 40*5*time.Millisecond, nil)
	// The cut, then e's join, seen on a's side only.
	cutJoinTake(t, nw, tweak, req, key, tg, first)
}

// joinTargetKey finds the key of the join tests (jointarget_test.go,
// joinecho_test.go, fencegc_test.go): a owns it on the ring of before, {a,
// b, c, d}, and on that of all, before and e; on all without a it is e's.
// tg is its owner on the majority's ring, {b, c, d}: a's backup target
// before e joins.
func joinTargetKey(t *testing.T) (before, all, majority []string, key, tg string) {
	before = []string{"a", "b", "c", "d"}
	all = append(before[:4:4], "e")
	majority = []string{"b", "c", "d"}
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, before...) == "a" && ownerOn(t, k, all...) == "a" && ownerOn(t, k, without(all, "a")...) == "e" {
			key, tg = k, ownerOn(t, k, majority...)
		}
	}
	return before, all, majority, key, tg
}

// cutJoinTake plays the rest of TestJoinedTargetOnCutOffSideRaisesNothing
// on nw, where a admitted first of req: a silent cut puts {a, e} apart
// from {b, c, d}, e joins on a's side (made with tweak), a spends the key
// for 3 s while each side sees the other fail, then the majority takes it
// over for 4 s. It fails the test if more than 100 were admitted in all.
func cutJoinTake(t *testing.T, nw *testNet, tweak func(*Config), req check.Request, key, tg string, first ownerLoad) {
	t.Helper()
	all, majority := []string{"a", "b", "c", "d", "e"}, []string{"b", "c", "d"}
	nw.cutBetween([]string{"a", "e"}, majority)
	nw.add("e", tweak)
	nw.names = append(nw.names, "e")
	nw.failNode(all, nil, "a", "e")
	cutOff := runRequestLoad(t, nw, []string{"a"}, req, 3*time.Second, map[time.Duration]func(){
		1500 * time.Millisecond: func() { nw.failNode(majority, []string{"a"}, majority...) },
		2500 * time.Millisecond: func() { nw.failNode([]string{"a", "e"}, majority, "a", "e") },
	})
	taken := runRequestLoad(t, nw, majority, req, 4*time.Second, nil)
	t.Logf("%s: target %s, then e; admitted %d before the cut, %d by a after it (%d degraded), %d by the majority (%v)",
		key, tg, first.admitted, cutOff.admitted, cutOff.degraded, taken.admitted, taken.byNode)
	if total := first.admitted + cutOff.admitted + taken.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}
