package bucket

import (
	"fmt"
	"time"
	"unique"
)

// Decision is the answer to one Take.
type Decision struct {
	// Allowed reports whether the hits were admitted (and consumed).
	Allowed bool
	// Limit is the capacity that Remaining counts against: the burst for
	// bucket algorithms, the limit per window for window algorithms.
	Limit int64
	// Remaining is how many more hits would be admitted right now, after this
	// decision (zero when none; never negative).
	Remaining int64
	// ResetAt is when the bucket is back to its fresh, full state if nothing
	// more is taken (for window algorithms: the end of the current window).
	ResetAt time.Time
	// RetryAfter is, for a rejected request, how long until the same request
	// would be admitted (zero when allowed). It is MaxRetry when the request can
	// never be admitted (hits greater than the capacity).
	RetryAfter time.Duration
	// Wait is, for shaping algorithms (LeakyQueue, SmoothBursty,
	// SmoothWarmingUp), how long an admitted caller must wait before it
	// proceeds. Zero for the other algorithms.
	Wait time.Duration
}

// MaxRetry is the RetryAfter of a request that can never be admitted, such
// as one asking for more hits than the capacity.
const MaxRetry = time.Duration(1<<63 - 1)

// Bucket is the state of one key under one algorithm. A Bucket is not safe for
// concurrent use: the caller serialises calls on one bucket. Every method takes
// the current time as an argument; a time earlier than one already seen counts
// as no time elapsed.
type Bucket interface {
	// Take asks for hits permits at now. hits == 0 peeks: it reports the state
	// and consumes nothing. An admitted request consumes its hits; a rejected
	// one consumes nothing (except SlidingLog with CountRejected). The only
	// error is ErrNegativeHits.
	Take(now time.Time, hits int64) (Decision, error)
	// Drain counts hits that were already admitted elsewhere: they are always
	// applied, even past the limit, so later requests pay for them.
	Drain(now time.Time, hits int64) error
	// Refund gives back hits that were consumed but not used (an unspent
	// lease). It never raises the bucket above its fresh state.
	Refund(now time.Time, hits int64) error
	// Reconfigure changes the limit of a live bucket the way Guava's setRate
	// does: what is stored scales to the new capacity, nothing resets to full.
	// The algorithm cannot change (ErrMismatch).
	Reconfigure(now time.Time, l Limit) error
	// Merge folds other, a state of the same key kept elsewhere, into this one,
	// keeping the most consumed view of the two. other must have the same
	// algorithm (ErrMismatch).
	Merge(now time.Time, other Bucket) error
	// Config returns the limit the bucket runs under.
	Config() Limit
	// Idle reports whether, at now, the bucket is indistinguishable from a
	// fresh one, so that a store may evict it without changing any decision.
	Idle(now time.Time) bool
	// Clone returns an independent copy.
	Clone() Bucket
	// Shift moves every instant the state holds by d, as if all it records
	// had happened d later (earlier for d < 0): counts, levels and window
	// contents are kept, only their place in time moves. It converts a state
	// kept on one clock to another clock that differs from it by -d.
	Shift(d time.Duration)
	// AppendBinary appends the bucket's state (its Limit included) in the
	// compact binary form that Decode reads.
	AppendBinary(b []byte) ([]byte, error)
}

// New returns a fresh bucket for l at now, or a *LimitError when l is invalid.
// A zero Algorithm is TokenBucket (the bucket's Config says so).
func New(l Limit, now time.Time) (Bucket, error) {
	l = l.WithDefaults()
	if err := l.Validate(); err != nil {
		return nil, err
	}
	t := nanos(now)
	switch l.Algorithm {
	case TokenBucket:
		return newTokenBucket(l, t), nil
	case LeakyMeter:
		return newLeakyMeter(l, t), nil
	case LeakyQueue:
		return newLeakyQueue(l, t), nil
	case FixedWindow:
		return newFixedWindow(l, t), nil
	case SlidingLog:
		return newSlidingLog(l, t), nil
	case SlidingCounter:
		return newSlidingCounter(l, t), nil
	case GCRA:
		return newGCRA(l, t), nil
	case Concurrency:
		return newConcurrency(l, t), nil
	case SmoothBursty:
		return newSmoothBursty(l, t), nil
	case SmoothWarmingUp:
		return newSmoothWarmingUp(l, t), nil
	}
	panic(fmt.Sprintf("bucket: Validate accepted unknown algorithm %d", l.Algorithm))
}

