package sync

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// TestDroppedUnownedStateKeepsKeySpent: a leaves, then b, with a budget of
// 64 keys: on b's ring no one owns a key, and what it is handed it keeps
// for the key's late owner (leave.go, keepUnowned). a hands it a victim's
// state, a key of 60 a minute spent (full again in a minute), then 1,000
// other keys' states, each of 10 an hour spent (full again in an hour):
// at the cap b drops the states full again soonest, the victim's first.
// Then c starts, and b learns of it: c owns every key on b's ring and is
// handed what b kept, not the victim's state. On main c started the
// victim fresh and admitted its whole burst again on top of what was
// spent a moment before. Now b hands c, with the states, the partitions
// of the states it dropped (Handoff.drained_partitions), and c starts
// their keys drained as of the hand-off (noteDrained): it admits what
// refilled since, whatever the request's policy.
func TestDroppedUnownedStateKeepsKeySpent(t *testing.T) {
	for _, pol := range []check.Policy{check.PolicyFailClosed, check.PolicyFailOpen} {
		t.Run(pol.String(), func(t *testing.T) { droppedUnowned(t, pol) })
	}
}

// droppedScene plays the scene of TestDroppedUnownedStateKeepsKeySpent
// to the victim's state dropped at b, leaving with no one on its ring,
// the victim a key that every one of owners owns on a ring of b and
// itself. It returns the network, the victim and when it was spent.
func droppedScene(t *testing.T, owners ...string) (*testNet, string, time.Time) {
	nw := bothLeft(t)
	b := nw.nodes["b"]
	var victim string
	for i := 0; victim == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if !slices.ContainsFunc(owners, func(o string) bool { return ownerOn(t, k, "b", o) != o }) {
			victim = k
		}
	}
	spentAt := nw.now
	seq := stepHandoffStates(nw, "a", "b", 100, []string{victim}, spentState(t, perMinute(60), nw.now))
	if b.unowned[victim] == nil {
		t.Fatalf("b keeps no state of %q for its late owner: not the scene", victim)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("flood-%d", i)
	}
	stepHandoffStates(nw, "a", "b", seq, keys, spentState(t, perHour(10), nw.now))
	if b.unowned[victim] != nil {
		t.Fatalf("b still keeps the victim's state among %d: not the scene", len(b.unowned))
	}
	t.Logf("b keeps %d states for no owner, gave up %d, the victim's among them", len(b.unowned), b.Metrics().FloodCapped.Load())
	return nw, victim, spentAt
}

// victimLoad runs a second of owner-mode checks of victim of policy pol
// on owner, and checks that it admitted at most what refilled since
// spentAt, and something.
func victimLoad(t *testing.T, nw *testNet, owner, victim string, pol check.Policy, spentAt time.Time) {
	t.Helper()
	req := check.Request{Key: victim, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner, Policy: pol}
	res := runRequestLoad(t, nw, []string{owner}, req, 2*time.Second, nil)
	// What refilled since the victim was spent, and one hit of rounding.
	bound := int(nw.now.Sub(spentAt)/time.Second) + 1
	t.Logf("%s: %s admitted %d of %d (%d degraded), at most %d refilled since the victim was spent",
		victim, owner, res.admitted, res.checks, res.degraded, bound)
	if res.admitted > bound {
		t.Errorf("%s admitted %d of the victim's key after its state was dropped, want at most %d (the refill since it was spent)", owner, res.admitted, bound)
	}
	if res.admitted == 0 {
		t.Errorf("%s admitted nothing, want the refill since the hand-off", owner)
	}
}

func droppedUnowned(t *testing.T, pol check.Policy) {
	nw, victim, spentAt := droppedScene(t, "c")
	// c starts; b learns of it and hands it what it kept.
	c := nw.add("c", nil)
	c.SetMembers(nw.now, []string{"b", "c"})
	nw.names = []string{"a", "b", "c"}
	nw.nodes["b"].SetMembers(nw.now, []string{"b", "c"})
	nw.run(time.Second)
	victimLoad(t, nw, "c", victim, pol, spentAt)
}

// TestDroppedPartitionsFollowAbandonedHandoff: as
// TestDroppedUnownedStateKeepsKeySpent, but b's hand-off to c is lost on
// the way (a cut) and c stops before acknowledging it; then b learns of
// d. The partitions go on to d with the states (abandon, keepDrainedOf),
// and d starts the victim drained as of their hand-off.
func TestDroppedPartitionsFollowAbandonedHandoff(t *testing.T) {
	nw, victim, spentAt := droppedScene(t, "c", "d")
	b := nw.nodes["b"]
	c := nw.add("c", nil)
	c.SetMembers(nw.now, []string{"b", "c"})
	nw.names = []string{"a", "b", "c"}
	nw.cutBetween([]string{"b"}, []string{"c"})
	b.SetMembers(nw.now, []string{"b", "c"})
	nw.run(10 * time.Millisecond)
	if len(b.unownedDrained) != 0 {
		t.Fatalf("b still holds %d partitions after learning of c: not the scene", len(b.unownedDrained))
	}
	nw.nodes["c"] = nil
	d := nw.add("d", nil)
	d.SetMembers(nw.now, []string{"b", "d"})
	nw.names = []string{"a", "b", "d"}
	b.SetMembers(nw.now, []string{"b", "d"})
	nw.run(time.Second)
	victimLoad(t, nw, "d", victim, check.PolicyFailClosed, spentAt)
}

// stepDrained steps into a a hand-off from b naming ids as drained
// partitions.
func stepDrained(nw *testNet, seq uint64, ids []uint32) {
	nw.nodes["a"].Step(nw.nowOf("a"), &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
		Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: seq, DrainedPartitions: ids}}})
}

