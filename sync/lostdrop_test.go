package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestDroppedLostOwnerStateKeepsKeySpent: a, with a budget of 64 keys, is
// on a minority side with c, d and e lost to a partition; b hands it a
// victim's state, a key of c's of 60 a minute spent (full again in a
// minute), then 1,000 other keys' of c's, each of 10 an hour spent (full
// again in an hour). a keeps them for c (keepHandedForLost) within the
// side structure's cap (roomForLost): it drops the states full again
// soonest, the victim's first. Then c is live again, and a hands it what
// it kept (handBackToLost), not the victim's state. On main c started the
// victim fresh and admitted its whole burst again on top of what was
// spent a moment before. Now a records the partitions of the states it
// dropped for c and hands them after the states (Handoff.drained_partitions,
// as dropped.go's for unowned states), and c starts their keys drained as
// of the hand-off: it admits what refilled since, whatever the policy.
func TestDroppedLostOwnerStateKeepsKeySpent(t *testing.T) {
	for _, pol := range []check.Policy{check.PolicyFailClosed, check.PolicyFailOpen} {
		t.Run(pol.String(), func(t *testing.T) {
			tweak := func(cfg *Config) { cfg.MaxKeys = floodBudget }
			nw := newTestNet(t, tweak, lostMembers...)
			victim := keysOwnedBy(t, "c", lostMembers, 1)[0]
			spentAt := droppedLostScene(t, nw, victim)
			nw.nodes["a"].SetMembership(nw.now, lostMembers, nil) // c, d and e are back
			nw.run(time.Second)
			victimLoad(t, nw, "c", victim, pol, spentAt)
		})
	}
}

// TestDroppedLostPartitionFollowsItsOwner: as
// TestDroppedLostOwnerStateKeepsKeySpent, but f joins as c comes back,
// and the victim's partition moves from c to f. a hands c the states
// kept for it (c passes on those of f's keys, onHandoff), and the
// partitions of the states it dropped to their owners in its view
// (handDrained), the victim's to f, which starts it drained as of the
// hand-off.
func TestDroppedLostPartitionFollowsItsOwner(t *testing.T) {
	tweak := func(cfg *Config) { cfg.MaxKeys = floodBudget }
	nw := newTestNet(t, tweak, lostMembers...)
	joined := append(slices.Clone(lostMembers), "f")
	victim := keyMoving(t, "c", "f", lostMembers, joined)
	spentAt := droppedLostScene(t, nw, victim)
	f := nw.add("f", tweak)
	f.SetMembers(nw.now, joined)
	nw.names = joined
	for _, name := range lostMembers {
		nw.nodes[name].SetMembership(nw.now, joined, nil) // c, d and e are back, f joins
	}
	nw.run(time.Second)
	victimLoad(t, nw, "f", victim, check.PolicyFailClosed, spentAt)
}

// TestDroppedLostOwnerStateBoundsDeposedState: as
// TestDroppedLostOwnerStateKeepsKeySpent, but c had checked the victim
// once before it was cut off (59 left), and comes back from its own
// minority side: it drops its owned state aside (deposed, quorum.go,
// kept) and awaits a's hand-off. None comes of the victim, and c started
// the victim from its kept state, refilled while the other side spent it.
// The drained partition bounds the kept state too, as the dropped state
// would have been merged into it (boundDrainedOwned).
func TestDroppedLostOwnerStateBoundsDeposedState(t *testing.T) {
	tweak := func(cfg *Config) { withWait(cfg); cfg.MaxKeys = floodBudget; cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, lostMembers...)
	victim := keyMoving(t, "c", "a", lostMembers, []string{"a", "b", "d", "e"}) // a awaited by c, back
	c := nw.nodes["c"]
	req := check.Request{Key: victim, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner, Policy: check.PolicyFailClosed}
	if first := runRequestLoad(t, nw, []string{"c"}, req, 5*time.Millisecond, nil); first.admitted != 1 {
		t.Fatalf("c admitted %d of one first check of the victim, want 1", first.admitted)
	}
	c.SetMembership(nw.now, []string{"c"}, []string{"a", "b", "d", "e"}) // c's own minority side
	spentAt := droppedLostScene(t, nw, victim)
	c.SetMembership(nw.now, lostMembers, nil)
	if c.dur.kept[victim] == nil {
		t.Fatalf("c keeps no state of the victim aside on its return: not the scene")
	}
	nw.nodes["a"].SetMembership(nw.now, lostMembers, nil)
	nw.run(time.Second)
	victimLoad(t, nw, "c", victim, check.PolicyFailClosed, spentAt)
}

// lostMembers are the members of the lost-owner drop tests.
var lostMembers = []string{"a", "b", "c", "d", "e"}

// droppedLostScene plays the scene of TestDroppedLostOwnerStateKeepsKeySpent
// to the state of victim, a key of c's, dropped at a, kept for c. It
// returns when the victim was spent.
func droppedLostScene(t *testing.T, nw *testNet, victim string) time.Time {
	const flood = 1000
	a := nw.nodes["a"]
	a.SetMembership(nw.now, []string{"a", "b"}, []string{"c", "d", "e"}) // a minority side
	keys := slices.DeleteFunc(keysOwnedBy(t, "c", lostMembers, flood+1), func(k string) bool { return k == victim })[:flood]
	spentAt := nw.now
	seq := stepHandoffStates(nw, "b", "a", 1, []string{victim}, spentState(t, perMinute(60), nw.now))
	if !keptForLost(a, "c", victim) {
		t.Fatalf("a keeps no state of %q for c: not the scene", victim)
	}
	stepHandoffStates(nw, "b", "a", seq, keys, spentState(t, perHour(10), nw.now))
	if keptForLost(a, "c", victim) {
		t.Fatalf("a still keeps the victim's state among %d: not the scene", len(a.dur.forLost["c"]))
	}
	t.Logf("a keeps %d states for c, gave up %d, the victim's among them", len(a.dur.forLost["c"]), a.Metrics().FloodCapped.Load())
	return spentAt
}

// keptForLost reports whether n keeps a state of key for the lost member
// owner.
func keptForLost(n *Node, owner, key string) bool {
	return slices.ContainsFunc(n.dur.forLost[owner], func(ks *peerv1.KeyState) bool { return ks.Key == key })
}

// TestDroppedLostPartitionsForgottenWithOwner: the partitions recorded
// for a lost owner go with the states kept for it when it is forgotten
// (neither live nor lost: FailedMemberTTL, or left): its keys are others'
// then, and nothing is left to hand, nor kept for ever.
func TestDroppedLostPartitionsForgottenWithOwner(t *testing.T) {
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget }, lostMembers...)
	a := nw.nodes["a"]
	droppedLostScene(t, nw, keysOwnedBy(t, "c", lostMembers, 1)[0])
	if len(a.dur.forLostDrained["c"]) == 0 {
		t.Fatalf("a records no partition dropped for c: not the scene")
	}
	a.SetMembership(nw.now, []string{"a", "b"}, nil) // c, d and e forgotten
	if len(a.dur.forLostDrained) != 0 || len(a.unownedDrained) != 0 {
		t.Errorf("a holds %d lost owners' dropped partitions and %d to hand after c was forgotten, want none",
			len(a.dur.forLostDrained), len(a.unownedDrained))
	}
}