// Decode reads a state written by AppendBinary. Garbage, truncated or
// inconsistent input returns an error wrapping ErrCorrupt, never a panic.
func Decode(b []byte) (Bucket, error) {
	r := reader{buf: b}
	l := r.limit()
	if r.err != nil {
		return nil, r.err
	}
	if l.Algorithm == 0 { // a state always names its algorithm
		return nil, fmt.Errorf("%w: algorithm 0", ErrCorrupt)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	var (
		bk  Bucket
		err error
	)
	switch l.Algorithm {
	case TokenBucket:
		bk, err = decodeTokenBucket(l, &r)
	case LeakyMeter:
		bk, err = decodeLeakyMeter(l, &r)
	case LeakyQueue:
		bk, err = decodeLeakyQueue(l, &r)
	case FixedWindow:
		bk, err = decodeFixedWindow(l, &r)
	case SlidingLog:
		bk, err = decodeSlidingLog(l, &r)
	case SlidingCounter:
		bk, err = decodeSlidingCounter(l, &r)
	case GCRA:
		bk, err = decodeGCRA(l, &r)
	case Concurrency:
		bk, err = decodeConcurrency(l, &r)
	case SmoothBursty:
		bk, err = decodeSmoothBursty(l, &r)
	case SmoothWarmingUp:
		bk, err = decodeSmoothWarmingUp(l, &r)
	}
	if err == nil {
		err = r.err
	}
	if err == nil && r.off != len(r.buf) {
		err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.buf)-r.off)
	}
	if err != nil {
		return nil, err
	}
	return bk, nil
}

// DecodeInto is Decode that may reuse dst's storage: when dst is a token
// bucket and b holds one, dst is overwritten and returned, saving an
// allocation; otherwise it returns Decode(b). dst is unchanged on error. The
// caller must hold the only reference to dst (a Clone, say).
func DecodeInto(dst Bucket, b []byte) (Bucket, error) {
	tb, ok := dst.(*tokenBucket)
	if !ok {
		return Decode(b)
	}
	// The common case, an owner's state under the limit dst holds, in one
	// pass with no error built; anything else takes the checked path below,
	// which reports the same states and the same errors as Decode.
	if t, ok := tb.decodeSame(b); ok {
		*tb = t
		return tb, nil
	}
	r := reader{buf: b}
	l := r.limit()
	if r.err != nil {
		return nil, r.err
	}
	if l.Algorithm != TokenBucket {
		return Decode(b)
	}
	h := tb.l
	if l != h.Value() { // dst's limit was validated: a state under it needs no check
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		h = unique.Make(l)
	}
	var t tokenBucket
	err := t.decode(h, &r)
	if err == nil && r.off != len(r.buf) {
		err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.buf)-r.off)
	}
	if err != nil {
		return nil, err
	}
	*tb = t
	return tb, nil
}

// Semaphore is the Bucket of the Concurrency algorithm, which also acquires
// and releases permits by lease id. Take acquires anonymous permits that are
// only released by their timeout.
type Semaphore interface {
	Bucket
	// Acquire takes n permits under lease at now. Acquiring again under a lease
	// that is held adds to it and renews its timeout.
	Acquire(now time.Time, lease string, n int64) (Decision, error)
	// Release returns every permit held under lease and reports how many there
	// were (zero for an unknown or expired lease).
	Release(now time.Time, lease string) int64
}
