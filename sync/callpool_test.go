package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestCallRecycled: a forwarded Check's callItem goes back to the node's
// free list only once its done has run, and the next forwarded Check
// reuses it with nothing of the previous one (its done, its answers).
func TestCallRecycled(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: check.ModeOwner}
	free := func() int { return len(a.calls.free) }

	first := checkAsync(a, t0, req)
	if first.done || free() != 0 {
		t.Fatalf("t0: done=%v, %d free, want not done, none free", first.done, free())
	}
	nw.settle()
	if !first.done || first.resps[0].Remaining != 99 {
		t.Fatalf("first: %+v done=%v, want done with 99 remaining", first.resps[0], first.done)
	}
	if free() != 1 {
		t.Fatalf("after the first: %d free, want 1", free())
	}

	// The second Check takes the recycled item; its answer is its own.
	second := checkAsync(a, nw.now, req)
	if free() != 0 {
		t.Fatalf("second in flight: %d free, want 0 (reused)", free())
	}
	nw.settle()
	if !second.done || second.resps[0].Remaining != 98 {
		t.Fatalf("second: %+v done=%v, want done with 98 remaining", second.resps[0], second.done)
	}
	if first.resps[0].Remaining != 99 {
		t.Errorf("first's answer changed to %+v by the reuse", first.resps[0])
	}

	// A Check of two forwarded items: the call is recycled once, after
	// both answers.
	both := checkAsync(a, nw.now, req, req)
	nw.settle()
	if !both.done || both.resps[0].Remaining != 97 || both.resps[1].Remaining != 96 {
		t.Fatalf("two items: %+v done=%v, want 97 and 96 remaining", both.resps, both.done)
	}
	if free() != 1 {
		t.Errorf("after two items: %d free, want 1", free())
	}
}

// TestCallRecycledOnPolicy: a forwarded check decided by the partition
// policy (its owner unreachable) also gives its callItem back, once.
func TestCallRecycledOnPolicy(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: check.ModeOwner}
	nw.cut[[2]string{"a", "b"}] = true
	p := checkAsync(a, t0, req)
	a.Unreachable(t0.Add(time.Millisecond), "b")
	if !p.done || !p.resps[0].Degraded {
		t.Fatalf("unreachable owner: %+v done=%v, want done, degraded", p.resps[0], p.done)
	}
	if got := len(a.calls.free); got != 1 {
		t.Errorf("%d free, want 1", got)
	}
}
