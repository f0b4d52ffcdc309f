package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestFenceFloodBounded: a client that sends one owner-mode check each for
// many fresh keys, with membership stable, leaves no more fences than the
// key budget holds records (issues 14/15, a memory flood), under a budget
// of keys (MaxKeys) or of bytes (MaxKeyBytes). Each key gets a fence
// (about 144 bytes, not charged to the budget); before, a fence outlived
// its record, evicted or swept idle, in store.fenced, and was dropped only
// at a membership change that moved its key away: 2000 fresh keys under a
// budget of 64 keys left 2000 fences.
func TestFenceFloodBounded(t *testing.T) {
	const budget, flood = 64, 2000
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
	}{
		{"MaxKeys", func(c *Config) { c.MaxKeys = budget }},
		{"MaxKeyBytes", func(c *Config) { c.MaxKeyBytes = budget * recordCharge(len("key-0000")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, tc.tweak, "a", "b")
			a := nw.nodes["a"]
			peak, over := 0, 0
			for i, key := range keysOwnedBy(t, "a", []string{"a", "b"}, flood) {
				req := check.Request{Key: key, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner}
				if r := nw.checkAnswered(a, req); !r.Allowed {
					t.Fatalf("check %d of %s: %+v, want admitted", i, key, r)
				}
				peak = max(peak, a.st.nfences)
				// The fences beyond the owned records, at each step: b's
				// share of its budget for backups fills, and the backups
				// it no longer keeps raise no fence (backup.go), so the
				// later keys go by the policy (local-share: local buckets,
				// which take a's records' room).
				now := 0
				for i := range a.st.shards {
					now += a.st.shards[i].own.len()
				}
				over = max(over, a.st.nfences-now)
				if a.st.maxBytes > 0 && a.st.bytes > a.st.maxBytes {
					t.Fatalf("after %d keys: %d bytes charged, over the budget of %d", i+1, a.st.bytes, a.st.maxBytes)
				}
			}
			owned := 0
			for i := range a.st.shards {
				owned += a.st.shards[i].own.len()
			}
			t.Logf("after %d fresh keys: %d fences (%d loose; at most %d), %d owned records, %d keys stored, %d bytes charged",
				flood, a.st.nfences, len(a.st.fenced), peak, owned, a.metrics.Keys.Load(), a.st.bytes)
			if over > 1 {
				t.Errorf("during the flood: up to %d fences more than owned records (at most %d fences), want at most 1 (the one being checked)", over, peak)
			}
			if a.st.nfences > owned || len(a.st.fenced) != 0 {
				t.Errorf("%d fences, %d loose, for %d owned records: want at most the records', none loose", a.st.nfences, len(a.st.fenced), owned)
			}
			// Once the keys have refilled and the sweeps ran: none left.
			nw.run(2*time.Minute + 2*a.cfg.SweepInterval)
			owned = 0
			for i := range a.st.shards {
				owned += a.st.shards[i].own.len()
			}
			t.Logf("after the sweeps: %d fences (%d loose), %d owned records", a.st.nfences, len(a.st.fenced), owned)
			if a.st.nfences != 0 || owned != 0 {
				t.Errorf("after the sweeps: %d fences, %d owned records: want none", a.st.nfences, owned)
			}
		})
	}
}

