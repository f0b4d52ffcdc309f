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

// Floods of the structures outside the key budget (issue 15, budget.go's
// "Side structures"): a member hands off, or leases, as many distinct keys
// as it likes within the wire limits, and each structure must stay within
// its cap, leaving the keys it cannot record on the safe side.

// floodBudget is MaxKeys in the flood tests; floodKeys the keys of a flood.
const (
	floodBudget = 64
	floodKeys   = 100_000
)

// spentState returns the encoded state of a bucket of l drained at now.
func spentState(t *testing.T, l bucket.Limit, now time.Time) []byte {
	t.Helper()
	b, err := bucket.New(l, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Drain(now, b.Config().Capacity()); err != nil {
		t.Fatal(err)
	}
	st, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// oneHitState returns the encoded state of a bucket of l that took one
// hit at now.
func oneHitState(t *testing.T, l bucket.Limit, now time.Time) []byte {
	t.Helper()
	one, err := bucket.New(l, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.Take(now, 1); err != nil {
		t.Fatal(err)
	}
	state, err := one.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// stepHandoffStates steps, into to, hand-offs from the member from of a
// state of each of keys, MaxBatch a message, numbered from seq on; it
// returns the next number.
func stepHandoffStates(nw *testNet, from, to string, seq uint64, keys []string, state []byte) uint64 {
	n := nw.nodes[to]
	for len(keys) > 0 {
		k := min(len(keys), n.cfg.MaxBatch)
		items := make([]*peerv1.KeyState, k)
		for i, key := range keys[:k] {
			items[i] = &peerv1.KeyState{Key: key, State: state}
		}
		n.Step(nw.nowOf(to), &peerv1.Envelope{From: from, To: to, Incarnation: nw.nodes[from].cfg.Incarnation,
			Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: seq, Items: items}}})
		seq++
		keys = keys[k:]
	}
	return seq
}

// handedIn returns the keys the open marks of v record as handed.
func handedIn(v *view) int {
	k := 0
	for _, a := range v.await {
		if a.open != nil {
			k += len(a.open.handed)
		}
	}
	return k
}

// TestHandedMarksBounded: c joins a and b (only c knows it yet: its marks
// of the partitions it gains are open, await.go), with a budget of 64
// keys. a hands it off 100,000 distinct keys, a spent state each. On main
// the marks recorded every key a handed of a partition c gained from it
// (about a sixth of them, 16,000 and more), whatever MaxKeys. Now they
// record at most MaxKeys; a key handed beyond that is not recorded, and a
// closed check of it still waits for a (closedAwait), as before its
// hand-off: never decided on a fresh or drained bucket.
func TestHandedMarksBounded(t *testing.T) {
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.MaxKeys = floodBudget }, "a", "b")
	c := nw.add("c", func(cfg *Config) { withWait(cfg); cfg.MaxKeys = floodBudget })
	nw.names = []string{"a", "b", "c"}
	nw.setMembers(nw.names, "c")
	var keys, fromA []string
	for i := range floodKeys {
		k := fmt.Sprintf("flood-%d", i)
		keys = append(keys, k)
		if a, ok := c.view.await[c.view.ring.PartitionOf(k)]; ok && a.open != nil && a.from == "a" {
			fromA = append(fromA, k)
		}
	}
	stepHandoffStates(nw, "a", "c", 1, keys, spentState(t, perHour(10), nw.now))
	got := handedIn(c.view)
	t.Logf("a handed %d keys, %d of partitions c awaits from a; the marks record %d (MaxKeys %d), %d not recorded",
		len(keys), len(fromA), got, floodBudget, c.Metrics().FloodCapped.Load())
	if got > floodBudget || c.handedKeys != int64(got) {
		t.Errorf("the marks record %d keys (counted %d), want at most MaxKeys = %d", got, c.handedKeys, floodBudget)
	}
	waiting := 0
	for _, k := range fromA {
		prev, waits := c.closedAwait(c.view, k)
		if waits && prev != "a" {
			t.Fatalf("%s: a closed check waits for %q, want a", k, prev)
		}
		if waits {
			waiting++
		}
	}
	if want := len(fromA) - got; waiting != want {
		t.Errorf("%d keys of a's partitions wait for a, want the %d not recorded", waiting, want)
	}
	// a answers "not owner" naming c for a recorded key: its mark is
	// resolved, and what it recorded no longer counts.
	for id, m := range c.view.await {
		if m.open == nil || len(m.open.handed) == 0 {
			continue
		}
		for k := range m.open.handed {
			c.noteNotOwner(c.view, m.from, k, "c")
			break
		}
		if !m.open.done || c.handedKeys != int64(handedIn(c.view)) {
			t.Errorf("partition %d resolved (%v): %d keys counted, %d recorded", id, m.open.done, c.handedKeys, handedIn(c.view))
		}
		break
	}
}

