//go:build e2e

package e2e

import (
	"slices"
	"testing"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Shorthands for the enums the scenarios use.
const (
	modeOwner  = ringlimitv1.Mode_MODE_OWNER
	modeCached = ringlimitv1.Mode_MODE_CACHED

	polDefault    = ringlimitv1.Policy_POLICY_DEFAULT
	polFailOpen   = ringlimitv1.Policy_POLICY_FAIL_OPEN
	polFailClosed = ringlimitv1.Policy_POLICY_FAIL_CLOSED
	polShare      = ringlimitv1.Policy_POLICY_LOCAL_SHARE
)

// Limits of the scenarios' keys.
const (
	// unlimited is a limit the load never reaches: every answer admits, so
	// what is measured is whether and by whom keys are answered.
	unlimited = 1_000_000
	// spentLimit is the limit, per spentPeriod, of the keys a scenario
	// spends before its fault: nothing refills during a test, so whatever
	// they admit afterwards is what the fault gave back.
	spentLimit  = 100
	spentPeriod = time.Hour
)

// cachedSlack is the most hits a cached-mode key may admit over its limit
// on n nodes: each node lets at most T = max(1, SyncFraction x limit / n)
// admitted hits go unseen by the owner before it syncs (SyncFraction is
// 0.02, rlsync.DefaultConfig), so n x T in all.
func cachedSlack(limit int64, n int) int64 {
	return int64(n) * max(1, int64(0.02*float64(limit)/float64(n)))
}

// TestKill kills one node of three with SIGKILL under load. The calls to
// the two others must not fail; the dead node's keys must be answered again
// (by the partition policy, then by their new owner) within 2s; a
// cached-mode key spent before the crash must stay spent.
func TestKill(t *testing.T) {
	c := startCluster(t, clusterSpec{nodes: 3})
	const victim = 2
	survivors := c.except(victim)
	dead := c.nodes[victim].name

	keys := func(fam string, mode ringlimitv1.Mode, limit int64, period time.Duration, owner, n int) []*ringlimitv1.CheckItem {
		ks := c.keysOwnedBy(newItem(fam, "", mode, polDefault, limit, period), owner, 0, n)
		return family(fam, ks, mode, polDefault, limit, period)
	}
	liveOwner := keys("live-owner", modeOwner, unlimited, time.Second, victim, 4)
	liveCached := keys("live-cached", modeCached, unlimited, time.Second, victim, 4)
	control := append(keys("control", modeOwner, unlimited, time.Second, 0, 2),
		keys("control", modeOwner, unlimited, time.Second, 1, 2)...)
	spentCached := keys("spent-cached", modeCached, spentLimit, spentPeriod, victim, 4)
	spentOwner := keys("spent-owner", modeOwner, spentLimit, spentPeriod, victim, 4)
	pre := c.exhaust(slices.Concat(spentCached, spentOwner), c.all())

	items := slices.Concat(liveOwner, liveCached, control, spentCached, spentOwner)
	l := startLoad(t, c, loadSpec{targets: c.all(), interval: 40 * time.Millisecond, items: items})
	time.Sleep(3 * time.Second)
	killAt := c.kill(victim)
	killCmd := time.Since(killAt)
	if _, err := c.waitMembers(survivors, c.names(survivors), 10*time.Second); err != nil {
		t.Errorf("membership: %v", err)
	}
	membership := time.Since(killAt)
	time.Sleep(time.Until(killAt.Add(7 * time.Second)))
	recs := l.stop()
	end := time.Now()

	// The survivors answer every call; the dead node's fail after the kill.
	nfail, ex := failures(c, recs, sentTo(survivors, time.Time{}, end))
	if nfail > 0 {
		t.Errorf("%d calls to the surviving nodes failed, e.g. %v", nfail, ex)
	}
	deadFail, _ := failures(c, recs, sentTo([]int{victim}, killAt, end))
	if n, ex := failures(c, recs, func(r *callRec) bool { return r.node == victim && r.end.Before(killAt) }); n > 0 {
		t.Errorf("%d calls to %s failed before it was killed, e.g. %v", n, dead, ex)
	}

	rec := measureRecovery(recs, items, "live-owner", dead, survivors, killAt)
	recCached := measureRecovery(recs, items, "live-cached", dead, survivors, killAt)
	ctl := count(recs, items, "control", sentTo(survivors, killAt, end))
	// A new owner decides a crashed owner's keys in owner mode only the
	// ownership lease's wait (OwnerLeaseTTL and a sixteenth, the node's
	// default) after a majority confirmed the takeover: the crashed owner
	// might still have held a lease. Cached mode is not delayed.
	ttl := rlsync.DefaultConfig().OwnerLeaseTTL
	for _, r := range []struct {
		name     string
		got      recovery
		takeover time.Duration
	}{{"owner mode", rec, 2*time.Second + ttl + ttl/16}, {"cached mode", recCached, 2 * time.Second}} {
		switch {
		case r.got.Answers == 0:
			t.Errorf("%s: no answer for %s's keys after the kill", r.name, dead)
		case r.got.FirstAnswer > 2*time.Second:
			t.Errorf("%s: %s's keys first answered again %v after the kill, want <= 2s", r.name, dead, r.got.FirstAnswer)
		case r.got.MaxWait > 2*time.Second:
			t.Errorf("%s: a call for %s's keys waited %v, want <= 2s", r.name, dead, r.got.MaxWait)
		}
		if r.got.Takeover < 0 || r.got.Takeover > r.takeover {
			t.Errorf("%s: %s's keys answered by a live owner, not degraded, from %v after the kill (-1: never), want <= %v",
				r.name, dead, r.got.Takeover, r.takeover)
		}
	}

	// Spent keys stay spent: the new owner must not start from a full
	// bucket. Cached mode rebuilds from the views the survivors hold.
	slack := cachedSlack(spentLimit, len(c.nodes))
	after := count(recs, items, "spent-cached", sentTo(c.all(), killAt, end))
	before := count(recs, items, "spent-cached", sentTo(c.all(), time.Time{}, killAt))
	_, preOver := checkSpent(t, c, recs, items, spentCached, pre, slack)
	var preCached, preOwner int64
	for _, it := range spentCached {
		preCached += pre[it.UniqueKey]
	}
	for _, it := range spentOwner {
		preOwner += pre[it.UniqueKey]
	}
	ownerAfter := count(recs, items, "spent-owner", sentTo(c.all(), killAt, end))

	t.Logf("kill -9 %s at %s (docker kill took %v); load: %d calls of %d items, every 40ms to each node",
		dead, killAt.Format("15:04:05.000"), killCmd.Round(time.Millisecond), len(recs), len(items))
	t.Logf("surviving nodes: %d failed calls; calls to %s after the kill: %d failed (expected)", nfail, dead, deadFail)
	t.Logf("membership: survivors dropped %s %v after the kill", dead, membership.Round(time.Millisecond))
	t.Logf("owner mode, %s's keys via survivors: first answered again after %v, longest wait %v, live owner from %v; %d answers, %d degraded",
		dead, rec.FirstAnswer.Round(time.Millisecond), rec.MaxWait.Round(time.Millisecond), rec.Takeover.Round(time.Millisecond), rec.Answers, rec.Degraded)
	t.Logf("cached mode, %s's keys via survivors: first answered again after %v, longest wait %v, live owner from %v; %d answers, %d degraded",
		dead, recCached.FirstAnswer.Round(time.Millisecond), recCached.MaxWait.Round(time.Millisecond), recCached.Takeover.Round(time.Millisecond), recCached.Answers, recCached.Degraded)
	t.Logf("control keys (owned by survivors): %d answers after the kill, %d degraded", ctl.Answers, ctl.Degraded)
	t.Logf("spent keys (limit %d per %v, %d of each mode): cached mode admitted %d while spending, then %d before and %d after the kill (bound %d per key); owner mode admitted %d while spending, %d after the kill",
		spentLimit, spentPeriod, len(spentCached), preCached, before.Admitted, after.Admitted, slack, preOwner, ownerAfter.Admitted)
	emit(t, "kill", map[string]any{
		"nodes": len(c.nodes), "calls": len(recs), "items_per_call": len(items),
		"survivor_failed_calls": nfail, "dead_node_failed_calls": deadFail,
		"membership_ms":            ms(membership),
		"owner_first_answer_ms":    ms(rec.FirstAnswer),
		"owner_max_wait_ms":        ms(rec.MaxWait),
		"owner_takeover_ms":        ms(rec.Takeover),
		"owner_degraded":           rec.Degraded,
		"cached_first_answer_ms":   ms(recCached.FirstAnswer),
		"cached_max_wait_ms":       ms(recCached.MaxWait),
		"cached_takeover_ms":       ms(recCached.Takeover),
		"cached_degraded":          recCached.Degraded,
		"control_degraded":         ctl.Degraded,
		"spent_cached_keys":        len(spentCached),
		"spent_cached_pre":         preCached,
		"spent_cached_pre_over":    preOver,
		"spent_cached_after_kill":  after.Admitted,
		"spent_cached_before_kill": before.Admitted,
		"spent_cached_bound_key":   slack,
		"spent_owner_pre":          preOwner,
		"spent_owner_after_kill":   ownerAfter.Admitted,
	})
}

// recovery is how the keys of a dead owner were answered by the others
// after its crash.
type recovery struct {
	Answers, Degraded int
	// FirstAnswer is from the crash to the first answer (by the partition
	// policy or a new owner) of a call sent after it.
	FirstAnswer time.Duration
	// MaxWait is the longest such a call waited.
	MaxWait time.Duration
	// Takeover is from the crash to the first call sent after which every
	// answer names a live owner and is not degraded; -1 if that never came.
	Takeover time.Duration
}

// measureRecovery measures the answers of family fam, owned by the node
// named dead, in the calls to the nodes idx sent after at.
func measureRecovery(recs []callRec, items []*ringlimitv1.CheckItem, fam, dead string, idx []int, at time.Time) recovery {
	rc := recovery{FirstAnswer: -1, Takeover: -1}
	var firstGood time.Time
	keep := sentTo(idx, at, at.Add(time.Hour))
	for k := range recs {
		r := &recs[k]
		if !keep(r) {
			continue
		}
		good := r.res != nil
		for j, it := range items {
			if it.Name != fam || r.res == nil {
				continue
			}
			res := r.res[j]
			if res.Status == ringlimitv1.Status_STATUS_ERROR {
				good = false
				continue
			}
			rc.Answers++
			if res.Degraded {
				rc.Degraded++
			}
			if res.Degraded || res.Owner != dead {
				if w := r.end.Sub(at); rc.FirstAnswer < 0 || w < rc.FirstAnswer {
					rc.FirstAnswer = w
				}
			}
			if res.Degraded || res.Owner == dead {
				good = false
			}
		}
		rc.MaxWait = max(rc.MaxWait, r.end.Sub(r.start))
		if !good {
			firstGood = time.Time{}
		} else if firstGood.IsZero() {
			firstGood = r.start
		}
	}
	if !firstGood.IsZero() {
		rc.Takeover = firstGood.Sub(at)
	}
	return rc
}