// TestDrainedPartitionsBounded: a member hands a hand-off naming four
// times PartitionCount partitions as drained, most of them out of range
// (wirelimits.go, validDrained). The receiver records at most
// PartitionCount, each a partition of its ring, and counts the message
// malformed; a list of valid partitions is recorded whole, and counts
// nothing.
func TestDrainedPartitionsBounded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	count := a.cfg.Ring.PartitionCount
	ids := make([]uint32, 4*count)
	for i := range ids {
		ids[i] = uint32(i * 3) // from 0 to 12 times PartitionCount
	}
	stepDrained(nw, 1, ids)
	t.Logf("%d partitions named, %d recorded, %d malformed", len(ids), len(a.drained), a.Metrics().Malformed.Load())
	if len(a.drained) > count {
		t.Errorf("%d partitions recorded, want at most PartitionCount = %d", len(a.drained), count)
	}
	for id := range a.drained {
		if id < 0 || id >= count {
			t.Errorf("partition %d recorded, out of [0, %d)", id, count)
		}
	}
	if got := a.Metrics().Malformed.Load(); got == 0 {
		t.Errorf("Malformed 0, want the message counted")
	}
	before := a.Metrics().Malformed.Load()
	clear(a.drained)
	stepDrained(nw, 2, []uint32{0, 7, uint32(count - 1)})
	if len(a.drained) != 3 || a.Metrics().Malformed.Load() != before {
		t.Errorf("valid partitions: %d recorded (want 3), Malformed %d (want %d)", len(a.drained), a.Metrics().Malformed.Load(), before)
	}
}

// FuzzDrainedPartitions hands a node arbitrary drained partitions, twice
// (a replay), and checks what must hold whatever a member sends: no
// panic, at most PartitionCount recorded, each in range, and a key of a
// partition recorded starts drained as of the hand-off: a check at once
// (answered within a second: a key of 60 a minute) admits nothing.
func FuzzDrainedPartitions(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 3, 0xfc})
	f.Add([]byte{0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids []uint32
		for ; len(data) >= 4; data = data[4:] {
			ids = append(ids, uint32(data[0])<<24|uint32(data[1])<<16|uint32(data[2])<<8|uint32(data[3]))
		}
		nw := newTestNet(t, nil, "a", "b")
		a := nw.nodes["a"]
		count := a.cfg.Ring.PartitionCount
		for seq := uint64(1); seq <= 2; seq++ {
			stepDrained(nw, seq, ids)
			if len(a.drained) > count {
				t.Fatalf("%d partitions recorded, want at most %d", len(a.drained), count)
			}
		}
		for id := range a.drained {
			if id < 0 || id >= count {
				t.Fatalf("partition %d recorded, out of [0, %d)", id, count)
			}
		}
		for i := range 20_000 {
			key := fmt.Sprintf("key-%d", i)
			if _, ok := a.drained[ring.PartitionOf(key, count)]; !ok || a.view.owner(key) != "a" {
				continue
			}
			if r := nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner}); r.Allowed {
				t.Fatalf("%s, of a drained partition, admitted within a second of the hand-off", key)
			}
			break
		}
	})
}

// TestLapsedDroppedPartitionsNotHanded: b, leaving with no one on its
// ring, is handed 1,000 keys of one hit of 60 a minute each (full again
// within a second), past its cap of 64: it records the partition of every
// state it drops (keepDroppedState). Its late owner c comes 2 s later,
// when those states would all be full again: b hands it none of the
// partitions (handDrained), and c starts no key drained for them.
func TestLapsedDroppedPartitionsNotHanded(t *testing.T) {
	nw := bothLeft(t)
	b := nw.nodes["b"]
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("flood-%d", i)
	}
	stepHandoffStates(nw, "a", "b", 100, keys, oneHitState(t, perMinute(60), nw.now))
	marked := len(b.unownedDrained)
	nw.run(2 * time.Second)
	c := nw.add("c", nil)
	c.SetMembers(nw.now, []string{"b", "c"})
	nw.names = []string{"a", "b", "c"}
	b.SetMembers(nw.now, []string{"b", "c"})
	nw.run(time.Second)
	t.Logf("b dropped %d states, of %d partitions; c holds %d partitions drained", b.Metrics().FloodCapped.Load(), marked, len(c.drained))
	if marked == 0 {
		t.Fatalf("b recorded no partition of the states it dropped: not the scene")
	}
	if len(c.drained) != 0 || len(b.unownedDrained) != 0 {
		t.Errorf("c holds %d partitions drained, b %d, want none: the dropped states were all full again", len(c.drained), len(b.unownedDrained))
	}
}

// TestDroppedStateBoundsOwnedRecord: as
// TestDroppedUnownedStateKeepsKeySpent, but c decides the victim once,
// as its owner on its ring of b and c, before b learns of it: c's record
// of the victim is fresh when the partitions come. Before, c kept its
// record and admitted its burst less one after the hand-off; now the
// record is drained as of the hand-off (boundDrainedOwned), as the
// victim's state, had b kept it, would have been merged into it.
func TestDroppedStateBoundsOwnedRecord(t *testing.T) {
	nw, victim, spentAt := droppedScene(t, "c")
	c := nw.add("c", nil)
	c.SetMembers(nw.now, []string{"b", "c"})
	nw.names = []string{"a", "b", "c"}
	req := check.Request{Key: victim, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner}
	if r := nw.checkAnswered(c, req); !r.Allowed || !isOwned(c, victim) {
		t.Fatalf("c's first check of %s: allowed %v, owned %v: not the scene", victim, r.Allowed, isOwned(c, victim))
	}
	nw.nodes["b"].SetMembers(nw.now, []string{"b", "c"})
	nw.run(time.Second)
	victimLoad(t, nw, "c", victim, check.PolicyFailClosed, spentAt)
}