// TestUnownedStatesBounded: a leaves, then b, with a budget of 64 keys:
// on b's ring no one owns a key, and what it is handed it keeps for the
// key's late owner (leave.go, keepUnowned). a hands it a victim's state,
// spent for an hour, then 100,000 distinct keys' states of one hit of 60 a
// minute each (full again within a second). On main b kept all 100,001,
// about 150 bytes each charged to a budget that stopped nothing. Now it
// keeps at most MaxKeys, and what it gave up is what would be full soonest:
// the victim's state is kept.
func TestUnownedStatesBounded(t *testing.T) {
	nw := bothLeft(t)
	b := nw.nodes["b"]
	victim := "victim"
	seq := stepHandoffStates(nw, "a", "b", 100, []string{victim}, spentState(t, perHour(10), nw.now))
	if b.unowned[victim] == nil {
		t.Fatalf("b keeps no state of %q for its late owner: not the scene (leaving %v)", victim, b.leaving)
	}
	state := oneHitState(t, perMinute(60), nw.now)
	keys := make([]string, floodKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("flood-%d", i)
	}
	stepHandoffStates(nw, "a", "b", seq, keys, state)
	var bytes int64
	for _, ks := range b.unowned {
		bytes += lostCharge(ks)
	}
	t.Logf("b keeps %d states for no owner (%d bytes charged), gave up %d; the victim's kept: %v; partitions to start drained %d of %d",
		len(b.unowned), bytes, b.Metrics().FloodCapped.Load(), b.unowned[victim] != nil, len(b.unownedDrained), b.cfg.Ring.PartitionCount)
	if len(b.unownedDrained) > b.cfg.Ring.PartitionCount {
		t.Errorf("b records %d partitions of dropped states, want at most PartitionCount = %d", len(b.unownedDrained), b.cfg.Ring.PartitionCount)
	}
	if len(b.unowned) > floodBudget || bytes != b.unownedBytes {
		t.Errorf("b keeps %d states (%d bytes, counted %d), want at most MaxKeys = %d", len(b.unowned), bytes, b.unownedBytes, floodBudget)
	}
	if b.unowned[victim] == nil {
		t.Errorf("the victim's spent state was dropped for the flood's, want it kept")
	}
}

// bothLeft returns a network of a and b, of MaxKeys floodBudget, where a
// has left, then b: on b's ring no one owns a key, and b keeps what it is
// handed for the key's late owner (leave.go, keepUnowned).
func bothLeft(t *testing.T) *testNet {
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget }, "a", "b")
	nw.nodes["a"].Leave(nw.now)
	nw.run(time.Second)
	nw.nodes["b"].Leave(nw.now)
	nw.run(time.Second)
	return nw
}

// grantedKey has a, the owner, check key once in owner mode at now, drain
// g tokens of it and grant them to b (leasecap.go, noteGrant).
func grantedKey(t *testing.T, a *Node, key string, l bucket.Limit, g int64, now time.Time) {
	t.Helper()
	checkSync(t, a, now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
	s := a.st.shardOf(key)
	e := a.st.lookupOwned(s, key)
	if e == nil {
		t.Fatalf("%s: no owned record after a check", key)
	}
	if err := e.b.Drain(a.bt(now), g); err != nil {
		t.Fatal(err)
	}
	a.noteGrant(s, e, "b", g, now)
}

// TestStrayGrantsBounded: a owns every key, with a budget of 64, and
// grants b a token of each of 100,000 distinct keys in a moment (LeaseTTL
// 20 s): the budget evicts their records, and each one's grant outlives it
// in shard.strayGrants. On main those held a grant of 99,936 keys, not
// charged to any budget. Now at most MaxKeys; the others are folded into
// the evicted marks (foldGrants).
func TestStrayGrantsBounded(t *testing.T) {
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget; cfg.LeaseTTL = 20 * time.Second }, "a")
	a := nw.nodes["a"]
	for i := range floodKeys {
		grantedKey(t, a, fmt.Sprintf("flood-%d", i), perMinute(60), 1, t0)
	}
	got := a.st.strays()
	t.Logf("a keeps the grants of %d keys with no owned record (MaxKeys %d), folded %d", got, floodBudget, a.Metrics().FloodCapped.Load())
	if got > floodBudget {
		t.Errorf("a keeps stray grants of %d keys, want at most MaxKeys = %d", got, floodBudget)
	}
}

