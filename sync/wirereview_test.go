package sync

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Hostile values of the peer wire fields added for leased mode's grants
// (Handoff.grants, FlushItem.lease_settled, FlushAck.lease_grant_ids) and
// for the join hold (Backup.ask_members, BackupAck.known_members), sent by
// a member: authenticated, but buggy, compromised, or replayed.

// handGrants steps, into to, a hand-off of grants gs from the member from.
func stepHandoffGrants(nw *testNet, from, to string, seq uint64, gs ...*peerv1.LeaseGrant) {
	nw.nodes[to].Step(nw.nowOf(to), &peerv1.Envelope{From: from, To: to, Incarnation: nw.nodes[from].cfg.Incarnation,
		Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: seq, Grants: gs}}})
}

// TestHandedGrantsOverflow: grants handed to the owner whose held tokens
// add up beyond int64 must not undo the cap a real grant holds. a owns a
// key of 10 per 2 s (burst 10) and counts a grant of 5 to c (handed with
// the key, leasecap.go): its bucket is held to 10 - 5. Then b hands it two
// grants whose held overflow the sum of the live grants to -100: the cap
// became 110, and 2.5 s later (the real grant still live, spendable at c)
// a admitted its full bucket of 10 on top of c's 5: 15 in a moment, the
// envelope 10 plus what 5 per second adds. A well-formed hand-off only
// adds grants, so only lowers the cap: the malformed one is refused
// (held > capacity) and the sum of a key's grants is kept within its
// capacity.
func TestHandedGrantsOverflow(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 2 * time.Second}
	nw, a, key, req := handedOwner(t, ttl, l)
	if r := nw.checkAnswered(a, req); !r.Allowed {
		t.Fatalf("first check: %+v", r)
	}
	id := nw.now.Add(ttl - 100*time.Millisecond).UnixNano()
	stepHandoffGrants(nw, "b", "a", 1, &peerv1.LeaseGrant{Key: key, To: "c", Id: id, Held: 5})
	stepHandoffGrants(nw, "b", "a", 2,
		&peerv1.LeaseGrant{Key: key, To: "x", Id: id - 1, Held: math.MaxInt64},
		&peerv1.LeaseGrant{Key: key, To: "y", Id: id - 2, Held: math.MaxInt64 - 5 - 98})
	nw.run(2500 * time.Millisecond)
	admitted := answeredAdmitted(nw, a, req, 20)
	if admitted > 5 {
		t.Errorf("a admitted %d at +2.5s while c's grant of 5 was live, want at most 10 - 5 (over the envelope by %d)", admitted, admitted-5)
	}
	if got := a.Metrics().Malformed.Load(); got < 1 {
		t.Errorf("Malformed %d, want the grant of held > capacity counted", got)
	}
}

// TestHandedGrantsBounded: a hand-off listing thousands of grants on one
// key is not kept one by one: the key's grants are bounded
// (maxKeyGrants), the excess folded into one held by no member, so the memory
// and the work per grant (each is looked for among the key's) stay
// bounded. Before, all 5,000 were kept, and each was compared with all
// the others.
func TestHandedGrantsBounded(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1_000_000, Period: time.Hour}
	nw, a, key, req := handedOwner(t, ttl, l)
	nw.checkAnswered(a, req)
	const n = 5000
	gs := make([]*peerv1.LeaseGrant, n)
	for i := range gs {
		gs[i] = &peerv1.LeaseGrant{Key: key, To: "c", Id: nw.now.Add(ttl/2).UnixNano() + int64(i), Held: 1}
	}
	stepHandoffGrants(nw, "b", "a", 1, gs...)
	got := liveGrantsOf(a, key)
	var held int64
	for _, g := range got {
		held += g.held()
	}
	if len(got) > maxKeyGrants {
		t.Errorf("kept %d grants of the key, want at most %d", len(got), maxKeyGrants)
	}
	if held != n {
		t.Errorf("the key's grants hold %d tokens, want all %d (folded, not dropped)", held, n)
	}
	// The same hand-off again (a replay): nothing more is counted.
	stepHandoffGrants(nw, "b", "a", 2, gs...)
	held = 0
	for _, g := range liveGrantsOf(a, key) {
		held += g.held()
	}
	if len(liveGrantsOf(a, key)) > maxKeyGrants || held > 2*n {
		t.Errorf("after a replay: %d grants holding %d", len(liveGrantsOf(a, key)), held)
	}
}

