//go:build e2e

package e2e

import (
	"slices"
	"testing"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// restartWindow is the stretch during which one node of a rolling restart
// is away: calls to it may fail then.
type restartWindow struct {
	node               int
	from, to           time.Time
	stop, ready, joins time.Duration
}

// TestRollingRestart stops every node of three in turn with SIGTERM (docker
// stop: the node hands its keys off and leaves) and starts it again, under
// load. The calls to the other nodes must not fail, and keys spent before
// the restart, in cached and in owner mode, must stay spent: no key goes
// back to a full bucket.
func TestRollingRestart(t *testing.T) {
	c := startCluster(t, clusterSpec{nodes: 3})

	var spentCached, spentOwner, live []*ringlimitv1.CheckItem
	for i := range c.nodes {
		add := func(fam string, mode ringlimitv1.Mode, limit int64, period time.Duration, n int) []*ringlimitv1.CheckItem {
			ks := c.keysOwnedBy(newItem(fam, "", mode, polDefault, limit, period), i, 0, n)
			return family(fam, ks, mode, polDefault, limit, period)
		}
		spentCached = append(spentCached, add("spent-cached", modeCached, spentLimit, spentPeriod, 2)...)
		spentOwner = append(spentOwner, add("spent-owner", modeOwner, spentLimit, spentPeriod, 2)...)
		live = append(live, add("live-owner", modeOwner, unlimited, time.Second, 2)...)
		live = append(live, add("live-cached", modeCached, unlimited, time.Second, 2)...)
	}
	pre := c.exhaust(slices.Concat(spentCached, spentOwner), c.all())
	items := slices.Concat(live, spentCached, spentOwner)
	l := startLoad(t, c, loadSpec{targets: c.all(), interval: 40 * time.Millisecond, items: items})
	start := time.Now()
	time.Sleep(2 * time.Second)

	var windows []restartWindow
	for i := range c.nodes {
		w := restartWindow{node: i, from: time.Now()}
		c.stop(i, 10*time.Second)
		w.stop = time.Since(w.from)
		c.start(i)
		var err error
		if w.ready, err = c.waitReady(i, 30*time.Second); err != nil {
			t.Fatalf("restart of %s: %v", c.nodes[i].name, err)
		}
		if w.joins, err = c.waitMembers(c.all(), c.names(c.all()), 30*time.Second); err != nil {
			t.Errorf("after the restart of %s: %v", c.nodes[i].name, err)
		}
		// The test's gRPC client reconnects within its backoff (500ms).
		w.to = time.Now().Add(time.Second)
		windows = append(windows, w)
		time.Sleep(3 * time.Second)
	}
	recs := l.stop()
	end := time.Now()

	// Calls to a node outside its own restart must all be answered.
	away := func(r *callRec) bool {
		for _, w := range windows {
			if r.node == w.node && !r.start.Before(w.from) && r.start.Before(w.to) {
				return true
			}
		}
		return false
	}
	nfail, ex := failures(c, recs, func(r *callRec) bool { return !away(r) })
	if nfail > 0 {
		t.Errorf("%d calls to nodes that were not restarting failed, e.g. %v", nfail, ex)
	}
	awayFail, _ := failures(c, recs, away)
	slack := cachedSlack(spentLimit, len(c.nodes))
	gotCached, preOverCached := checkSpent(t, c, recs, items, spentCached, pre, slack)
	gotOwner, _ := checkSpent(t, c, recs, items, spentOwner, pre, 0)
	liveOwner := count(recs, items, "live-owner", anytime)
	liveCached := count(recs, items, "live-cached", anytime)

	t.Logf("rolling restart of %d nodes under load: %d calls of %d items, every 40ms to each node, over %v",
		len(c.nodes), len(recs), len(items), end.Sub(start).Round(time.Millisecond))
	var per []map[string]any
	for _, w := range windows {
		t.Logf("%s: SIGTERM to exit %v, start to ready %v, cluster whole again %v later",
			c.nodes[w.node].name, w.stop.Round(time.Millisecond), w.ready.Round(time.Millisecond), w.joins.Round(time.Millisecond))
		per = append(per, map[string]any{"node": c.nodes[w.node].name, "stop_ms": ms(w.stop), "ready_ms": ms(w.ready), "rejoined_ms": ms(w.joins)})
	}
	t.Logf("failed calls: %d to nodes not restarting; %d to the node restarting (expected while it is away)", nfail, awayFail)
	t.Logf("spent keys (limit %d per %v, %d per mode): admitted under load: cached mode %d (bound %d per key), owner mode %d (bound 0)",
		spentLimit, spentPeriod, len(spentCached), gotCached, slack, gotOwner)
	t.Logf("live keys: owner mode %d answers, %d degraded; cached mode %d answers, %d degraded",
		liveOwner.Answers, liveOwner.Degraded, liveCached.Answers, liveCached.Degraded)
	emit(t, "rolling-restart", map[string]any{
		"nodes": len(c.nodes), "calls": len(recs), "items_per_call": len(items), "restarts": per,
		"failed_calls_others": nfail, "failed_calls_restarting": awayFail,
		"spent_keys_per_mode": len(spentCached), "spent_cached_admitted": gotCached, "spent_cached_bound_key": slack, "spent_cached_pre_over": preOverCached,
		"spent_owner_admitted": gotOwner, "live_owner_degraded": liveOwner.Degraded, "live_cached_degraded": liveCached.Degraded,
	})
}
