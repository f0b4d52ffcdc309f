package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
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
	before := []string{"a", "b", "c", "d"}
	all := append(before[:4:4], "e")
	majority := []string{"b", "c", "d"}
	var key, tg string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, before...) == "a" && ownerOn(t, k, all...) == "a" && ownerOn(t, k, without(all, "a")...) == "e" {
			key, tg = k, ownerOn(t, k, majority...)
		}
	}
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, before...)
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	first := runRequestLoad(t, nw, []string{"a"}, req, 30*5*time.Millisecond, nil)
	// e joins; a and e learn of it, the others not (slow gossip).
	nw.add("e", tweak)
	nw.names = append(nw.names, "e")
	nw.setMembers(all, "a", "e")
	nw.run(2 * nw.nodes["a"].cfg.FenceHold)
	// a spends on, tg reachable and acknowledging.
	second := runRequestLoad(t, nw, []string{"a"}, req, 40*5*time.Millisecond, nil)
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
