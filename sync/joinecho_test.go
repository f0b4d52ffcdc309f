package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestJoinHoldEndsOnlyOnceOldTargetKnowsJoiner: the join hold without its
// timing assumption (issue #15). a owns a key whose backup target is tg on
// the ring of {a, b, c, d}. e joins, and only a and e learn of it: the
// gossip that would tell tg and the others is slow (or lost), longer than
// FenceHold. On a's ring without a the key is e's now, so a backs it up to
// e, and to tg under the hold (holdForOldTarget). Nothing is cut: tg
// acknowledges the backups a sends after the hold. Then a silent cut puts
// {a, e} apart from {b, c, d}, which still know nothing of e: they see a
// fail and tg, the key's owner on their ring without a, takes it over from
// its backup. On main the hold ended at tg's acknowledgement of a backup
// sent FenceHold after the join, though tg did not know e: e's
// acknowledgements then raised a's bound, tg's backup went stale, and tg
// admitted again what a spent on e's acknowledgements. Now the hold ends
// only when tg's acknowledgement shows that tg knows e. Owner mode,
// fail-closed, a key of 100 an hour.
func TestJoinHoldEndsOnlyOnceOldTargetKnowsJoiner(t *testing.T) {
	// e joins; a and e learn of it, the others not (slow gossip); a
	// spends on, tg reachable and acknowledging.
	nw, majority, key, tg, req, first, second := joinThenSpend(t, func(_ []string, _ string) []string { return []string{"a", "e"} })
	// The silent cut; the majority, which never learned of e, sees a fail.
	nw.cutBetween([]string{"a", "e"}, majority)
	nw.run(500 * time.Millisecond)
	nw.failNode(majority, []string{"a"}, majority...)
	taken := runRequestLoad(t, nw, majority, req, 4*time.Second, nil)
	t.Logf("%s: target %s, then e; admitted %d before the join, %d by a after it, %d by the majority (%v)",
		key, tg, first.admitted, second.admitted, taken.admitted, taken.byNode)
	if total := first.admitted + second.admitted + taken.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestJoinHoldEndsWhenOldTargetLearnsJoiner: the join hold of
// TestJoinHoldEndsOnlyOnceOldTargetKnowsJoiner, all links up, lasts while
// the old target tg has not heard of e, however long (here three times
// FenceHold), and ends at tg's first acknowledgement after it has: then
// e's acknowledgements raise a's bound, and a's backups of the key go to
// e only.
func TestJoinHoldEndsWhenOldTargetLearnsJoiner(t *testing.T) {
	before, all, _, key, tg := joinTargetKey(t)
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, before...)
	req := check.Request{Key: key, Hits: 1, Limit: perHour(1000), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	runRequestLoad(t, nw, []string{"a"}, req, 20*5*time.Millisecond, nil)
	a := nw.nodes["a"]
	nw.add("e", tweak)
	nw.names = append(nw.names, "e")
	nw.setMembers(all, "a", "e")
	step := func(name string, d time.Duration, wantFrom string) {
		t.Helper()
		res := runRequestLoad(t, nw, []string{"a"}, req, d, nil)
		f := a.fenceOf(key)
		if f == nil {
			t.Fatalf("%s: a has no fence of %s", name, key)
		}
		t.Logf("%s: admitted %d of %d; spent %d, bound %d, held for %q", name, res.admitted, res.checks, f.spent, f.bound, f.holdFrom)
		if f.holdFrom != wantFrom {
			t.Errorf("%s: a's fence held for %q, want %q", name, f.holdFrom, wantFrom)
		}
		if res.admitted != res.checks {
			t.Errorf("%s: admitted %d of %d checks, want all", name, res.admitted, res.checks)
		}
	}
	step("3 FenceHold after the join, tg not told", 3*a.cfg.FenceHold, tg)
	nw.setMembers(all, without(before, "a")...)
	step("tg told", 200*time.Millisecond, "")
	to := map[string]int{}
	nw.drop = func(from, dst string, env *peerv1.Envelope) bool {
		if _, ok := env.Body.(*peerv1.Envelope_Backup); ok && from == "a" {
			to[dst]++
		}
		return false
	}
	step("after", 150*5*time.Millisecond, "")
	if to["e"] == 0 || to[tg] != 0 {
		t.Errorf("after the hold a sent backups %v, want some to e, none to %s", to, tg)
	}
}

// TestJoinHoldEndedJoinerCutOffWithOwner: once the hold has ended (tg
// knows e), a silent cut that puts e with a, {a, e} | {b, c, d}, loses
// the key's owner and its target at once. tg, the key's owner on the
// majority's rings without a (and e), holds a copy older than what a
// spent on e's acknowledgements; seeing both fail, it orphans the key
// (orphanedPartitions), which then goes by the policy: nothing is admitted
// twice. So when the other members of the majority never learnt of e
// (they see a fail, and tg as the key's owner, which answers their checks
// by the policy). Owner mode, fail-closed, a key of 100 an hour.
func TestJoinHoldEndedJoinerCutOffWithOwner(t *testing.T) {
	for _, told := range []string{"all", "tg only"} {
		t.Run(told, func(t *testing.T) { joinerCutOffWithOwner(t, told == "all") })
	}
}

func joinerCutOffWithOwner(t *testing.T, allTold bool) {
	var told []string
	// 2 FenceHold after the join: past main's hold, FenceHold.
	nw, majority, key, tg, req, first, second := joinThenSpend(t, func(all []string, tg string) []string {
		told = []string{"a", "e", tg}
		if allTold {
			told = all
		}
		return told
	})
	if f := nw.nodes["a"].fenceOf(key); f == nil || f.holdFrom != "" {
		t.Fatalf("a's fence of %s: %+v, want no hold", key, f)
	}
	nw.cutBetween([]string{"a", "e"}, majority)
	nw.run(500 * time.Millisecond)
	for _, m := range majority {
		if slices.Contains(told, m) {
			nw.failNode(majority, []string{"a", "e"}, m)
		} else {
			nw.failNode(majority, []string{"a"}, m)
		}
	}
	taken := runRequestLoad(t, nw, majority, req, 4*time.Second, nil)
	t.Logf("%s: target %s, then e; admitted %d before the join, %d by a after it, %d by the majority (%v, %d degraded)",
		key, tg, first.admitted, second.admitted, taken.admitted, taken.byNode, taken.degraded)
	if total := first.admitted + second.admitted + taken.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// joinThenSpend is the start of TestJoinHoldEndsOnlyOnceOldTargetKnowsJoiner
// and TestJoinHoldEndedJoinerCutOffWithOwner, fail-closed, on the key of
// joinTargetKey, of 100 an hour, in owner mode (req): a admits first of
// it, e joins and the members told(all, tg) names learn of it; 2
// FenceHold later a admits second.
func joinThenSpend(t *testing.T, told func(all []string, tg string) []string) (nw *testNet, majority []string, key, tg string, req check.Request, first, second ownerLoad) {
	t.Helper()
	before, all, majority, key, tg := joinTargetKey(t)
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw = newTestNet(t, tweak, before...)
	req = check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	first = runRequestLoad(t, nw, []string{"a"}, req, 30*5*time.Millisecond, nil)
	nw.add("e", tweak)
	nw.names = append(nw.names, "e")
	nw.setMembers(all, told(all, tg)...)
	nw.run(2 * nw.nodes["a"].cfg.FenceHold)
	second = runRequestLoad(t, nw, []string{"a"}, req, 40*5*time.Millisecond, nil)
	return nw, majority, key, tg, req, first, second
}
