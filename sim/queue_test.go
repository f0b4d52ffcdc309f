package sim

import "testing"

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