// TestHandedGrantsMalformed: grants with no key, no holder, a holder name
// longer than a key may be, or held <= 0 or beyond the key's capacity are
// refused and counted (Malformed); a valid one beside them is kept.
func TestHandedGrantsMalformed(t *testing.T) {
	const ttl = 5 * time.Second
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = ttl }, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b", "c")
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: time.Minute}
	nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
	id := nw.now.Add(ttl / 2).UnixNano()
	before := a.Metrics().Malformed.Load()
	stepHandoffGrants(nw, "b", "a", 1,
		nil,
		&peerv1.LeaseGrant{To: "c", Id: id, Held: 1},
		&peerv1.LeaseGrant{Key: key, Id: id + 1, Held: 1},
		&peerv1.LeaseGrant{Key: key, To: strings.Repeat("c", 2000), Id: id + 2, Held: 1},
		&peerv1.LeaseGrant{Key: key, To: "c", Id: id + 3, Held: -4},
		&peerv1.LeaseGrant{Key: key, To: "c", Id: id + 4, Held: 11},
		&peerv1.LeaseGrant{Key: key, To: "c", Id: id + 5, Held: 2},
	)
	if got := a.Metrics().Malformed.Load() - before; got != 6 {
		t.Errorf("Malformed +%d, want 6", got)
	}
	gs := liveGrantsOf(a, key)
	if len(gs) != 1 || gs[0].exp != id+5 || gs[0].held() != 2 {
		t.Errorf("kept %+v, want only the grant of 2", gs)
	}
}

// TestAskMembersBounded: a Backup asking about 10,000 names (one member
// named 10,000 times, and names no one knows) is answered with each known
// member once: the answer is bounded by the receiver's view, not by the
// question. Before, the acknowledgement echoed all 10,000.
func TestAskMembersBounded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	ask := make([]string, 0, 10_000)
	for i := range 10_000 {
		if i%2 == 0 {
			ask = append(ask, "c")
		} else {
			ask = append(ask, "stranger")
		}
	}
	nw.take("a", "b")
	a.Step(nw.now, &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
		Body: &peerv1.Envelope_Backup{Backup: &peerv1.Backup{Seq: 1, AskMembers: ask}}})
	var ack *peerv1.BackupAck
	for _, env := range nw.take("a", "b") {
		if b := env.GetBackupAck(); b != nil {
			ack = b
		}
	}
	if ack == nil {
		t.Fatalf("no BackupAck")
	}
	if len(ack.KnownMembers) != 1 || ack.KnownMembers[0] != "c" {
		t.Errorf("known_members has %d names, want [c]", len(ack.KnownMembers))
	}
}