// TestFoldedGrantsKeepCap: a key whose record leaves the store while
// stray grants are full keeps its bucket under its grants when made again
// (foldGrants). a grants b 30 tokens of a key of 60 a minute (burst 60,
// LeaseTTL 20 s), its bucket holding the other 30; the stray grants are
// full (a flood as TestStrayGrantsBounded's) when the record goes. 10 s
// later, the grant still live, a checks the key: kept as a stray, its
// bucket would be held to 60 - 30 = 30 and 29 left after the hit; with
// the grant dropped (the record removed, not evicted: no evicted mark) it
// started fresh, 59 left, while b may still spend its 30. The folded mark
// holds it lower still: 18 left (drained as if full only once the grant
// expires and its 30 tokens have refilled).
func TestFoldedGrantsKeepCap(t *testing.T) {
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxKeys = floodBudget; cfg.LeaseTTL = 20 * time.Second }, "a")
	a := nw.nodes["a"]
	for i := range 4 * floodBudget {
		grantedKey(t, a, fmt.Sprintf("flood-%d", i), perMinute(60), 1, t0)
	}
	const key = "victim"
	grantedKey(t, a, key, perMinute(60), 29, t0) // 1 hit and 29: 30 left, 29 out
	s := a.st.shardOf(key)
	a.noteGrant(s, a.st.lookupOwned(s, key), "b", 1, t0) // 30 out in all
	if a.st.strays() < floodBudget {
		t.Fatalf("stray grants of %d keys, want them full (%d)", a.st.strays(), floodBudget)
	}
	a.st.removeEntry(s, key, a.st.lookupOwned(s, key))
	at := t0.Add(10 * time.Second)
	checkSync(t, a, at, check.Request{Key: key, Hits: 1, Limit: perMinute(60), Mode: check.ModeOwner})
	got := remainingOn(a, at, key)
	t.Logf("made again 10 s later, the grant of 30 live: %d left (kept as a stray: 29, dropped: 59)", got)
	if got > 29 {
		t.Errorf("%d tokens left, want at most 29: the grants' 30 may still be spent", got)
	}
}

// TestHandedGrantsHeap: b hands a, the owner of 64 keys, 256 grants of
// each (maxKeyGrants), every one to a holder of its own with a name of
// MaxKeyLen bytes: within the wire limits. On main a counted all 16,384
// one by one, each with a copy of its holder's name: 16 MiB of names on
// 64 keys, charged to no budget. Now a grant to a holder that is not a
// member folds into the key's grant held by no member (foldGrant): 64
// grants and no name copied, every grant's tokens still held.
func TestHandedGrantsHeap(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1_000_000, Period: time.Hour}
	nw, a, _, _ := handedOwner(t, ttl, l)
	keys := keysOwnedBy(t, "a", nw.names, floodBudget)
	var gs []*peerv1.LeaseGrant
	for _, key := range keys {
		nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
		for j := range maxKeyGrants {
			to := fmt.Sprintf("%04d", j) + strings.Repeat("x", a.cfg.MaxKeyLen-4)
			gs = append(gs, &peerv1.LeaseGrant{Key: key, To: to, Id: nw.now.Add(ttl/2).UnixNano() + int64(j), Held: 1})
		}
	}
	for seq := uint64(1); len(gs) > 0; seq++ {
		k := min(len(gs), a.cfg.MaxBatch)
		stepHandoffGrants(nw, "b", "a", seq, gs[:k]...)
		gs = gs[k:]
	}
	var grants, names, held int64
	for _, key := range keys {
		for _, g := range liveGrantsOf(a, key) {
			grants++
			held += g.held()
			if memberName(a.view, g.to) == "" && g.to != foldedHolder {
				names += int64(len(g.to))
			}
		}
	}
	t.Logf("a holds %d grants of %d keys (%d tokens), %d bytes of holders' names", grants, len(keys), held, names)
	if most := int64(len(keys) * maxKeyGrants); grants > most {
		t.Errorf("a holds %d grants, want at most %d (maxKeyGrants a key)", grants, most)
	}
	if most := int64(len(keys) * a.cfg.MaxKeyLen); names > most {
		t.Errorf("a holds %d bytes of holders' names, want at most a name a key (%d)", names, most)
	}
	if want := int64(len(keys) * maxKeyGrants); held != want {
		t.Errorf("the grants hold %d tokens, want all %d (folded, not dropped)", held, want)
	}
}
