package sync

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestFoldedGrantNotSettledByMember: a grant handed to the owner for a
// holder that is not a member of its view (zz: cut off and declared dead,
// or not seen yet) still holds the owner's bucket while zz may spend it,
// whatever another holder settles. a owns a key of 10 per 2 s (burst 10);
// b hands it a grant of 3 to b and one of 5 to zz expiring a nanosecond
// sooner. With the caps merge, zz's grant was folded into b's
// (addHandedGrant: its tokens added to the key's latest grant), so b
// settling its own grant (lease_settled) counted zz's 5 spent with it:
// the cap lifted, and 2.5 s later a admitted its full bucket of 10 while
// zz could still spend its 5, 15 in a moment for an envelope of 10 plus
// what 5 per second adds. Now a grant folded for want of a member's name
// is held by no member (foldedHolder), which no settle or spend report
// releases before its expiry.
func TestFoldedGrantNotSettledByMember(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 2 * time.Second}
	nw, a, key, req := handedOwner(t, ttl, l)
	nw.checkAnswered(a, req)
	id := nw.now.Add(ttl - 100*time.Millisecond).UnixNano()
	stepHandoffGrants(nw, "b", "a", 1,
		&peerv1.LeaseGrant{Key: key, To: "b", Id: id, Held: 3},
		&peerv1.LeaseGrant{Key: key, To: "zz", Id: id - 1, Held: 5})
	a.Step(nw.now, &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
		Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1, Items: []*peerv1.FlushItem{
			{Key: key, Limit: limitToWire(l), LeaseSettled: id}}}}})
	nw.run(2500 * time.Millisecond)
	admitted := answeredAdmitted(nw, a, req, 20)
	t.Logf("a admitted %d at +2.5s, zz's grant of 5 live", admitted)
	if admitted > 5 {
		t.Errorf("a admitted %d at +2.5s while zz's grant of 5 was live, want at most 10 - 5: b's settle released zz's tokens", admitted)
	}
}

// TestLostOwnerStatesBounded: a, with a budget of 64 keys, is on a
// minority side with b, c, d and e lost to a partition; b hands it 10,000 distinct keys' states of one hit of
// 60 a minute (full again within a second), all of them c's on a's ring,
// then a victim's, spent for an hour. a keeps each for c
// (keepHandedForLost, lostowner.go), to hand back when c is live. At the
// caps merge it kept all 10,001 states, charged to a budget that stopped
// nothing, each found by a scan of all those kept before. Now they are a
// side structure (budget.go): at most MaxKeys, room made by dropping
// those full again soonest, so the victim's is kept.
func TestLostOwnerStatesBounded(t *testing.T) {
	const flood = 10_000
	members := []string{"a", "b", "c", "d", "e"}
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget }, members...)
	a := nw.nodes["a"]
	a.SetMembership(nw.now, []string{"a", "b"}, []string{"c", "d", "e"}) // a minority side
	keys := keysOwnedBy(t, "c", members, flood+1)
	victim, keys := keys[flood], keys[:flood]
	state := oneHitState(t, perMinute(60), nw.now)
	seq := stepHandoffStates(nw, "b", "a", 1, keys, state)
	stepHandoffStates(nw, "b", "a", seq, []string{victim}, spentState(t, perHour(10), nw.now))
	kept, victimKept := 0, false
	for _, ks := range a.dur.forLost["c"] {
		kept++
		victimKept = victimKept || ks.Key == victim
	}
	t.Logf("a keeps %d states for c (MaxKeys %d), the victim's: %v", kept, floodBudget, victimKept)
	if kept > floodBudget {
		t.Errorf("a keeps %d states for c, want at most MaxKeys = %d", kept, floodBudget)
	}
	if !victimKept {
		t.Errorf("the victim's spent state was not kept for c")
	}
}

