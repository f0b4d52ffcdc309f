package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The tests here pin why a reused object (relayPool, durability.flights,
// fences.free) is never still held by anyone when it is put back: each
// drives the interleaving in which a stale holder would write into, or read
// from, the object's next user.

// ownerReq is a check of key in owner mode, 1 hit of 100 a minute.
func ownerReq(key string) check.Request {
	return check.Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: check.ModeOwner}
}

// capture makes nw drop, and keep in the returned list, the messages of
// body kind from one node to another.
func capture(nw *testNet, from, to, kind string) *[]*peerv1.Envelope {
	var got []*peerv1.Envelope
	prev := nw.drop
	nw.drop = func(f, tt string, env *peerv1.Envelope) bool {
		if f == from && tt == to && bodyName(env) == kind {
			got = append(got, env)
			return true
		}
		return prev != nil && prev(f, tt, env)
	}
	return &got
}

// TestLateReplyMissesReusedRelay: a forward served by b whose check b
// passes on to c (the rings disagree) times out at b: b answers it
// not-owner and its waiting check goes back to b's relayPool. The next
// forward's check, of another key and waiting on b's own fence, reuses it.
// c's answer to the first, arriving late, then finds nothing: it neither
// answers the second forward (with c's decision of the first key, before
// the second key's backup is acknowledged) nor writes into it. Replays of
// both forwards are not served again.
func TestLateReplyMissesReusedRelay(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a, b := nw.nodes["a"], nw.nodes["b"]
	kc := keysOwnedBy(t, "c", []string{"a", "b", "c"}, 1)[0]
	var kb string
	for _, k := range keysOwnedBy(t, "b", []string{"a", "b", "c"}, 20) {
		if p := b.fenceTarget(b.view, k); p != nil && p.name == "a" {
			kb = k // backed up to a, which stays reachable from b
			break
		}
	}
	if kb == "" {
		t.Fatal("no key of b's backed up to a")
	}
	replies := capture(nw, "b", "a", "reply")
	late := capture(nw, "c", "b", "reply")
	forward := func(id uint64, key string) *peerv1.Envelope {
		// a's forward, as a would send it were its ring b's owner of key.
		return &peerv1.Envelope{From: "a", To: "b", Incarnation: a.cfg.Incarnation,
			Body: &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Id: id, Items: []*peerv1.ForwardItem{
				{Key: key, Limit: limitToWire(perMinute(100)), Hits: 1, Fenced: true},
			}}}}
	}
	answer := func(i int) (*peerv1.ForwardReply, int64, error) {
		t.Helper()
		r := (*replies)[i].GetForwardReply()
		if r == nil || len(r.Items) != 1 {
			t.Fatalf("reply %d: %v, want one answer", i, (*replies)[i])
		}
		d, err := decisionFromWire(r.Items[0])
		return r, d.Remaining, err
	}

	// Forward 1, of c's key: b passes it on to c, which decides it once its
	// own backup of the key is acknowledged; c's answer is held back.
	b.Step(nw.now, forward(1, kc))
	nw.settle()
	if len(*late) != 1 || len(*replies) != 0 {
		t.Fatalf("c answered %d, b answered %d; want c's answer held, b's none yet", len(*late), len(*replies))
	}
	if got := remainingOn(nw.nodes["c"], nw.now, kc); got != 99 {
		t.Fatalf("c's %s: %d remaining, want 99", kc, got)
	}

	// b's RequestTimeout: forward 1 is answered not-owner, its waiting
	// check goes back to b's pool.
	nw.deliver(nw.now.Add(b.cfg.RequestTimeout))
	b.Tick(nw.now)
	if len(*replies) != 1 {
		t.Fatalf("after b's timeout: %d replies, want 1", len(*replies))
	}
	if r, _, err := answer(0); r.Id != 1 || !errors.Is(err, ErrNotOwner) {
		t.Fatalf("reply 0: id %d err %v, want forward 1 answered not-owner", r.Id, err)
	}
	if len(b.relays.free) != 1 || *b.relays.free[0] != (relayedItem{}) {
		t.Fatalf("b's free waiting checks: %d, want 1, zeroed", len(b.relays.free))
	}
	reused := b.relays.free[0]

	// Forward 2, of b's own key, waits on its fence in the recycled check;
	// replays of both forwards change nothing.
	b.Step(nw.now, forward(2, kb))
	if len(b.relays.free) != 0 {
		t.Fatalf("forward 2 did not reuse the waiting check (%d free)", len(b.relays.free))
	}
	b.Step(nw.now, forward(1, kc))
	b.Step(nw.now, forward(2, kb))
	if f := b.fenceOf(kb); f == nil || len(f.holds) != 1 || f.holds[0].it != &reused.it {
		t.Fatalf("%s's fence at b: %+v, want forward 2's check held in the recycled one", kb, f)
	}

	// c's late answer to forward 1 reaches b: it answers nothing.
	for _, env := range *late {
		b.Step(nw.now, env)
	}
	if len(*replies) != 1 {
		r, rem, err := answer(len(*replies) - 1)
		t.Fatalf("c's late answer made b send %d replies (last: id %d, %d remaining, err %v), want 1: "+
			"forward 2 answered before %s's backup was acknowledged", len(*replies), r.Id, rem, err, kb)
	}
	if reused.it.req.Key != kb || reused.it.resp.Err != nil || reused.it.resp.Owner != "b" {
		t.Fatalf("forward 2's waiting check written by the late answer: %+v", reused.it)
	}

	// kb's backup acknowledged: forward 2 gets its own answer, once.
	nw.settle()
	if len(*replies) != 2 {
		t.Fatalf("after %s's backup: %d replies, want 2", kb, len(*replies))
	}
	if r, rem, err := answer(1); r.Id != 2 || err != nil || rem != 99 {
		t.Fatalf("forward 2's reply: id %d, %d remaining, err %v; want id 2, 99, no error", r.Id, rem, err)
	}
	if got := remainingOn(b, nw.now, kb); got != 99 {
		t.Errorf("b's %s: %d remaining, want 99 (one hit)", kb, got)
	}
	if f := b.fenceOf(kb); f == nil || f.spent > f.bound {
		t.Errorf("%s's fence at b: %+v, want its spending within the acknowledged bound", kb, f)
	}
}

