package bucket

import (
	"time"
)

// Space is room for one bucket inside a value of the caller's, so that a
// store that allocates one value per key allocates the key's bucket with it:
// one allocation instead of two, and the bucket on the cache lines that the
// store reads before it anyway. It holds the state of the algorithms that
// fit in it (TokenBucket); NewIn allocates the others as New does. Its zero
// value is ready to use. A Space is not safe for concurrent use, and must
// not be copied while a bucket built in it is in use. It is 32 bytes: the
// bucket refers to its Limit, interned, instead of holding a copy.
type Space struct {
	tb tokenBucket
}

// NewIn is New that builds the bucket in sp when its algorithm's state fits
// there, and allocates it otherwise: the result is the same bucket New
// returns, with the same behaviour (Merge, DecodeInto and Clone treat it as
// any other bucket of its algorithm). A bucket built in sp lives there: sp
// must not be passed to NewIn again while that bucket is in use.
func NewIn(sp *Space, l Limit, now time.Time) (Bucket, error) {
	var in Interner
	return in.NewIn(sp, l, now)
}

// MoveIn returns b with its state moved into sp when its algorithm's state
// fits there (a copy: b must not be used afterwards), and b itself
// otherwise. It is for a store that replaces the value holding a key's
// bucket by another (a change of the key's role) and keeps the bucket in
// the new value's allocation. sp must not hold a bucket in use.
func MoveIn(sp *Space, b Bucket) Bucket {
	if tb, ok := b.(*tokenBucket); ok {
		sp.tb = *tb
		return &sp.tb
	}
	return b
}