// TestSettledForOthersGrants: a member naming as settled (lease_settled)
// grants it never had, ids in the future, or its own grants far ahead,
// settles only its own grants: another holder's grant on the key still
// holds the owner's bucket (leasecap.go). A negative id is malformed.
func TestSettledForOthersGrants(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 2 * time.Second}
	nw, a, key, req := handedOwner(t, ttl, l)
	nw.checkAnswered(a, req)
	id := nw.now.Add(ttl - 100*time.Millisecond).UnixNano()
	stepHandoffGrants(nw, "b", "a", 1, &peerv1.LeaseGrant{Key: key, To: "c", Id: id, Held: 5})
	flush := func(seq uint64, it *peerv1.FlushItem) {
		a.Step(nw.now, &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
			Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: seq, Items: []*peerv1.FlushItem{it}}}})
	}
	lw := limitToWire(l)
	flush(1, &peerv1.FlushItem{Key: key, Limit: lw, LeaseSettled: id})
	flush(2, &peerv1.FlushItem{Key: key, Limit: lw, LeaseSettled: math.MaxInt64, LeaseReturn: 5})
	before := a.Metrics().Malformed.Load()
	flush(3, &peerv1.FlushItem{Key: key, Limit: lw, LeaseSettled: -1})
	if got := a.Metrics().Malformed.Load() - before; got != 1 {
		t.Errorf("negative lease_settled: Malformed +%d, want 1", got)
	}
	nw.run(2500 * time.Millisecond)
	admitted := answeredAdmitted(nw, a, req, 20)
	if admitted > 5 {
		t.Errorf("a admitted %d at +2.5s while c's grant of 5 was live, want at most 5: b settled c's grant", admitted)
	}
}

// TestHandedGrantsChunked: the grants a node hands to one member go in
// hand-offs of at most MaxBatch grants, as the states do. Before, all of
// them went in one: 2,500 grants of keys of 18 bytes in one Handoff of
// 92,533 bytes (37 a grant); a node handing the grants of 30,000 such
// leased keys to one member sent one envelope of about 1.1 MB, which a
// receiver refuses whole beyond peer.TransportConfig.MaxEnvelopeBytes
// (1 MiB), so it was retried and dropped.
func TestHandedGrantsChunked(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	const n = 2500
	gs := make([]*peerv1.LeaseGrant, n)
	id := nw.now.Add(time.Second).UnixNano()
	for i := range gs {
		gs[i] = &peerv1.LeaseGrant{Key: fmt.Sprintf("api\x00user-%09d", i), To: "b", Id: id, Held: 3}
	}
	nw.take("a", "b")
	p := a.view.peers["b"]
	a.sendGrants(nw.now, a.view, map[*peer][]*peerv1.LeaseGrant{p: gs})
	sent, most, size := 0, 0, 0
	for _, env := range nw.take("a", "b") {
		if h := env.GetHandoff(); h != nil {
			sent += len(h.Grants)
			most = max(most, len(h.Grants))
			size = max(size, proto.Size(env))
		}
	}
	t.Logf("%d grants in hand-offs of at most %d grants, %d bytes", sent, most, size)
	if sent != n || most > a.cfg.MaxBatch {
		t.Errorf("sent %d grants, at most %d in one hand-off (%d bytes); want %d, at most MaxBatch %d", sent, most, size, n, a.cfg.MaxBatch)
	}
}

// TestFlushAckGrantIdsMalformed: an owner's answer whose lease_grant_ids
// are neither empty nor one per item, or negative, is counted malformed at
// the non-owner (the ids that match an item are used, a negative one as
// none); nothing panics and the keys' states are installed.
func TestFlushAckGrantIdsMalformed(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	b := nw.nodes["b"]
	r, err := ring.New(ring.DefaultConfig(), "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		if k := fmt.Sprintf("key-%d", i); func() bool { o, _ := r.Owner(k); return o == "a" }() {
			keys = append(keys, k)
		}
	}
	k1, k2 := keys[0], keys[1]
	// Per answer of k items: longer, shorter, negative, sound (none).
	tamper := []func(k int) []int64{
		func(k int) []int64 { return make([]int64, k+3) },
		func(k int) []int64 { return make([]int64, k-1) },
		func(k int) []int64 { return slices.Repeat([]int64{-7}, k) },
		func(k int) []int64 { return nil },
	}
	acks, bad := 0, int64(0)
	nw.drop = func(from, to string, env *peerv1.Envelope) bool {
		if ack := env.GetFlushAck(); ack != nil && from == "a" && acks < len(tamper) {
			ack.LeaseGrantIds = tamper[acks](len(ack.Items))
			if acks < 3 && len(ack.LeaseGrantIds) > 0 {
				bad++
			}
			acks++
		}
		return false
	}
	l := perMinute(1000)
	for range len(tamper) {
		p := checkAsync(b, nw.now, check.Request{Key: k1, Hits: 1, Limit: l}, check.Request{Key: k2, Hits: 1, Limit: l})
		nw.run(50 * time.Millisecond)
		if !p.done {
			t.Fatalf("check not answered")
		}
	}
	if bad < 2 {
		t.Fatalf("tampered %d answers (%d malformed), want 2 or more malformed", acks, bad)
	}
	if got := b.Metrics().Malformed.Load(); got != bad {
		t.Errorf("Malformed %d at b, want %d (ids longer, shorter, negative)", got, bad)
	}
}