// TestEvictedFenceKeepsHold: a spent owned key evicted under the key
// budget takes its fence with it (store.forgetFence), and the key's next
// fence starts from bound 0; but a hold that a later membership change
// puts on the key's fence (resetFences: its backup target reported
// failed) must hold its next fence too. As TestFenceHoldsAfterTargetFailed,
// with the key evicted from its owner a between the load and the cut: a,
// cut off with s, sees its target tg fail first and takes s as the key's
// target, while the majority takes the key over from tg's backup. a's
// record of the key is gone, so a starts it again from a fresh bucket (the
// eviction's cost, budget.go); had its fence been forgotten with nothing
// to say that the key's partition is held, s's acknowledgements would have
// let a admit from that fresh bucket beside the majority's new owner (with
// store.newFence not taking its partition's holds: 190 admitted on a key
// of 100 an hour, 40 + 100 by a + 50; with them, and on main, where the
// fence outlived the record: 90). The key is evicted by cached views, so
// that a holds no fence at the change: resetFences must visit the
// forgotten holds all the same (it looked at them only when some fence was
// left: 190).
func TestEvictedFenceKeepsHold(t *testing.T) {
	all := []string{"a", "b", "c", "d", "e"}
	const budget = 16
	tweak := func(cfg *Config) {
		withWait(cfg)
		cfg.Policy = check.PolicyFailClosed
		cfg.MaxKeys = budget
	}
	nw := newTestNet(t, tweak, all...)
	a := nw.nodes["a"]
	key, tg, s := keyTargets(t, all)
	minority := []string{"a", s}
	majority := without(all, minority...)
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{majority[0]}, key, l, 40*5*time.Millisecond, nil)
	// Fresh keys of another's, checked through a in cached mode, evict the
	// key there: a holds no fence at all then (the membership change must
	// still visit the forgotten holds).
	for _, k := range keysOwnedBy(t, majority[0], all, 4*budget) {
		nw.checkAnswered(a, check.Request{Key: k, Hits: 1, Limit: l, Mode: check.ModeCached})
	}
	if isOwned(a, key) {
		t.Fatalf("a still holds %s after %d fresh keys under a budget of %d", key, 4*budget, budget)
	}
	t.Logf("a holds %d fences before the cut", a.st.nfences)
	cutOff, taken := targetFailsFirst(t, nw, all, minority, tg, key, l)
	total := first.admitted + cutOff.admitted + taken.admitted
	t.Logf("target %s, then %s; admitted %d, %d on the cut-off side (%v), %d on the majority's (%v)",
		tg, s, first.admitted, cutOff.admitted, cutOff.byNode, taken.admitted, taken.byNode)
	if total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestEvictedFenceKeepsJoinHold: TestJoinedTargetOnCutOffSideRaisesNothing
// with the key evicted from its owner a (its fence forgotten with the
// record) before the cut and e's join: the join's hold (holdForOldTarget:
// e's acknowledgements raise nothing until tg's show that tg knows e) must
// hold the key's next fence too, or a admits from its fresh record on e's
// acknowledgements beside tg's takeover (with store.newFence not taking
// its partition's holds: 190 admitted on a key of 100 an hour, 40 + 100
// by a + 50; with them, 90; on main, where the fence outlived the record,
// 100: a admitted 10 more from its fresh record within the old fence's
// bound).
func TestEvictedFenceKeepsJoinHold(t *testing.T) {
	before, _, _, key, tg := joinTargetKey(t)
	const budget = 16
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed; cfg.MaxKeys = budget }
	nw := newTestNet(t, tweak, before...)
	a := nw.nodes["a"]
	l := perHour(100)
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	first := runRequestLoad(t, nw, []string{"a"}, req, 40*5*time.Millisecond, nil)
	for _, k := range keysOwnedBy(t, "a", before, 4*budget) {
		if k != key {
			nw.checkAnswered(a, check.Request{Key: k, Hits: 1, Limit: l, Mode: check.ModeOwner})
		}
	}
	if isOwned(a, key) {
		t.Fatalf("a still holds %s after %d fresh keys under a budget of %d", key, 4*budget, budget)
	}
	cutJoinTake(t, nw, tweak, req, key, tg, first)
}

// TestLooseFenceSettledAtSweep: a fence whose record leaves the store while
// a check waits on it stays in store.fenced; once nothing waits on it (here
// the check timed out, its key's target cut off, and no record came back)
// the next sweep forgets it (store.settleLoose).
func TestLooseFenceSettledAtSweep(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b")
	nw.isolate("b")
	p := checkAsync(a, nw.now, check.Request{Key: key, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner, Policy: check.PolicyFailClosed})
	s := a.st.shardOf(key)
	e := a.st.lookupOwned(s, key)
	if p.done || e == nil || e.fen == nil || len(e.fen.holds) != 1 {
		t.Fatalf("check done %v, record %+v: want it waiting on the record's fence", p.done, e)
	}
	a.st.removeEntry(s, key, e)
	if len(a.st.fenced) != 1 || a.st.nfences != 1 {
		t.Fatalf("fenced %d, nfences %d: want the fence loose", len(a.st.fenced), a.st.nfences)
	}
	nw.run(a.cfg.RequestTimeout)
	if !p.done || p.resps[0].Allowed {
		t.Fatalf("check: done %v, %+v: want it decided by fail-closed", p.done, p.resps[0])
	}
	nw.run(2 * a.cfg.SweepInterval)
	if len(a.st.fenced) != 0 || a.st.nfences != 0 {
		t.Errorf("a sweep later: fenced %d, nfences %d: want none", len(a.st.fenced), a.st.nfences)
	}
}
