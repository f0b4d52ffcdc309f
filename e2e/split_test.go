//go:build e2e

package e2e

import (
	"slices"
	"testing"
	"time"
)

// TestSplit splits a cluster of five into two groups, {n1, n2} and
// {n3, n4, n5}, for 15s, then heals it, under load on every node. Both
// groups keep answering; the minority answers the majority's keys by their
// partition policy; the cluster becomes one again.
func TestSplit(t *testing.T) {
	c := startCluster(t, clusterSpec{nodes: 5, homes: []int{0, 0, 1, 1, 1}})
	minority, majority := []int{0, 1}, []int{2, 3, 4}

	items := slices.Concat(policyFamilies(c, 0, "a", 2), policyFamilies(c, 2, "b", 2))
	spent := slices.Concat(
		family("spent-a", c.keysOwnedBy(newItem("spent-a", "", modeCached, polShare, spentLimit, spentPeriod), 0, 0, 2),
			modeCached, polShare, spentLimit, spentPeriod),
		family("spent-b", c.keysOwnedBy(newItem("spent-b", "", modeCached, polShare, spentLimit, spentPeriod), 2, 0, 2),
			modeCached, polShare, spentLimit, spentPeriod))
	pre := c.exhaust(spent, c.all())
	items = append(items, spent...)

	l := startLoad(t, c, loadSpec{targets: c.all(), interval: hotInterval, items: items})
	start := time.Now()
	time.Sleep(8 * time.Second)

	pr := cutAndHeal(t, c, l, [][]int{minority, majority}, 15*time.Second)
	cutAt, cutCmd, split, views, healAt, healCmd, healed, recs, end, nfail :=
		pr.cutAt, pr.cutCmd, pr.split, pr.views, pr.healAt, pr.healCmd, pr.healed, pr.recs, pr.end, pr.nfail
	during := func(idx []int) func(*callRec) bool { return sentTo(idx, cutAt.Add(cutCmd), healAt) }
	abAll := checkPolicy(c, recs, items, "b", during(minority))
	if abAll.Broken > 0 {
		t.Errorf("minority %v: %d degraded answers for the majority's keys broke their policy", c.names(minority), abAll.Broken)
	}
	notice := noticeAfter(t, cutCmd, split)
	ab := checkPolicy(c, recs, items, "b", sentTo(minority, cutAt.Add(notice), healAt))
	if ab.NotDegraded > 0 {
		t.Errorf("minority %v: %d of %d answers for keys owned across the split were not degraded (decided as if it owned them), e.g. %v",
			c.names(minority), ab.NotDegraded, ab.Answers, ab.examples)
	}
	if ab.ClosedAdmitted > 0 {
		t.Errorf("minority %v: %d fail-closed checks for keys owned across the split were admitted", c.names(minority), ab.ClosedAdmitted)
	}
	ba := checkPolicy(c, recs, items, "a", during(majority))
	if ba.Broken > 0 {
		t.Errorf("majority %v: %d degraded answers for the minority's keys broke their policy", c.names(majority), ba.Broken)
	}
	slack := cachedSlack(spentLimit, len(c.nodes))
	spentA, preOverA := checkSpent(t, c, recs, items, spent[:2], pre, slack)
	spentB, preOverB := checkSpent(t, c, recs, items, spent[2:], pre, slack)

	phases := []phase{{"before", start, cutAt}, {"split", cutAt, healAt}, {"after", healAt, end}}
	figs := map[string][]phaseFig{}
	for _, fam := range []string{"share-a", "share-b", "owner-a", "owner-b", "closed-a", "closed-b", "open-a", "open-b"} {
		figs[fam] = compareIdeal(recs, items, fam, phases)
	}

	t.Logf("split %v | %v from %s to %s (disconnect took %v, reconnect %v); load: %d calls of %d items, every %v to each node",
		c.names(minority), c.names(majority), cutAt.Format("15:04:05.000"), healAt.Format("15:04:05.000"),
		cutCmd.Round(time.Millisecond), healCmd.Round(time.Millisecond), len(recs), len(items), hotInterval)
	t.Logf("membership: two groups after %v; views during the split: %s; healed (all see all) %v after the reconnect",
		split.Round(time.Millisecond), views, healed.Round(time.Millisecond))
	t.Logf("failed calls: %d", nfail)
	t.Logf("minority, majority's keys: %d answers, %d degraded, %d against policy; from %v after the split: %d answers, %d not degraded, %d fail-closed admitted",
		abAll.Answers, abAll.Degraded, abAll.Broken, notice, ab.Answers, ab.NotDegraded, ab.ClosedAdmitted)
	t.Logf("majority, minority's keys: %d answers, %d degraded, %d not degraded, %d against policy, %d fail-closed admitted",
		ba.Answers, ba.Degraded, ba.NotDegraded, ba.Broken, ba.ClosedAdmitted)
	t.Logf("spent keys (limit %d per %v, 2 per side): %d admitted under load on the minority's, %d on the majority's (bound %d per key)",
		spentLimit, spentPeriod, spentA, spentB, slack)
	logFigs(t, figs, hotLimit)
	emit(t, "split", map[string]any{
		"nodes": len(c.nodes), "groups": [][]string{c.names(minority), c.names(majority)},
		"split_s": healAt.Sub(cutAt).Seconds(), "calls": len(recs), "items_per_call": len(items),
		"failed_calls": nfail, "split_ms": ms(split), "healed_ms": ms(healed), "views_during_split": views,
		"minority_policy": abAll, "minority_policy_after_grace": ab, "majority_policy": ba, "spent_admitted_minority_keys": spentA,
		"spent_admitted_majority_keys": spentB, "spent_pre_over": preOverA + preOverB, "phases": figs,
	})
}
