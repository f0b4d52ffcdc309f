package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// fixedWindow admits Limit hits per window, windows aligned to the period:
// window k is [k*Period, (k+1)*Period) in Unix nanoseconds, k = floor(t/Period),
// so every node puts a hit in the same window. Memory: one timestamp and one
// counter. Bound: Limit admitted hits per aligned window, but up to 2*Limit
// within an interval straddling a window edge, however short (Limit at the end
// of one window, Limit at the start of the next). A rejected caller waits for
// the next window, where any debt left by Drain is forgiven. With
// CountRejected every hit counts, admitted or not, as Lyft's ratelimit
// service counts them: once a window's count passes Limit, every request of
// that window is rejected, a request of zero hits included.
type fixedWindow struct {
	l     Limit
	last  int64 // latest time seen, Unix ns: the current window is the one holding it
	count int64 // hits counted in the current window; exceeds Limit after Drain
}

var _ Bucket = (*fixedWindow)(nil)

func newFixedWindow(l Limit, now int64) Bucket { return &fixedWindow{l: l, last: now} }

func decodeFixedWindow(l Limit, r *reader) (Bucket, error) {
	b := &fixedWindow{l: l}
	b.last = r.varint("fixed_window last")
	b.count = r.int63("fixed_window count")
	if r.err != nil {
		return nil, r.err
	}
	return b, nil
}

// fwIndex returns the index of the window of length p (positive) that holds t:
// floor(t/p), also for negative t.
func fwIndex(t, p int64) int64 {
	k := t / p
	if t%p < 0 {
		k--
	}
	return k
}

// fwOffset returns how far t lies into its window of length p: t mod p, in
// [0, p), also for negative t.
func fwOffset(t, p int64) int64 {
	m := t % p
	if m < 0 {
		m += p
	}
	return m
}

// fwEnd returns the end of the window of length p that holds t, saturated at
// MaxInt64 (the window start may not be representable, the end always is
// unless it lies past MaxInt64).
func fwEnd(t, p int64) int64 { return addSat(t, p-fwOffset(t, p)) }

// fwScaleCeil returns ceil(a * num / den) for non-negative a, num and
// positive den, saturated at MaxInt64.
func fwScaleCeil(a, num, den int64) int64 {
	if a <= 0 || num <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(num))
	if hi >= uint64(den) {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, uint64(den))
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	if rem != 0 {
		q++
	}
	return int64(q)
}

// fwCheckLimit returns the error of Reconfigure from a bucket running under
// cur to next: ErrMismatch for another algorithm, else next's *LimitError.
func fwCheckLimit(cur, next Limit) error {
	if next.Algorithm != cur.Algorithm {
		return fmt.Errorf("%w: cannot reconfigure %v as %v", ErrMismatch, cur.Algorithm, next.Algorithm)
	}
	return next.Validate()
}

// fwMismatch returns the error of merging other, of the wrong type, into a
// bucket of algorithm a.
func fwMismatch(a Algorithm, other Bucket) error {
	if other == nil {
		return fmt.Errorf("%w: cannot merge nil into %v", ErrMismatch, a)
	}
	return fmt.Errorf("%w: cannot merge %v into %v", ErrMismatch, other.Config().Algorithm, a)
}

// fwRetry converts the instant at which a rejected request would be admitted
// into its RetryAfter from eff. An instant not after eff can only come from
// saturation at the end of representable time: never.
func fwRetry(at, eff int64) time.Duration {
	if at <= eff {
		return MaxRetry
	}
	return time.Duration(elapsed(eff, at))
}

// advance moves the bucket to now (or keeps it where it is if now is
// earlier) and returns that effective time.
func (b *fixedWindow) advance(now int64) int64 {
	eff := later(b.last, now)
	p := int64(b.l.Period)
	if fwIndex(eff, p) != fwIndex(b.last, p) {
		b.count = 0
	}
	b.last = eff
	return eff
}

// Take implements Bucket.
func (b *fixedWindow) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	eff := b.advance(nanos(now))
	end := fwEnd(eff, int64(b.l.Period))
	d := Decision{Limit: b.l.Limit, ResetAt: unix(end)}
	admit := hits <= b.l.Limit-b.count
	if b.l.CountRejected {
		// Lyft's counting: every hit counts, admitted or not, and a request
		// is admitted when the count with its hits stays within the limit.
		b.count = addSat(b.count, hits)
		admit = b.count <= b.l.Limit
	}
	switch {
	case admit:
		if !b.l.CountRejected {
			b.count += hits
		}
		d.Allowed = true
	case hits > b.l.Limit:
		d.RetryAfter = MaxRetry
	default:
		d.RetryAfter = fwRetry(end, eff)
	}
	d.Remaining = max(0, b.l.Limit-b.count)
	return d, nil
}

// Drain implements Bucket. The count saturates at MaxInt64; the debt ends
// with the window.
func (b *fixedWindow) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.advance(nanos(now))
	b.count = addSat(b.count, hits)
	return nil
}

// Refund implements Bucket.
func (b *fixedWindow) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.advance(nanos(now))
	b.count = max(0, b.count-hits)
	return nil
}

// Reconfigure implements Bucket: the count scales to the new limit, rounded
// up so that a consumed hit never vanishes, and stays in the window that
// holds the latest time seen under the new period.
func (b *fixedWindow) Reconfigure(now time.Time, l Limit) error {
	if err := fwCheckLimit(b.l, l); err != nil {
		return err
	}
	b.advance(nanos(now))
	b.count = fwScaleCeil(b.count, l.Limit, b.l.Limit)
	b.l = l
	return nil
}

// countAt returns the count of the window that holds eff (not before last).
func (b *fixedWindow) countAt(eff int64) int64 {
	p := int64(b.l.Period)
	if fwIndex(eff, p) != fwIndex(b.last, p) {
		return 0
	}
	return b.count
}

// Merge implements Bucket: the higher count of the window holding the later
// of the two states' times and now.
func (b *fixedWindow) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*fixedWindow)
	if !ok || o == nil {
		return fwMismatch(b.l.Algorithm, other)
	}
	eff := later(later(b.last, o.last), nanos(now))
	p := int64(b.l.Period)
	c := b.countAt(eff)
	if fwIndex(o.last, p) == fwIndex(eff, p) {
		c = max(c, o.count)
	}
	b.last, b.count = eff, c
	return nil
}

// Config implements Bucket.
func (b *fixedWindow) Config() Limit { return b.l }

// Idle implements Bucket.
func (b *fixedWindow) Idle(now time.Time) bool {
	return b.countAt(later(b.last, nanos(now))) == 0
}

// Clone implements Bucket.
func (b *fixedWindow) Clone() Bucket { c := *b; return &c }

// AppendBinary implements Bucket.
func (b *fixedWindow) AppendBinary(buf []byte) ([]byte, error) {
	buf = appendLimit(buf, b.l)
	buf = appendVarint(buf, b.last)
	buf = appendUvarint(buf, uint64(b.count))
	return buf, nil
}