// FuzzHandedGrants hands an owner arbitrary lease grants on a key it owns
// (holders b, c, the owner itself or a stranger; ids before, within and
// beyond LeaseTTL; any held), twice (a replay), and checks what must hold
// whatever a member sends: no panic, at most maxKeyGrants grants kept, the
// grants holding at most the key's capacity together, and the bucket held
// under them (its tokens plus the grants' at most the capacity).
func FuzzHandedGrants(f *testing.F) {
	f.Add(int64(10), []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2, 0, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(int64(1_000_000), []byte{3, 0xff, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, capacity int64, data []byte) {
		if capacity <= 0 || capacity > bucket.MaxLimit {
			capacity = 1 + (capacity&math.MaxInt64)%1000
		}
		nw := newTestNet(t, nil, "a", "b", "c")
		a := nw.nodes["a"]
		key := keyOwnedBy(t, "a", "a", "b", "c")
		l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: capacity, Period: time.Minute}
		if r := nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}); r.Err != nil {
			return
		}
		holders := []string{"b", "c", "a", "stranger"}
		var gs []*peerv1.LeaseGrant
		for len(data) >= 10 {
			off := time.Duration(int16(data[1])<<8|int16(data[2])) * time.Millisecond
			var held int64
			for _, b := range data[3:10] {
				held = held<<8 | int64(b)
			}
			held = held << 8 >> 8 // 56 bits, signed
			if data[0]&0x80 != 0 {
				held = math.MaxInt64 - held
			}
			gs = append(gs, &peerv1.LeaseGrant{Key: key, To: holders[data[0]&3], Id: nw.now.Add(off).UnixNano(), Held: held})
			data = data[10:]
		}
		for seq := uint64(1); seq <= 2; seq++ {
			stepHandoffGrants(nw, "b", "a", seq, gs...)
			var held int64
			for _, g := range liveGrantsOf(a, key) {
				if g.held() < 0 {
					t.Fatalf("a grant holds %d", g.held())
				}
				held += g.held()
			}
			if n := len(liveGrantsOf(a, key)); n > maxKeyGrants {
				t.Fatalf("%d grants kept, want at most %d", n, maxKeyGrants)
			}
			if held > capacity {
				t.Fatalf("the grants hold %d, beyond the capacity %d", held, capacity)
			}
			if r := remainingOn(a, nw.nowOf("a"), key); r+held > capacity {
				t.Fatalf("bucket %d + grants %d > capacity %d", r, held, capacity)
			}
		}
	})
}

// TestHandedGrantToSelf: a grant handed to the key's new owner naming the
// owner itself as its holder (it held a lease from the old owner) does not
// hold its bucket: the node dropped that lease when the key became its own
// (dropLease), so the grant's tokens are never spent. Before, the owner
// held its bucket of 10 (9 left) under the grant of 5 and admitted 5 of 9
// checks: 4 false rejections, for up to LeaseTTL.
func TestHandedGrantToSelf(t *testing.T) {
	const ttl = 5 * time.Second
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = ttl }, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b", "c")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(10), Mode: check.ModeOwner}
	nw.checkAnswered(a, req)
	stepHandoffGrants(nw, "b", "a", 1, &peerv1.LeaseGrant{Key: key, To: "a", Id: nw.now.Add(ttl / 2).UnixNano(), Held: 5})
	admitted := answeredAdmitted(nw, a, req, 9)
	if admitted != 9 {
		t.Errorf("admitted %d of 9 with 9 tokens left, want 9: a grant to a itself held the bucket", admitted)
	}
}

