package sync

import (
	"testing"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestStaleAckAfterTargetReAdded: b's backup batch 1 to a is retired when
// a leaves b's membership, and a's backupPeer with it; a is added back and
// b's next batch to it goes. a's acknowledgement of the retired batch,
// arriving late (a flapping link: it was queued while a was out of b's
// view), acknowledges nothing. Before, the new backupPeer numbered its
// batches from 1 again, the stale acknowledgement matched the new batch 1,
// and raised the new key's fence to its mark (10) though a never got the
// key's state: b could then drain the reserve with no backup behind it,
// and a, taking the key over from nothing after b's crash, admit it all
// again.
func TestStaleAckAfterTargetReAdded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	b := nw.nodes["b"]
	keys := keysOwnedBy(t, "b", []string{"a", "b"}, 2)
	acks := capture(nw, "a", "b", "backupack")
	ms := time.Millisecond

	checkAsync(b, nw.now, ownerReq(keys[0]))
	nw.deliver(nw.now.Add(2 * ms))
	if len(*acks) != 1 {
		t.Fatalf("%d acknowledgements held, want 1", len(*acks))
	}
	stale := (*acks)[0]

	// a leaves b's view: its batch is retired at the next round.
	b.SetMembers(nw.now, []string{"b"})
	nw.deliver(nw.now.Add(b.cfg.FlushInterval))
	b.Tick(nw.now)
	if bp := b.dur.out["a"]; bp != nil {
		t.Fatalf("a's batches after it left: %d in flight, seq %d; want retired", len(bp.out), bp.seq)
	}

	// a is back; b's backup of a fresh key to it is lost (nothing b sends
	// a arrives from now on).
	b.SetMembers(nw.now, []string{"a", "b"})
	nw.deliver(nw.now.Add(2 * ms))
	b.Tick(nw.now)
	nw.deliver(nw.now.Add(2 * ms))
	nw.drop = func(from, to string, _ *peerv1.Envelope) bool { return from == "b" && to == "a" }
	second := checkAsync(b, nw.now, ownerReq(keys[1]))
	if bp := b.dur.out["a"]; bp == nil || len(bp.out) == 0 {
		t.Fatalf("no batch in flight to a for %s", keys[1])
	}

	b.Step(nw.now, stale)
	if f := b.fenceOf(keys[1]); f.bound != 0 {
		t.Fatalf("%s's fence raised to %d by a's acknowledgement of a batch retired before %s's backup was sent",
			keys[1], f.bound, keys[1])
	}
	if second.done && !second.resps[0].Degraded {
		t.Fatalf("%s decided with no backup acknowledged: %+v", keys[1], second.resps[0])
	}
}
