package sync

import (
	"testing"

	"github.com/ringlimit/ringlimit/check"
)

// TestServedWaitsRecycled: the checks of a served forward that wait at the
// owner (on their fresh keys' fences) go back to the owner's relayPool once
// the reply is written, zeroed, and the next forward's waiting checks reuse
// them with nothing of the previous ones; the backup batches that raised
// the fences go back to durability.flights once acknowledged, their marks
// emptied, and are reused by the next round.
func TestServedWaitsRecycled(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	keys := keysOwnedBy(t, "b", []string{"a", "b"}, 4)
	req := func(key string) check.Request {
		return check.Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: check.ModeOwner}
	}

	// Two fresh keys of b's in one Check of a's: one forward, whose two
	// checks wait on their fences at b.
	first := checkAsync(a, t0, req(keys[0]), req(keys[1]))
	nw.settle()
	if !first.done || first.resps[0].Remaining != 99 || first.resps[1].Remaining != 99 {
		t.Fatalf("first: %+v done=%v, want done, 99 remaining each", first.resps, first.done)
	}
	if got := len(b.relays.free); got != 2 {
		t.Fatalf("after the first forward: %d waiting checks free at b, want 2", got)
	}
	if got := len(b.relays.lists); got != 1 {
		t.Fatalf("after the first forward: %d later arrays free at b, want 1", got)
	}
	for i, ri := range b.relays.free {
		if *ri != (relayedItem{}) {
			t.Errorf("free waiting check %d not zeroed: %+v", i, *ri)
		}
	}
	if got := len(b.dur.flights); got == 0 {
		t.Fatalf("no backup batch free at b after its acknowledgement")
	}
	for i, fl := range b.dur.flights {
		if len(fl.marks) != 0 || fl.items != nil || fl.seq != 0 {
			t.Errorf("free backup batch %d not emptied: %+v", i, *fl)
		}
	}
	flights := len(b.dur.flights)

	// The next forward's waiting checks take the recycled ones; its answers
	// are its own, and the first's stay as they were.
	waits := b.metrics.FenceWaits.Load()
	second := checkAsync(a, nw.now, req(keys[2]), req(keys[3]), req(keys[0]))
	nw.settle()
	if got := b.metrics.FenceWaits.Load() - waits; got != 2 {
		t.Fatalf("second: %d checks waited on their fences at b, want 2 (the fresh keys)", got)
	}
	if !second.done || second.resps[0].Remaining != 99 || second.resps[1].Remaining != 99 || second.resps[2].Remaining != 98 {
		t.Fatalf("second: %+v done=%v, want done, 99, 99 and 98 remaining", second.resps, second.done)
	}
	if first.resps[0].Remaining != 99 || first.resps[1].Remaining != 99 {
		t.Errorf("first's answers changed to %+v by the reuse", first.resps)
	}
	if got := len(b.relays.free); got != 2 {
		t.Errorf("after the second forward: %d waiting checks free at b, want 2 (reused)", got)
	}
	if got := len(b.dur.flights); got != flights {
		t.Errorf("after the second round: %d backup batches free at b, want %d (reused)", got, flights)
	}
	for _, key := range keys {
		if f := b.fenceOf(key); f == nil || f.bound < f.spent {
			t.Errorf("%s: fence %+v, want one whose bound covers what it spent", key, f)
		}
	}
}