// TestKnownMembersBounded: a backup target's acknowledgement naming
// 100,000 members (an honest one names at most those it was asked about)
// is counted malformed and looked at only as far as maxAskMembers: each
// fence under a join hold looks for its joiner in the list, up to
// MaxBatch fences an acknowledgement, so the list bounds the work of one
// message. The batch it acknowledges is still retired.
func TestKnownMembersBounded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b", "c")
	p := checkAsync(a, nw.now, check.Request{Key: key, Hits: 1, Limit: perMinute(10), Mode: check.ModeOwner})
	to, seq := takeFirstBackup(t, nw, a)
	known := make([]string, 100_000)
	for i := range known {
		known[i] = fmt.Sprintf("m%d", i)
	}
	before := a.Metrics().Malformed.Load()
	ackBackupKnowing(nw, a, to, seq, known)
	if got := a.Metrics().Malformed.Load() - before; got != 1 {
		t.Errorf("Malformed +%d, want 1", got)
	}
	if bp := a.dur.out[to]; bp != nil && slices.ContainsFunc(bp.out, func(f *backupFlight) bool { return f.seq == seq }) {
		t.Errorf("the acknowledged batch %d is still in flight", seq)
	}
	nw.run(100 * time.Millisecond)
	if !p.done {
		t.Errorf("the check was not answered")
	}
}

// TestSettledFarAhead: a lease_settled far in the future (the largest
// int64) settles the sender's grants as its latest grant's id would, and
// its tokens given back are credited as then. Before, the owner's bound
// for the live grants (settled + LeaseTTL) overflowed, and the return of
// a live grant was refused whole.
func TestSettledFarAhead(t *testing.T) {
	for _, settled := range []int64{0, math.MaxInt64} { // 0: the grant's id
		nw := newTestNet(t, nil, "a", "b", "c")
		a := nw.nodes["a"]
		key := keyOwnedBy(t, "a", "a", "b", "c")
		l := perMinute(100)
		nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
		nw.run(100 * time.Millisecond) // the backup acknowledged: room for a grant
		flush := func(seq uint64, it *peerv1.FlushItem) *peerv1.FlushAck {
			nw.take("a", "b")
			a.Step(nw.now, &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
				Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: seq, Items: []*peerv1.FlushItem{it}}}})
			for _, env := range nw.take("a", "b") {
				if ack := env.GetFlushAck(); ack != nil {
					return ack
				}
			}
			return nil
		}
		lw := limitToWire(l)
		ack := flush(1, &peerv1.FlushItem{Key: key, Limit: lw, Rate: 1, LeaseWant: 5})
		if ack == nil || len(ack.Items) != 1 || ack.Items[0].LeaseGranted <= 0 || len(ack.LeaseGrantIds) != 1 {
			t.Fatalf("no grant: %v", ack)
		}
		id := ack.LeaseGrantIds[0]
		if settled == 0 {
			settled = id
		}
		nw.now = nw.now.Add(10 * time.Millisecond)
		refused := a.Metrics().LeaseTokensRefused.Load()
		flush(2, &peerv1.FlushItem{Key: key, Limit: lw, LeaseReturn: 2, LeaseSettled: settled})
		if got := a.Metrics().LeaseTokensRefused.Load() - refused; got != 0 {
			t.Errorf("settled %d (the grant's id %d): %d of 2 tokens given back refused, want 0", settled, id, got)
		}
	}
}

