package sim

import (
	"math/rand/v2"
	"testing"
)

func TestQueueOrdersByTimeThenInsertion(t *testing.T) {
	var q queue
	steps := []struct {
		at  int64
		idx int32
	}{{30, 0}, {10, 1}, {20, 2}, {10, 3}, {30, 4}, {10, 5}}
	for _, s := range steps {
		e := q.newEvent()
		e.at, e.idx = s.at, s.idx
		q.push(e)
	}
	want := []int32{1, 3, 5, 2, 0, 4}
	for i, w := range want {
		e := q.pop()
		if e == nil || e.idx != w {
			t.Fatalf("pop %d: got %+v, want idx %d", i, e, w)
		}
		q.recycle(e)
	}
	if e := q.pop(); e != nil {
		t.Fatalf("pop on empty queue: got %+v", e)
	}
	if len(q.free) != len(want) {
		t.Fatalf("free list: got %d events, want %d", len(q.free), len(want))
	}
	if e := q.newEvent(); e.at != 0 || e.idx != 0 {
		t.Fatalf("recycled event not cleared: %+v", e)
	}
}

// TestQueueMatchesSortedOrder pushes and pops events at random instants,
// interleaved, and checks every
// pop against a naive reference: the earliest pending event, ties broken by
// insertion order.
func TestQueueMatchesSortedOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q queue
	type ref struct {
		at  int64
		idx int32
	}
	var pending []ref
	for i := range 20000 {
		if len(pending) == 0 || rng.IntN(3) != 0 {
			e := q.newEvent()
			e.at, e.idx = rng.Int64N(50), int32(i)
			q.push(e)
			pending = append(pending, ref{e.at, e.idx})
			continue
		}
		best := 0
		for j, p := range pending {
			if p.at < pending[best].at {
				best = j
			}
		}
		want := pending[best]
		pending = append(pending[:best], pending[best+1:]...)
		if at, ok := q.peek(); !ok || at != want.at {
			t.Fatalf("step %d: peek %d, %v; want %d", i, at, ok, want.at)
		}
		e := q.pop()
		if e.at != want.at || e.idx != want.idx {
			t.Fatalf("step %d: pop (%d, %d), want (%d, %d)", i, e.at, e.idx, want.at, want.idx)
		}
		q.recycle(e)
	}
}
