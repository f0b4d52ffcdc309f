package sync

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestAbandonedHandoffKeepsGrants: the live lease grants handed off with
// a key's state (handGrants, sendGrants) are routed again with the state
// when the member they went to leaves before acknowledging them
// (abandon). a owns the key and grants c a lease; b joins and the key
// moves to it, but a's hand-offs to b are lost; b leaves and the key
// comes back to a, which merges the state it had handed off. The key
// then rests until a's bucket would have refilled, and just before the
// lease expires c spends it while a admits what its bucket holds.
// Before, abandon re-routed the hand-offs' states only: a's grants had
// gone with the key (handGrants forgets them here), so a held its bucket
// under none and admitted the lease on top of a full bucket.
func TestAbandonedHandoffKeepsGrants(t *testing.T) {
	const ttl = 5 * time.Second
	tweak := func(c *Config) { c.LeaseTTL = ttl }
	before, after := []string{"a", "c"}, []string{"a", "b", "c"}
	nw := newTestNet(t, tweak, before...)
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyMoving(t, "a", "b", before, after)
	ad, l, granted := grantedLease(t, nw, a, c, key)
	grantedAt := nw.now
	// b joins: a hands the key (state and grants) off to it, lost.
	lost := dropHandoffs(nw, "a", "b")
	nw.add("b", tweak)
	nw.names = after
	nw.nodes["b"].SetMembers(nw.now, after)
	nw.setMembers(after, "a", "c")
	nw.run(50 * time.Millisecond)
	if *lost == 0 {
		t.Fatalf("a handed nothing off to b")
	}
	// b leaves before acknowledging: the key is a's again.
	nw.names = before
	nw.setMembers(before, "a", "c")
	nw.drop = nil
	nw.run(50 * time.Millisecond)
	if !isOwned(a, key) {
		t.Fatalf("a does not own the key after b left")
	}
	nw.run(ttl - 400*time.Millisecond - nw.now.Sub(grantedAt))
	spent := ad.spendThenDrain(c, a, granted)
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on c's lease across the abandoned hand-off (%d lost)", granted, spent, *lost))
}

// grantedLease has c check key, a key of a's of 10 per 10 s in leased
// mode, until a grants it a lease of 2 or more: the admissions so far,
// the key's limit and the tokens granted.
func grantedLease(t *testing.T, nw *testNet, a, c *Node, key string) (*admissions, bucket.Limit, int64) {
	t.Helper()
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 10 * time.Second} // 1 a second, burst 10
	ad := &admissions{nw: nw, req: check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}}
	granted := ad.untilGranted(c, a)
	if granted < 2 {
		t.Fatalf("granted %d, want a lease of 2 or more", granted)
	}
	return ad, l, granted
}

// dropHandoffs has the net drop every hand-off from from to to, and
// returns the count of those dropped.
func dropHandoffs(nw *testNet, from, to string) *int {
	lost := new(int)
	nw.drop = func(f, t string, env *peerv1.Envelope) bool {
		if f == from && t == to && env.GetHandoff() != nil {
			*lost++
			return true
		}
		return false
	}
	return lost
}

// TestFollowedHandoffKeepsGrants: the live lease grants in a hand-off
// still unacknowledged follow its key to the key's next owner with its
// state (followHandoffs). a owns the key and grants c a lease; b joins and
// the key moves to it, but the link a->b drops a's hand-offs (state and
// grants) for good; d joins and the key moves to it: a sends d the state
// it had handed b, and the grants. The key then rests until d's bucket
// would have refilled, and just before the lease expires c spends it
// while d admits what its bucket holds. Before, only the state followed:
// d held its bucket under no grant, and admitted the lease on top of a
// full bucket.
func TestFollowedHandoffKeepsGrants(t *testing.T) {
	const ttl = 5 * time.Second
	tweak := func(c *Config) { c.LeaseTTL = ttl }
	before, mid, after := []string{"a", "c"}, []string{"a", "b", "c"}, []string{"a", "b", "c", "d"}
	var key string
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if ownerOn(t, k, before...) == "a" && ownerOn(t, k, mid...) == "b" && ownerOn(t, k, after...) == "d" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key owned by a, then b, then d")
	}
	nw := newTestNet(t, tweak, before...)
	a, c := nw.nodes["a"], nw.nodes["c"]
	ad, l, granted := grantedLease(t, nw, a, c, key)
	grantedAt := nw.now
	lost := dropHandoffs(nw, "a", "b")
	nw.add("b", tweak)
	nw.names = mid
	nw.nodes["b"].SetMembers(nw.now, mid)
	nw.setMembers(mid, "a", "c")
	nw.run(20 * time.Millisecond)
	if *lost == 0 {
		t.Fatalf("a handed nothing off to b")
	}
	d := nw.add("d", tweak)
	nw.names = after
	d.SetMembers(nw.now, after)
	nw.setMembers(after, "a", "b", "c")
	nw.run(50 * time.Millisecond)
	if !isOwned(d, key) {
		t.Fatalf("d does not own the key after its join")
	}
	nw.run(ttl - 400*time.Millisecond - nw.now.Sub(grantedAt))
	spent := ad.spendThenDrain(c, d, granted)
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on c's lease across the followed hand-off (%d lost)", granted, spent, *lost))
}