// TestBackupBatchesKeepTheirMarks: two backup batches of b's in flight to a
// at once, of two keys whose checks wait on their fences. Each batch
// raises its own key's fence only: acknowledged out of order, twice, or
// after its batch was reused for a third key, an acknowledgement never
// decides another key's check before that key's own backup is
// acknowledged. (The round's marks are scratch kept from round to round:
// a batch that kept a slice of them would see the next round's keys.)
func TestBackupBatchesKeepTheirMarks(t *testing.T) {
	// One key's wait settled first: the batches and marks' arrays after it
	// are recycled ones.
	nw, b, keys, acks := fencedAfterWarmUp(t, 4, "backup batches", func(b *Node) int { return len(b.dur.flights) })
	ms := time.Millisecond

	// keys[0]'s check asks for a backup at once; keys[1]'s, asked while it
	// is in flight, goes in the next early round, ForwardWindow on.
	first := checkAsync(b, nw.now, ownerReq(keys[0]))
	nw.deliver(nw.now.Add(ms))
	second := checkAsync(b, nw.now, ownerReq(keys[1]))
	nw.deliver(nw.now.Add(2 * ms))
	b.Tick(nw.now)
	nw.deliver(nw.now.Add(2 * ms))
	if len(*acks) != 2 || len(b.dur.out["a"].out) != 2 {
		t.Fatalf("%d acknowledgements held, %d batches in flight; want 2 and 2", len(*acks), len(b.dur.out["a"].out))
	}
	if first.done || second.done {
		t.Fatalf("done before any acknowledgement: %v %v", first.done, second.done)
	}
	ack1, ack2 := (*acks)[0], (*acks)[1]

	// The first batch's acknowledgement decides keys[0]'s check only.
	b.Step(nw.now, ack1)
	if second.done {
		t.Fatalf("%s decided by %s's acknowledgement, before its own: %+v", keys[1], keys[0], second.resps[0])
	}
	if f := b.fenceOf(keys[1]); f.bound != 0 {
		t.Fatalf("%s's fence raised to %d by %s's acknowledgement", keys[1], f.bound, keys[0])
	}
	decidedAfterAck(t, keys[0], first)

	// Acknowledged again: nothing. A third key's batch reuses the first's.
	b.Step(nw.now, ack1)
	free := len(b.dur.flights)
	third := checkAsync(b, nw.now, ownerReq(keys[2]))
	nw.deliver(nw.now.Add(2 * ms))
	b.Tick(nw.now)
	if len(b.dur.flights) != free-1 || len(b.dur.out["a"].out) != 2 {
		t.Fatalf("third key's batch: %d free (was %d), %d in flight; want one reused, 2 in flight",
			len(b.dur.flights), free, len(b.dur.out["a"].out))
	}
	b.Step(nw.now, ack1)
	if second.done || third.done {
		t.Fatalf("a replayed acknowledgement decided %v %v (second, third)", second.done, third.done)
	}

	// Each of the others by its own acknowledgement.
	b.Step(nw.now, ack2)
	decidedAfterAck(t, keys[1], second)
	if third.done {
		t.Fatalf("%s decided by %s's acknowledgement", keys[2], keys[1])
	}
	nw.drop = nil
	nw.settle()
	decidedAfterAck(t, keys[2], third)
	for _, k := range keys {
		if f := b.fenceOf(k); f == nil || f.spent > f.bound {
			t.Errorf("%s: fence %+v, want its spending within the acknowledged bound", k, f)
		}
	}
}

