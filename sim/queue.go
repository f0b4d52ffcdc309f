package sim

import (
	"container/heap"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	evArrival     eventKind = iota + 1 // the next client request arrives
	evTick                             // node a's Tick (a's generation in gen)
	evDeliver                          // env reaches node b from node a
	evUnreachable                      // node a learns that b is unreachable
	evView                             // observer a re-evaluates subject b (pair generation in gen)
	evAction                           // timeline action number idx fires
	evDown                             // node a (generation gen) goes down after its leave
	evStart                            // node a starts (a new node when a < 0)
	evProgress                         // report progress to the caller
)

// event is one entry of the queue. Events are recycled through a free list,
// so the hot path allocates none.
type event struct {
	at   int64 // virtual nanoseconds since the epoch
	seq  uint64
	kind eventKind
	a, b int32
	gen  uint32
	idx  int32
	env  *peerv1.Envelope
}

// eventHeap orders events by time, then by insertion sequence: two events at
// the same instant fire in the order they were scheduled, which keeps a run
// deterministic.
type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil
	*h = old[:n]
	return e
}

// queue is the simulator's agenda: a heap of events plus a free list.
type queue struct {
	h    eventHeap
	seq  uint64
	free []*event
}

// newEvent returns a cleared event from the free list, or a new one.
func (q *queue) newEvent() *event {
	if n := len(q.free); n > 0 {
		e := q.free[n-1]
		q.free = q.free[:n-1]
		return e
	}
	return new(event)
}

// push schedules e at e.at.
func (q *queue) push(e *event) {
	q.seq++
	e.seq = q.seq
	heap.Push(&q.h, e)
}

// pop removes and returns the earliest event, or nil when the queue is empty.
func (q *queue) pop() *event {
	if len(q.h) == 0 {
		return nil
	}
	return heap.Pop(&q.h).(*event)
}

// peek returns the earliest event's time; ok is false when the queue is empty.
func (q *queue) peek() (at int64, ok bool) {
	if len(q.h) == 0 {
		return 0, false
	}
	return q.h[0].at, true
}

// recycle returns e to the free list.
func (q *queue) recycle(e *event) {
	*e = event{}
	q.free = append(q.free, e)
}