// TestHandedGrantsNotOwned: grants of keys the receiver does not own are
// not counted there: those of a key of another live member are passed on
// to it (as the states are), validated again by that owner, and those of
// a key of the sender itself go nowhere (no bounce back).
func TestHandedGrantsNotOwned(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	ofC, ofB := keyOwnedBy(t, "c", "a", "b", "c"), keyOwnedBy(t, "b", "a", "b", "c")
	id := nw.now.Add(500 * time.Millisecond).UnixNano()
	nw.take("a", "b")
	nw.take("a", "c")
	stepHandoffGrants(nw, "b", "a", 1,
		&peerv1.LeaseGrant{Key: ofC, To: "b", Id: id, Held: 3},
		&peerv1.LeaseGrant{Key: ofB, To: "c", Id: id, Held: 3})
	for _, key := range []string{ofC, ofB} {
		if gs := liveGrantsOf(a, key); len(gs) != 0 {
			t.Errorf("a counts %d grants of %q, a key it does not own", len(gs), key)
		}
	}
	var toC []*peerv1.LeaseGrant
	for _, env := range nw.take("a", "c") {
		if h := env.GetHandoff(); h != nil {
			toC = append(toC, h.Grants...)
		}
	}
	if len(toC) != 1 || toC[0].Key != ofC {
		t.Errorf("passed on to c: %v, want the grant of %q", toC, ofC)
	}
	for _, env := range nw.take("a", "b") {
		if h := env.GetHandoff(); h != nil && len(h.Grants) > 0 {
			t.Errorf("grants passed back to their sender b: %v", h.Grants)
		}
	}
}

// liveGrantsOf returns the live grants n counts on key: in its owned
// record, or among its shard's stray grants when it has none.
func liveGrantsOf(n *Node, key string) []liveGrant {
	s := n.st.shardOf(key)
	if e := n.st.lookupOwned(s, key); e != nil {
		if e.gr == nil {
			return nil
		}
		return e.gr.live
	}
	if g := s.strayGrants[key]; g != nil {
		return g.live
	}
	return nil
}

// handedOwner makes the net {a, b, c} of the handed-grant tests, with
// LeaseTTL ttl, and a key a owns of limit l; req is one hit of it in owner
// mode.
func handedOwner(t *testing.T, ttl time.Duration, l bucket.Limit) (nw *testNet, a *Node, key string, req check.Request) {
	nw = newTestNet(t, func(c *Config) { c.LeaseTTL = ttl }, "a", "b", "c")
	a = nw.nodes["a"]
	key = keyOwnedBy(t, "a", "a", "b", "c")
	return nw, a, key, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}
}

// answeredAdmitted returns how many of count checks of req n admits
// (nw.checkAnswered each).
func answeredAdmitted(nw *testNet, n *Node, req check.Request, count int) int {
	admitted := 0
	for range count {
		if r := nw.checkAnswered(n, req); r.Allowed {
			admitted++
		}
	}
	return admitted
}

// takeFirstBackup ticks a until it sends a backup, takes that backup off
// the network (the other messages are left) and returns its target and
// sequence number.
func takeFirstBackup(t *testing.T, nw *testNet, a *Node) (to string, seq uint64) {
	t.Helper()
	for range 100 {
		nw.queue = slices.DeleteFunc(nw.queue, func(m *netMsg) bool {
			if b := m.env.GetBackup(); b != nil && m.from == a.cfg.Self && to == "" {
				to, seq = m.to, b.Seq
				return true
			}
			return false
		})
		if to != "" {
			return to, seq
		}
		nw.now = nw.now.Add(10 * time.Millisecond)
		a.Tick(nw.now)
	}
	t.Fatalf("%s sent no backup", a.cfg.Self)
	return "", 0
}

// ackBackupKnowing steps into a the acknowledgement of its backup batch
// seq from its target to, listing known as the members to knows.
func ackBackupKnowing(nw *testNet, a *Node, to string, seq uint64, known []string) {
	a.Step(nw.now, &peerv1.Envelope{From: to, To: a.cfg.Self, Incarnation: nw.nodes[to].cfg.Incarnation,
		Body: &peerv1.Envelope_BackupAck{BackupAck: &peerv1.BackupAck{Seq: seq, BackupIncarnation: a.cfg.Incarnation, KnownMembers: known}}})
}
