package sync

import (
	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// msgAlloc hands out the parts of the messages one call builds from a few
// shared allocations instead of one or more per item: items come from slabs
// sized by the caller's hint and encoded states are carved from one buffer
// (a wire limit is shared too, see Node.limitWire). It saves most of
// the allocations (and the garbage collection) per coordinated check. What it
// hands out belongs to the messages being built, which are never modified
// once sent (see Transport), so nothing is ever reused; a msgAlloc is used by
// one call and then dropped. The zero value is ready to use.
type msgAlloc struct {
	// hint is the number of items the first slab of each kind is made for;
	// nfi, nks and nbuf the size of the next one (0: hint).
	hint           int
	nfi, nks, nbuf int
	fi             []peerv1.FlushItem
	ks             []peerv1.KeyState
	buf            []byte
}

// slabMin and slabMax bound the items of one slab; stateRoom is the free
// room below which the state buffer is replaced (more than a token bucket's
// state, so that one never outgrows it), and stateGuess the room made per
// expected state.
const (
	slabMin    = 4
	slabMax    = 1024
	stateRoom  = 64
	stateGuess = 40
)

// reserve sets the number of items the first slabs are made for; each later
// slab of a kind is twice the size of the previous one (up to slabMax), so
// a low hint costs a few more allocations and a high one some unused room.
func (a *msgAlloc) reserve(n int) { a.hint = n }

// grow returns the size of the next slab of a kind whose next size is *next,
// and doubles the one after.
func (a *msgAlloc) grow(next *int) int {
	n := *next
	if n == 0 {
		n = a.hint
	}
	n = min(max(n, slabMin), slabMax)
	*next = n * 2
	return n
}

// slabItem returns the next zero item of slab, making a new slab (its
// size from a.grow(size)) when the current one is used up.
func slabItem[T any](a *msgAlloc, slab *[]T, size *int) *T {
	if len(*slab) == 0 {
		*slab = make([]T, a.grow(size))
	}
	it := &(*slab)[0]
	*slab = (*slab)[1:]
	return it
}

// flushItem returns a new, empty flush item.
func (a *msgAlloc) flushItem() *peerv1.FlushItem { return slabItem(a, &a.fi, &a.nfi) }

// keyState returns a new, empty key state.
func (a *msgAlloc) keyState() *peerv1.KeyState { return slabItem(a, &a.ks, &a.nks) }

// state returns the encoded state of b (as b.AppendBinary(nil) would),
// its limit's encoding copied from in when in remembers it.
func (a *msgAlloc) state(in *bucket.Interner, b bucket.Bucket) []byte {
	if cap(a.buf)-len(a.buf) < stateRoom {
		a.buf = make([]byte, 0, a.grow(&a.nbuf)*stateGuess+stateRoom)
	}
	n := len(a.buf)
	a.buf, _ = in.AppendBinary(a.buf, b)
	return a.buf[n:len(a.buf):len(a.buf)]
}

// freeList keeps values of T given back for reuse, at most as many as its
// caller says: a Node's checks (callPool), served checks and their answer
// arrays (relayPool), backup batches (durability.flights) and fences'
// arrays of holds (fences.free). What is put must be reset as its pool
// says and referred to by nothing else.
type freeList[T any] []T

// take returns the value last put, or T's zero value when none is kept.
func (l *freeList[T]) take() T {
	var x T
	if k := len(*l); k > 0 {
		x = (*l)[k-1]
		(*l)[k-1] = *new(T)
		*l = (*l)[:k-1]
	}
	return x
}

// put keeps x unless most are kept already.
func (l *freeList[T]) put(x T, most int) {
	if len(*l) < most {
		*l = append(*l, x)
	}
}

// takeOrNew returns a value kept in l, or a new zero one.
func takeOrNew[T any](l *freeList[*T]) *T {
	if x := l.take(); x != nil {
		return x
	}
	return new(T)
}
