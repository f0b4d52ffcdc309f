package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// failClosed is the tweak of the tests below: the hand-off wait on, policy
// fail-closed.
func failClosed(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }

// rejoined is failClosed for a node started again (Config.Joining), with a
// new incarnation.
func rejoined(cfg *Config) { failClosed(cfg); cfg.Joining = true; cfg.Incarnation = 7 }

// TestRestartedAloneStartsDrained: the only member restarts (the others
// left gracefully before). Every state of its keys went with it; it
// started them on full buckets and admitted a second burst (the fault
// checker's seed 728: 3 nodes, n1 left, n3 restarted gracefully handing
// its keys to n2, n2 crashed and restarted alone: +30.14 on k2).
func TestRestartedAloneStartsDrained(t *testing.T) {
	nw := newTestNet(t, failClosed, "a")
	key := "key-1"
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 120*5*time.Millisecond, nil)
	nw.nodes["a"] = nil
	nw.now = nw.now.Add(time.Second)
	a := nw.add("a", rejoined)
	a.SetMembership(nw.now, []string{"a"}, nil)
	after := runOwnerLoad(t, nw, []string{"a"}, key, l, 4*time.Second, nil)
	t.Logf("admitted %d, then %d after the restart (%d degraded)", first.admitted, after.admitted, after.degraded)
	if first.admitted != 100 {
		t.Fatalf("admitted %d before the restart, want 100", first.admitted)
	}
	if total := first.admitted + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestRestartedOwnerAndHolderStartDrained: a key's owner crashes, then
// the member holding its backups, before anyone saw the first fail. The
// holder restarts seeing the owner failed (its partition orphaned, decided
// by the policy), the owner restarts and awaits the holder's hand-off,
// which has nothing: it started the key on a full bucket (the fault
// checker's seeds 564 and 868: +2.0 and +15.0).
func TestRestartedOwnerAndHolderStartDrained(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, failClosed, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // c owns it, b holds its backups
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 120*5*time.Millisecond, nil)
	nw.nodes["c"], nw.nodes["b"] = nil, nil
	nw.now = nw.now.Add(time.Second)
	b := nw.add("b", rejoined)
	b.SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	nw.nodes["a"].SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	mid := runOwnerLoad(t, nw, []string{"a", "b"}, key, l, time.Second, nil)
	c := nw.add("c", func(cfg *Config) { rejoined(cfg); cfg.Incarnation = 8 })
	c.SetMembership(nw.now, members, nil)
	nw.nodes["a"].SetMembership(nw.now, members, nil)
	nw.nodes["b"].SetMembership(nw.now, members, nil)
	after := runOwnerLoad(t, nw, members, key, l, 4*time.Second, nil)
	t.Logf("admitted %d, %d with b back and c failed, %d with c back (%v, %d degraded)",
		first.admitted, mid.admitted, after.admitted, after.byNode, after.degraded)
	if first.admitted != 100 {
		t.Fatalf("admitted %d before the crashes, want 100", first.admitted)
	}
	if total := first.admitted + mid.admitted + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestDrainedStartCost: what a key first checked right after a node's
// start admits over 4 s at 50 per 5 s (rate 10/s), by how the node
// started and its policy: drained as of the start only for a Joining node
// under fail-closed (the rate over the time since the start, 40), a full
// bucket otherwise (its burst and the rate, 90).
func TestDrainedStartCost(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 50, Period: 5 * time.Second}
	for _, tc := range []struct {
		name    string
		joining bool
		pol     check.Policy
		want    int
	}{
		{"joining, fail-closed", true, check.PolicyFailClosed, 40},
		{"new cluster, fail-closed", false, check.PolicyFailClosed, 90},
		{"joining, local-share", true, check.PolicyLocalShare, 90},
		{"joining, fail-open", true, check.PolicyFailOpen, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, func(cfg *Config) {
				withWait(cfg)
				cfg.Policy, cfg.Joining = tc.pol, tc.joining
			}, "a")
			got := runOwnerLoad(t, nw, []string{"a"}, "key-1", l, 4*time.Second, nil)
			if d := got.admitted - tc.want; d < -1 || d > 1 {
				t.Errorf("admitted %d in 4 s, want %d (±1)", got.admitted, tc.want)
			}
		})
	}
}