// TestKeptGrantsNamesShared: a, on a minority side with c lost, keeps the
// states of 64 keys of c handed by b, then b hands it 256 grants of each
// (maxKeyGrants), every one to a holder of its own with a name of
// MaxKeyLen bytes. a keeps the grants for c with the states
// (keepGrantsFor, keptgrants.go), each a copy (grantCopy): at the caps
// merge with a copy of its holder's name, charged to no budget (16 MiB
// of names for 64 keys). Now a kept grant's holder is the member's name
// as the view holds it, or, for a holder that is not a member,
// foldedHolder (its owner folds it, wirelimits.go): no name is copied.
func TestKeptGrantsNamesShared(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e"}
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget; cfg.LeaseTTL = 5 * time.Second }, members...)
	a := nw.nodes["a"]
	a.SetMembership(nw.now, []string{"a", "b"}, []string{"c", "d", "e"}) // a minority side
	keys := keysOwnedBy(t, "c", members, floodBudget)
	stepHandoffStates(nw, "b", "a", 1, keys, spentState(t, perHour(10), nw.now))
	var gs []*peerv1.LeaseGrant
	for _, key := range keys {
		for j := range maxKeyGrants {
			to := fmt.Sprintf("%04d", j) + strings.Repeat("x", a.cfg.MaxKeyLen-4)
			gs = append(gs, &peerv1.LeaseGrant{Key: key, To: to, Id: nw.now.Add(time.Second).UnixNano() + int64(j), Held: 1})
		}
	}
	for seq := uint64(100); len(gs) > 0; seq++ {
		k := min(len(gs), a.cfg.MaxBatch)
		stepHandoffGrants(nw, "b", "a", seq, gs[:k]...)
		gs = gs[k:]
	}
	var kept, names int64
	for _, g := range a.dur.grantsForLost["c"] {
		kept++
		if memberName(a.view, g.To) == "" && g.To != foldedHolder {
			names += int64(len(g.To))
		}
	}
	t.Logf("a keeps %d grants for c, %d bytes of holders' names copied", kept, names)
	if kept == 0 {
		t.Fatalf("a keeps no grant for c: not the scene")
	}
	if names > 0 {
		t.Errorf("a keeps %d bytes of holders' names copied in %d grants, want none", names, kept)
	}
}

// TestUnrecordedHandedKeyWaitEnds: a key handed off beyond the handed
// marks' cap (noteHanded, MaxKeys) is not recorded, and a closed check of
// it waits for its previous owner (closedAwait). The wait ends with that
// owner's "not owner": c joins a and b with a budget of 64 keys, a hands
// it 64 keys of a partition c awaits from a (all recorded), then a key of
// the same partition with one hit of 10 an hour taken. A closed check of
// that key at c probes a, whose answer resolves the mark; c then decides
// the key on the state a handed (8 left after the check), not on a fresh
// bucket (9) nor by the policy (degraded).
func TestUnrecordedHandedKeyWaitEnds(t *testing.T) {
	tweak := func(cfg *Config) { failClosed(cfg); cfg.MaxKeys = floodBudget }
	nw := newTestNet(t, tweak, "a", "b")
	c := nw.add("c", tweak)
	nw.names = []string{"a", "b", "c"}
	nw.setMembers(nw.names, "c")
	var fromA []string
	part := -1
	for i := 0; len(fromA) < floodBudget+1; i++ {
		k := fmt.Sprintf("flood-%d", i)
		id := c.view.ring.PartitionOf(k)
		if m, ok := c.view.await[id]; ok && m.open != nil && m.from == "a" && (part < 0 || id == part) {
			part = id
			fromA = append(fromA, k)
		}
	}
	victim := fromA[floodBudget]
	l := perHour(10)
	seq := stepHandoffStates(nw, "a", "c", 1, fromA[:floodBudget], spentState(t, l, nw.now))
	stepHandoffStates(nw, "a", "c", seq, []string{victim}, oneHitState(t, l, nw.now))
	if _, waits := c.closedAwait(c.view, victim); !waits || c.handedKeys != floodBudget {
		t.Fatalf("the victim waits: %v, %d keys recorded; want it not recorded, the cap (%d) reached", waits, c.handedKeys, floodBudget)
	}
	nw.setMembers(nw.names, "a", "b")
	r := nw.checkAnswered(c, check.Request{Key: victim, Hits: 1, Limit: l, Mode: check.ModeOwner})
	t.Logf("closed check of the unrecorded key at c: allowed %v, %d left, degraded %v, err %v", r.Allowed, r.Remaining, r.Degraded, r.Err)
	if !r.Allowed || r.Remaining != 8 || r.Degraded {
		t.Errorf("allowed %v with %d left (degraded %v), want allowed with 8 left: decided on the handed state", r.Allowed, r.Remaining, r.Degraded)
	}
	if _, waits := c.closedAwait(c.view, victim); waits {
		t.Errorf("the victim still waits for a after a's answer")
	}
}