// TestBackupRunKeepsHeldDroppedForRoom: a backup of a key that a full
// holder drops, within the same batch, to make room for an earlier item
// (roomForHeld: the key was released and has refilled) is held afresh or
// named dropped, never acknowledged as kept in a state no longer held.
// onBackup looks the held states of a run of items up before any is
// merged; before, the key's item was merged into the state roomForHeld
// had just dropped (out of the map), and acknowledged as kept: its owner's
// fence rose on a backup the holder did not have (1 key).
func TestBackupRunKeepsHeldDroppedForRoom(t *testing.T) {
	const budget = 4
	members := []string{"a", "h"}
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = budget }, members...)
	h := nw.nodes["h"]
	keys := keysOwnedBy(t, "a", members, budget+1)
	x, fresh := keys[0], keys[budget]
	l := perMinute(60)
	state := func(spent int64, at time.Time) []byte {
		b, err := bucket.New(l, at)
		if err != nil {
			t.Fatal(err)
		}
		if spent > 0 {
			_ = b.Drain(at, spent)
		}
		s, _ := b.AppendBinary(nil)
		return s
	}
	p := h.view.peers["a"]
	// h holds budget keys of a's, x among them, then x is released.
	var items []*peerv1.KeyState
	for _, k := range keys[:budget] {
		items = append(items, &peerv1.KeyState{Key: k, State: state(10, nw.now), Reserve: 6})
	}
	h.onBackup(nw.now, p, 1, &peerv1.Backup{Seq: 1, Items: items})
	h.onBackup(nw.now, p, 1, &peerv1.Backup{Items: []*peerv1.KeyState{{Key: x, State: state(10, nw.now)}}, Release: true})
	if len(h.dur.held) != budget || len(h.dur.released) != 1 {
		t.Fatalf("h holds %d, released %d; want %d, 1", len(h.dur.held), len(h.dur.released), budget)
	}
	// x has refilled; a backs up a fresh key, then x's next fence's state.
	nw.now = nw.now.Add(2 * time.Minute)
	nw.take("h", "a")
	h.onBackup(nw.now, p, 1, &peerv1.Backup{Seq: 2, Items: []*peerv1.KeyState{
		{Key: fresh, State: state(1, nw.now), Reserve: 6},
		{Key: x, State: state(30, nw.now), Reserve: 6},
	}})
	var ack *peerv1.BackupAck
	for _, env := range nw.take("h", "a") {
		if a := env.GetBackupAck(); a != nil {
			ack = a
		}
	}
	if ack == nil {
		t.Fatalf("no acknowledgement")
	}
	named := slices.Contains(ack.Dropped, 1)
	held := h.heldState(x) != nil
	t.Logf("x: held %v, named dropped %v (dropped %v); fresh held %v", held, named, ack.Dropped, h.heldState(fresh) != nil)
	if !held && !named {
		t.Errorf("x's backup acknowledged as kept, but h holds no state of x")
	}
}

// TestKnownMembersBoundedForGone: the forgotten fences' holds (store.gone)
// look for their joiner among the bounded known_members of a BackupAck
// (boundMembers), as the fences do: a name beyond maxAskMembers is not
// looked at. Before, releaseGone was given the whole list, so the work of
// one acknowledgement was the partitions held from its sender times the
// names it lists, unbounded (a list of 100,000 names against the 1,021
// partitions of a join hold: about 10^8 comparisons).
func TestKnownMembersBoundedForGone(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b", "c")
	checkAsync(a, nw.now, check.Request{Key: key, Hits: 1, Limit: perMinute(10), Mode: check.ModeOwner})
	to, seq := takeFirstBackup(t, nw, a)
	a.st.gone = map[int]*fence{0: {holdFrom: to, holdFor: "j"}}
	known := make([]string, maxAskMembers, maxAskMembers+1)
	for i := range known {
		known[i] = fmt.Sprintf("m%d", i)
	}
	known = append(known, "j") // beyond the bound
	ackBackupKnowing(nw, a, to, seq, known)
	if g := a.st.gone[0]; g == nil || g.holdFrom != to {
		t.Errorf("the hold from %s for j was ended by a name beyond maxAskMembers (%d): %+v", to, maxAskMembers, g)
	}
}