// TestHandoffMergedIntoStateKeptForLostOwner: a member keeps a key's state
// for its lost owner (lostowner.go) and is then handed a later state of
// the key by another member, whose view gives the key to it. The owner in
// its view is lost, so the hand-off became a cached view only; when the
// owner came back it was handed the kept state, older and refilled, and
// decided on it (the fault checker's owner seed 707: 3 nodes, n3 cut off
// took k2 over, then lost its majority and kept k2 for n2; n2 left
// gracefully, handing k2 to n1, which admitted on it, lost its majority in
// turn and handed k2 to n3 at the heal; n3, which had not heard n2 leave,
// handed its kept copy, full, to n2 when it restarted: +2.8).
func TestHandoffMergedIntoStateKeptForLostOwner(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, failClosed, members...)
	key := keyMoving(t, "b", "c", members, []string{"a", "c"}) // b owns it, c holds its backups
	if o := ownerOn(t, key, "a", "b"); o != "b" {
		t.Fatalf("owner of %s on a, b: %s, want b", key, o)
	}
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 30*5*time.Millisecond, nil)
	// c is cut off: it takes the key over from its backup, then finds
	// itself alone and keeps the key's state for b, lost.
	nw.isolate("c")
	nw.nodes["c"].SetMembership(nw.now, []string{"a", "c"}, []string{"b"})
	nw.run(10 * time.Millisecond)
	nw.nodes["c"].SetMembership(nw.now, []string{"c"}, []string{"a", "b"})
	nw.nodes["a"].SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	nw.nodes["b"].SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	nw.run(2 * time.Second)
	mid := runOwnerLoad(t, nw, []string{"a"}, key, l, 20*5*time.Millisecond, nil)
	// b leaves gracefully, handing the key to a, which admits on it, then
	// finds itself alone with c lost: the key is c's on its ring.
	nw.nodes["b"].Leave(nw.now)
	nw.run(time.Second)
	nw.nodes["b"] = nil
	nw.nodes["a"].SetMembership(nw.now, []string{"a"}, nil)
	late := runOwnerLoad(t, nw, []string{"a"}, key, l, 20*5*time.Millisecond, nil)
	nw.nodes["a"].SetMembership(nw.now, []string{"a"}, []string{"c"})
	nw.run(time.Second)
	// The cut heals: a hands the key to c, which never heard b leave.
	nw.heal()
	nw.nodes["a"].SetMembership(nw.now, []string{"a", "c"}, nil)
	nw.nodes["c"].SetMembership(nw.now, []string{"a", "c"}, []string{"b"})
	nw.run(time.Second)
	// b restarts; c hands it what it kept for it.
	b := nw.add("b", rejoined)
	b.SetMembership(nw.now, members, nil)
	nw.nodes["a"].SetMembership(nw.now, members, nil)
	nw.nodes["c"].SetMembership(nw.now, members, nil)
	nw.run(100 * time.Millisecond)
	after := runOwnerLoad(t, nw, members, key, l, 4*time.Second, nil)
	t.Logf("%s: admitted %d, %d with c cut off, %d by a after b left, %d after b's restart (%v, %d degraded)",
		key, first.admitted, mid.admitted, late.admitted, after.admitted, after.byNode, after.degraded)
	if total := first.admitted + mid.admitted + late.admitted + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestNotOwnerAnswerFollowsTheHandoff: a restarted owner probes the
