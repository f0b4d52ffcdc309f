package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// keysHeldBy returns n keys that owner owns among members and whose
// backups go to holder, none of them skip.
func keysHeldBy(t *testing.T, owner, holder string, members []string, n int, skip string) []string {
	t.Helper()
	var out []string
	for _, k := range keysOwnedBy(t, owner, members, 20*n) {
		if k != skip && keyHolder(t, k, owner, members) == holder {
			out = append(out, k)
			if len(out) == n {
				break
			}
		}
	}
	if len(out) < n {
		t.Fatalf("%d keys of %s held by %s, want %d", len(out), owner, holder, n)
	}
	return out
}

// TestHeldFloodKeepsFence (issue 15): a flood of fresh keys fills the
// backups a holder may keep (MaxKeys), after which it drops the backups of
// later keys; it acknowledged them all the same, so the owner's fence rose
// for a key of which the holder kept no state, and whoever started from
// the holder's backups started that key from nothing. Here a stranger's
// owner-mode checks of 4×MaxKeys fresh keys of c's, held by b, fill b;
// the victim, c's key, is then spent in owner mode (fail-closed) through
// a, and c is killed and back at once: b gives it back the states it
// holds, none of the victim's, and c admits the key's 100 again. On main:
// 100 before the restart, 100 after it, 200 on a key of 100 an hour. Now
// b's acknowledgement names the items it did not keep, their fences do
// not rise, and the victim's checks go by the policy (fail-closed:
// rejected) until b has room: 0 before the restart and 0 after it (b
// stays full of the flood's keys, of an hour's limit).
func TestHeldFloodKeepsFence(t *testing.T) {
	members := []string{"a", "b", "c"}
	const budget = 16
	nw := newTestNet(t, func(cfg *Config) {
		localShareNode(cfg)
		if cfg.Self == "b" {
			cfg.MaxKeys = budget
		}
	}, members...)
	b := nw.nodes["b"]
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	for _, k := range keysHeldBy(t, "c", "b", members, 4*budget, key) {
		nw.checkAnswered(nw.nodes["a"], check.Request{Key: k, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner})
	}
	nw.run(time.Second)
	t.Logf("after the flood: b holds %d backups, dropped %d", len(b.dur.held), b.Metrics().BackupKeysDropped.Load())
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	before := runRequestLoad(t, nw, []string{"a"}, req, 120*5*time.Millisecond, nil)
	nw.run(time.Second)
	held := b.heldState(key) != nil
	nw.nodes["c"] = nil
	nw.now = nw.now.Add(time.Millisecond)
	c := nw.add("c", func(cfg *Config) { localShareNode(cfg); cfg.Incarnation = 7 })
	c.SetMembers(nw.now, members)
	after := runRequestLoad(t, nw, members, req, 2*time.Second, nil)
	t.Logf("victim: admitted %d before c's restart (%d degraded; b holds its backup: %v), %d after it (%v)",
		before.admitted, before.degraded, held, after.admitted, after.byNode)
	if total := before.admitted + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestHeldFloodSwept: after a flood of fresh keys, the holder's backups go
// once the keys have refilled, and later keys' backups are kept again.
// a owns 500 fresh keys, checked once each in owner mode, under a budget
// of 64 keys on both nodes: b keeps 64 backups and drops the rest. Before,
// a held state with a reserve was never swept (fenced drains the reserve
// at the sweep's instant, so it never looked refilled): b still held its
// 64 flood backups 10 minutes later, and every later key's backup was
// dropped (acknowledged as kept, before TestHeldFloodKeepsFence's fix; now
// its checks went by the policy). Now a, forgetting a fence with its
// record (swept idle or evicted, all spent within the bound), sends b the
// key's last state with reserve 0 (a release), and b sweeps it once
// refilled.
func TestHeldFloodSwept(t *testing.T) {
	const budget, flood = 64, 500
	members := []string{"a", "b"}
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.MaxKeys = budget }, members...)
	a, b := nw.nodes["a"], nw.nodes["b"]
	keys := keysOwnedBy(t, "a", members, flood+1)
	for _, k := range keys[:flood] {
		nw.checkAnswered(a, check.Request{Key: k, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner})
	}
	nw.run(time.Second)
	t.Logf("after the flood: b holds %d backups, dropped %d", len(b.dur.held), b.Metrics().BackupKeysDropped.Load())
	nw.run(2*time.Minute + 2*b.cfg.SweepInterval)
	held := len(b.dur.held)
	t.Logf("after the sweeps: b holds %d backups", held)
	if held > 1 {
		t.Errorf("after the flood's keys refilled and the sweeps: b holds %d backups, want at most 1", held)
	}
	victim := keys[flood]
	req := check.Request{Key: victim, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	res := runRequestLoad(t, nw, []string{"a"}, req, 50*5*time.Millisecond, nil)
	nw.run(time.Second)
	t.Logf("a later key: admitted %d of %d (%d degraded); b holds its backup: %v", res.admitted, res.checks, res.degraded, b.heldState(victim) != nil)
	if res.admitted != 50 || b.heldState(victim) == nil {
		t.Errorf("a later key: admitted %d of 50, b holds its backup: %v; want 50 and held", res.admitted, b.heldState(victim) != nil)
	}
}

// TestHeldFloodMakesRoom: a full holder keeps a new key's backup by
// dropping a released state that has refilled, as its next sweep would,
// rather than drop the newcomer. As TestHeldFloodSwept, with b's sweep
// an hour apart: only the room made for the later key lets b keep it.
// Without (b still full of released, refilled flood states): the later
// key admitted 0 of 50 (fail-closed), its backup dropped.
func TestHeldFloodMakesRoom(t *testing.T) {
	const budget, flood = 64, 500
	members := []string{"a", "b"}
	nw := newTestNet(t, func(cfg *Config) {
		withWait(cfg)
		cfg.MaxKeys = budget
		if cfg.Self == "b" {
			cfg.SweepInterval = time.Hour
		}
	}, members...)
	a, b := nw.nodes["a"], nw.nodes["b"]
	keys := keysOwnedBy(t, "a", members, flood+1)
	for _, k := range keys[:flood] {
		nw.checkAnswered(a, check.Request{Key: k, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner})
	}
	nw.run(2*time.Minute + 2*a.cfg.SweepInterval)
	t.Logf("after the flood's keys refilled: b holds %d backups, %d released", len(b.dur.held), len(b.dur.released))
	victim := keys[flood]
	req := check.Request{Key: victim, Hits: 1, Limit: perHour(100), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	res := runRequestLoad(t, nw, []string{"a"}, req, 50*5*time.Millisecond, nil)
	t.Logf("a later key: admitted %d of %d (%d degraded); b holds %d backups, its backup: %v", res.admitted, res.checks, res.degraded, len(b.dur.held), b.heldState(victim) != nil)
	if res.admitted != 50 || b.heldState(victim) == nil {
		t.Errorf("a later key: admitted %d of 50, b holds its backup: %v; want 50 and held", res.admitted, b.heldState(victim) != nil)
	}
}
