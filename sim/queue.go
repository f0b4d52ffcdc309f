package sim

import (
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	evTick        eventKind = iota + 1 // node a's Tick (a's generation in gen)
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

// eventHeap is a binary min-heap of events ordered by time, then by
// insertion sequence: two events at the same instant fire in the order they
// were scheduled, which keeps a run deterministic. It is written out for the
// event type (no container/heap interface calls): the queue is the
// simulator's innermost loop.
type eventHeap []*event

// before reports whether a fires before b.
func before(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// up restores the heap order from index i towards the root.
func (h eventHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !before(e, h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

// down restores the heap order from index i towards the leaves.
func (h eventHeap) down(i int) {
	n := len(h)
	e := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && before(h[r], h[c]) {
			c = r
		}
		if !before(h[c], e) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = e
}

// queue is an agenda of events: a heap plus a free list. Each node has
// one for the events that fire at it, and the cluster one for its own
// (timeline actions, node starts and stops, progress); client arrivals
// wait apart, in their node's arrival list (see step.go).
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
	q.h = append(q.h, e)
	q.h.up(len(q.h) - 1)
}

// pop removes and returns the earliest event, or nil when the queue is empty.
func (q *queue) pop() *event {
	n := len(q.h) - 1
	if n < 0 {
		return nil
	}
	e := q.h[0]
	q.h[0] = q.h[n]
	q.h[n] = nil
	q.h = q.h[:n]
	if n > 0 {
		q.h.down(0)
	}
	return e
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