// TestFenceHoldsKeptNotRecycled: a fence whose check still waits after a
// Tick keeps its array of holds, which is not also given to the next
// fence a check waits on: that check would overwrite the first's hold, and
// the first key's acknowledgement would re-examine the second key's check
// while the first key's waited on, unanswered.
func TestFenceHoldsKeptNotRecycled(t *testing.T) {
	nw, b, keys, acks := fencedAfterWarmUp(t, 3, "hold arrays", func(b *Node) int { return len(b.fen.free) })
	ms := time.Millisecond

	first := checkAsync(b, nw.now, ownerReq(keys[0]))
	nw.deliver(nw.now.Add(2 * ms))
	b.Tick(nw.now) // keys[0]'s check still waits: its fence keeps its holds
	f0 := b.fenceOf(keys[0])
	if first.done || len(f0.holds) != 1 {
		t.Fatalf("after a Tick: done=%v, %d held on %s's fence; want 1 waiting", first.done, len(f0.holds), keys[0])
	}
	second := checkAsync(b, nw.now, ownerReq(keys[1]))
	if h := f0.holds; len(h) != 1 || h[0].it.req.Key != keys[0] {
		t.Fatalf("%s's fence holds %d, the first for %q; want its own check", keys[0], len(h), h[0].it.req.Key)
	}
	nw.deliver(nw.now.Add(2 * ms))
	b.Tick(nw.now)
	nw.deliver(nw.now.Add(2 * ms))
	if len(*acks) != 2 {
		t.Fatalf("%d acknowledgements held, want 2", len(*acks))
	}
	b.Step(nw.now, (*acks)[0])
	decidedAfterAck(t, keys[0], first)
	if second.done {
		t.Fatalf("%s decided by %s's acknowledgement", keys[1], keys[0])
	}
	b.Step(nw.now, (*acks)[1])
	decidedAfterAck(t, keys[1], second)
}

// decidedAfterAck fails t unless c, the check of one hit of key, is
// decided with 99 remaining (a key of 100), not degraded: its fence rose
// with its own backup's acknowledgement.
func decidedAfterAck(t *testing.T, key string, c *pending) {
	t.Helper()
	if !c.done || c.resps[0].Remaining != 99 || c.resps[0].Degraded {
		t.Fatalf("%s after its acknowledgement: %+v done=%v, want decided, 99 remaining", key, c.resps[0], c.done)
	}
}

// fencedAfterWarmUp returns a two-node network of a and b, n keys b owns,
// and the list the backup acknowledgements from a to b are captured into
// (held, not delivered), after the last key's owner-mode check waited on
// its fence and was decided: free(b), the count of objects of the kind
// named what on b's free list, must then be positive (the next ones are
// recycled).
func fencedAfterWarmUp(t *testing.T, n int, what string, free func(*Node) int) (*testNet, *Node, []string, *[]*peerv1.Envelope) {
	t.Helper()
	nw := newTestNet(t, nil, "a", "b")
	b := nw.nodes["b"]
	keys := keysOwnedBy(t, "b", []string{"a", "b"}, n)
	warm := checkAsync(b, nw.now, ownerReq(keys[n-1]))
	nw.settle()
	if !warm.done || free(b) == 0 {
		t.Fatalf("warm-up: done=%v, %d %s free, want done and one free", warm.done, free(b), what)
	}
	return nw, b, keys, capture(nw, "a", "b", "backupack")
}