// member that decided its key meanwhile; that member's hand-off to it is
// lost on a link that drops messages silently, and its "not owner" answer
// to a later probe arrives once the link is back, before the hand-off is
// sent again (RequestTimeout later). The owner took the answer to mean
// that the hand-off had come, and decided the key on a fresh bucket
// (the fault checker's owner seed 900: n3's hand-off to n2, restarted,
// dropped by a cut n3->n2; n2 admitted on its own bucket for 0.4 s: +1.1).
func TestNotOwnerAnswerFollowsTheHandoff(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, failClosed, members...)
	key := keyMoving(t, "b", "c", members, []string{"a", "c"}) // b owns it, c takes it over without b
	l := perHour(100)
	// b leaves; c owns the key and spends it.
	nw.nodes["b"].Leave(nw.now)
	nw.run(time.Second)
	nw.nodes["b"] = nil
	nw.nodes["a"].SetMembers(nw.now, []string{"a", "c"})
	nw.nodes["c"].SetMembers(nw.now, []string{"a", "c"})
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 120*5*time.Millisecond, nil)
	// b starts again (a new cluster node as far as it knows: no Joining);
	// c's hand-off to it is dropped on the link c->b, cut for 20 ms.
	nw.cut[[2]string{"c", "b"}] = true
	b := nw.add("b", failClosed)
	b.SetMembership(nw.now, members, nil)
	nw.nodes["a"].SetMembers(nw.now, members)
	nw.nodes["c"].SetMembers(nw.now, members)
	nw.run(20 * time.Millisecond)
	delete(nw.cut, [2]string{"c", "b"})
	after := runOwnerLoad(t, nw, []string{"b"}, key, l, 4*time.Second, nil)
	t.Logf("admitted %d, then %d with b back (%d degraded)", first.admitted, after.admitted, after.degraded)
	if first.admitted != 100 {
		t.Fatalf("admitted %d before b's restart, want 100", first.admitted)
	}
	if total := first.admitted + after.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestHandoffInFlightFollowsTheKey: a member hands a key to its owner,
// back from a cut, on a link that drops it; before it is sent again, a
// node joins and the key moves to it. The owner back from the cut, which
// dropped its own stale state aside to await that hand-off, hands the
// stale state on to the joiner, which decided on it until the hand-off,
// sent again to the member back from the cut and passed on from there,
// came (the fault checker's owner seed 407: 5 nodes, n1 and n2 cut off,
// n6 joining at the heal; n6 admitted on n1's state of before the cut,
// 40 tokens where the majority's had 7, for 150 ms: +3.8).
func TestHandoffInFlightFollowsTheKey(t *testing.T) {
	members := []string{"a", "b", "c"}
	all := []string{"a", "b", "c", "j"}
	nw := newTestNet(t, failClosed, members...)
	var key string
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, members...) == "c" && ownerOn(t, k, "a", "b") == "a" && ownerOn(t, k, all...) == "j" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key owned by c, by a without c, by j with j")
	}
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 30*5*time.Millisecond, nil)
	// c is cut off; a takes the key over and spends it.
	nw.isolate("c")
	nw.nodes["c"].SetMembership(nw.now, []string{"c"}, []string{"a", "b"})
	nw.nodes["a"].SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	nw.nodes["b"].SetMembership(nw.now, []string{"a", "b"}, []string{"c"})
	nw.run(2 * time.Second)
	mid := runOwnerLoad(t, nw, []string{"a", "b"}, key, l, 2*time.Second, nil)
	// The cut heals but for a->c; a hands the key back to c: dropped.
	nw.heal()
	nw.cut[[2]string{"a", "c"}] = true
	nw.nodes["a"].SetMembers(nw.now, members)
	nw.nodes["b"].SetMembers(nw.now, members)
	nw.nodes["c"].SetMembers(nw.now, members)
	nw.run(20 * time.Millisecond)
	// j joins; the key is j's.
	j := nw.add("j", rejoined)
	j.SetMembership(nw.now, all, nil)
	for _, m := range members {
		nw.nodes[m].SetMembers(nw.now, all)
	}
	after := runOwnerLoad(t, nw, []string{"a", "b", "j"}, key, l, 100*time.Millisecond, nil)
	delete(nw.cut, [2]string{"a", "c"})
	late := runOwnerLoad(t, nw, []string{"a", "b", "j"}, key, l, 2*time.Second, nil)
	t.Logf("%s: admitted %d, %d with c cut off, %d after j joined, %d later (%v)", key,
		first.admitted, mid.admitted, after.admitted, late.admitted, after.byNode)
	if total := first.admitted + mid.admitted + after.admitted + late.admitted; total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}
