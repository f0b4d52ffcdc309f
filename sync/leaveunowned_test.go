package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestLeavingNodeHandsUnownedStateToLateMember: the fault checker's owner
// seed 759 (-notify 2.5s) at the core. n3 owns a key on the ring of {n1,
// n2, n3}. n1 is killed and the others see it fail; n2 announces its
// leave. n1 restarts (Joining, default policy fail-closed) knowing n1 and
// n3; n3 does not know it yet and drops what it sends. n3 spends the key,
// then leaves: on its ring without itself (n1 failed, n2 departed) no one
// owns the key. Then n3 learns of n1, still leaving. n1's checks, sent to
// n3, are answered "leaving"; n1 takes the key and decides it. On main
// n3's state stayed a cached view there and n1 started the key drained as
// of its own start, before n3 spent it: the refill in between counted
// twice. Now n3 hands the state to n1 when it learns of it, ahead of the
// answers, and n1 decides on it. Owner and leased mode, fail-closed, a key
// of 100 per 100 s (1 a second, burst 100).
func TestLeavingNodeHandsUnownedStateToLateMember(t *testing.T) {
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeLeased} {
		t.Run(mode.String(), func(t *testing.T) { leavingHandsUnowned(t, mode) })
	}
}

// leavingScene is the common start of the two tests below: n3 has spent
// the key and left (n1 failed, n2 departed), n1 restarted Joining.
type leavingScene struct {
	nw        *testNet
	n1        *Node
	key       string
	req       check.Request
	spentFrom time.Time
	spent     ownerLoad
}

// leavingStart plays the scene to n3's leave.
func leavingStart(t *testing.T, mode check.Mode) leavingScene {
	all := []string{"n1", "n2", "n3"}
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, all...)
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: 100 * time.Second}

	// n1 is killed; n2 and n3 see it fail.
	nw.isolate("n1")
	nw.nodes["n1"] = nil
	nw.names = []string{"n2", "n3"}
	nw.failNode([]string{"n2", "n3"}, []string{"n1"}, "n2", "n3")
	nw.heal()
	nw.run(time.Second)
	// A key n3 owns all along (not one of n1's that it took over).
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		_, taken := nw.nodes["n3"].takeoverStart(k)
		if ownerOn(t, k, all...) == "n3" && nw.nodes["n3"].view.owner(k) == "n3" && !taken && ownerOn(t, k, "n1", "n3") == "n3" {
			key = k
		}
	}
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: mode, Policy: check.PolicyFailClosed}

	// n1 restarts knowing n1 and n3; n3 does not know it. 10 s later n3
	// spends the key.
	nw.names = []string{"n2", "n3", "n1"}
	n1 := nw.add("n1", func(cfg *Config) { tweak(cfg); cfg.Incarnation = 7; cfg.Joining = true })
	n1.SetMembers(nw.now, []string{"n1", "n3"})
	nw.run(10 * time.Second)
	spentFrom := nw.now
	spent := runRequestLoad(t, nw, []string{"n3"}, req, 150*5*time.Millisecond, nil)

	// n2 leaves; n3 takes its announcement, then leaves with no one on its
	// ring (n1 failed, n2 departed).
	nw.nodes["n2"].Leave(nw.now)
	nw.run(time.Second)
	nw.nodes["n3"].Leave(nw.now)
	nw.run(time.Second)
	return leavingScene{nw: nw, n1: n1, key: key, req: req, spentFrom: spentFrom, spent: spent}
}

func leavingHandsUnowned(t *testing.T, mode check.Mode) {
	sc := leavingStart(t, mode)
	nw, n1, key, req, spentFrom, spent := sc.nw, sc.n1, sc.key, sc.req, sc.spentFrom, sc.spent
	// Then n3 learns of n1.
	nw.nodes["n2"] = nil
	nw.names = []string{"n3", "n1"}
	nw.setMembers([]string{"n1", "n3"}, "n3")
	res := runRequestLoad(t, nw, []string{"n1"}, req, 2*time.Second, nil)
	// What refilled since n3 began to spend the key, and one hit of
	// rounding.
	bound := int(nw.now.Sub(spentFrom)/time.Second) + 1
	t.Logf("%s: n3 admitted %d; n1 %d of %d (%d degraded), at most %d refilled since n3 spent it; n1's state %d left",
		key, spent.admitted, res.admitted, res.checks, res.degraded, bound, remainingOn(n1, nw.now, key))
	if spent.admitted != 100 {
		t.Fatalf("n3 admitted %d, want 100", spent.admitted)
	}
	if res.admitted > bound {
		t.Errorf("n1 admitted %d after n3 spent the key, want at most %d (the refill since)", res.admitted, bound)
	}
	if res.admitted == 0 {
		t.Errorf("n1 admitted nothing, want the refill since n3 spent the key (%d)", bound)
	}
}

// TestLeftUnannouncedOwnerDrainedFromTheChange: as
// TestLeavingNodeHandsUnownedStateToLateMember, but n3 stops before it
// learns of n1 (gossip slow to tell it), so its state of the key goes
// nowhere, and n1 learns of n3's leave from gossip. Before, n1 started the
// key drained as of its own start, before n3 spent it; now as of the
// change that gave it the key (noteLeftUnannounced), after n3's last
// admission.
func TestLeftUnannouncedOwnerDrainedFromTheChange(t *testing.T) {
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeLeased} {
		t.Run(mode.String(), func(t *testing.T) { leftUnannounced(t, mode) })
	}
}

func leftUnannounced(t *testing.T, mode check.Mode) {
	sc := leavingStart(t, mode)
	nw, n1, key, req, spentFrom, spent := sc.nw, sc.n1, sc.key, sc.req, sc.spentFrom, sc.spent

	// n3 and n2 stop; gossip tells n1 that n3 has left.
	nw.isolate("n3")
	nw.nodes["n2"], nw.nodes["n3"] = nil, nil
	nw.names = []string{"n1"}
	n1.SetMembers(nw.now, []string{"n1"})
	res := runRequestLoad(t, nw, []string{"n1"}, req, 2*time.Second, nil)
	bound := int(nw.now.Sub(spentFrom)/time.Second) + 1
	t.Logf("%s: n3 admitted %d; n1 %d of %d (%d degraded), at most %d refilled since n3 spent it", key, spent.admitted, res.admitted, res.checks, res.degraded, bound)
	if spent.admitted != 100 {
		t.Fatalf("n3 admitted %d, want 100", spent.admitted)
	}
	if res.admitted > bound {
		t.Errorf("n1 admitted %d after n3 spent the key, want at most %d (the refill since)", res.admitted, bound)
	}
	if res.admitted == 0 {
		t.Errorf("n1 admitted nothing, want the refill since it took the key")
	}
}
