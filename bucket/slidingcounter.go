package bucket

import (
	"math/bits"
	"time"
)

// slidingCounter approximates a rolling window with the counts of two aligned
// windows (FixedWindow's): at offset x into the current one, the estimate is
// cur + floor(prev*(Period-x)/Period), the previous count weighted by its
// overlap with the rolling window, rounded down; a request is admitted iff
// estimate + hits <= Limit. Admitted: at most Limit per aligned window, and at
// most Limit + ceil(Limit*(P-2)/P) = 2*Limit - floor(2*Limit/P) per rolling
// window of P >= 2 nanoseconds (Limit if P = 1ns), which is reached: Limit in
// a window's last ns, then Limit - floor(2*Limit/P) 2ns before the next ends.
type slidingCounter struct {
	l    Limit
	last int64 // latest time seen, Unix ns: the current window holds it
	prev int64 // hits of the window before the current one
	cur  int64 // hits of the current window; exceeds Limit after Drain
}

var _ Bucket = (*slidingCounter)(nil)

func newSlidingCounter(l Limit, now int64) Bucket { return &slidingCounter{l: l, last: now} }

func decodeSlidingCounter(l Limit, r *reader) (Bucket, error) {
	b := &slidingCounter{l: l}
	b.last = r.varint("sliding_counter last")
	b.prev = r.int63("sliding_counter previous")
	b.cur = r.int63("sliding_counter current")
	if r.err != nil {
		return nil, r.err
	}
	return b, nil
}

// at returns the previous and current counts at eff (not before last).
func (b *slidingCounter) at(eff int64) (prev, cur int64) {
	p := int64(b.l.Period)
	k0, k1 := fwIndex(b.last, p), fwIndex(eff, p)
	switch {
	case k1 == k0:
		return b.prev, b.cur
	case k1-1 == k0: // k1 > k0: no overflow
		return b.cur, 0
	}
	return 0, 0
}

// advance moves the bucket to now (or keeps it where it is if now is
// earlier) and returns that effective time.
func (b *slidingCounter) advance(now int64) int64 {
	eff := later(b.last, now)
	b.prev, b.cur = b.at(eff)
	b.last = eff
	return eff
}

// estimate returns floor(prev*(P-x)/P) + cur at eff, in the current window.
func (b *slidingCounter) estimate(eff int64) int64 {
	p := int64(b.l.Period)
	return addSat(b.cur, mulDiv(b.prev, p-fwOffset(eff, p), p))
}

// scOffset returns the smallest offset x in [0, p] into a window at which a
// previous count prev weighs at most a >= 0: floor(prev*(p-x)/p) <= a, that is
// p-x <= ceil((a+1)*p/prev) - 1.
func scOffset(prev, a, p int64) int64 {
	if prev <= a {
		return 0
	}
	// prev > a, so (a+1)*p/prev <= p: the quotient fits.
	hi, lo := bits.Mul64(uint64(a+1), uint64(p))
	q, rem := bits.Div64(hi, lo, uint64(prev))
	if rem != 0 {
		q++
	}
	return p - (int64(q) - 1)
}

// Take implements Bucket.
func (b *slidingCounter) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	eff := b.advance(nanos(now))
	est := b.estimate(eff)
	d := Decision{Limit: b.l.Limit}
	switch {
	case hits <= b.l.Limit-est:
		b.cur += hits // est + hits <= Limit: no overflow
		est += hits
		d.Allowed = true
	case hits > b.l.Limit:
		d.RetryAfter = MaxRetry
	default:
		d.RetryAfter = b.retry(eff, hits)
	}
	d.Remaining = max(0, b.l.Limit-est)
	d.ResetAt = unix(b.resetAt(eff))
	return d, nil
}

// retry returns how long until hits <= Limit would be admitted, with no
// other hit taken meanwhile.
func (b *slidingCounter) retry(eff, hits int64) time.Duration {
	p := int64(b.l.Period)
	x := fwOffset(eff, p)
	if a := b.l.Limit - hits - b.cur; a >= 0 {
		// The weight of prev falls within this window (at the latest, prev is
		// forgotten when the window ends, and cur <= a).
		return fwRetry(addSat(eff, scOffset(b.prev, a, p)-x), eff)
	}
	// Wait for the next window, where cur becomes the previous count.
	next := addSat(eff, p-x)
	return fwRetry(addSat(next, scOffset(b.cur, b.l.Limit-hits, p)), eff)
}

// resetAt returns when both counts are forgotten: the end of the next window
// if the current one counts hits, else the end of this one, else eff.
func (b *slidingCounter) resetAt(eff int64) int64 {
	p := int64(b.l.Period)
	switch {
	case b.cur > 0:
		return addSat(fwEnd(eff, p), p)
	case b.prev > 0:
		return fwEnd(eff, p)
	}
	return eff
}

// Drain implements Bucket. The current count saturates at MaxInt64.
func (b *slidingCounter) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.advance(nanos(now))
	b.cur = addSat(b.cur, hits)
	return nil
}

// Refund implements Bucket: hits come off the current count first, then off
// the previous one.
func (b *slidingCounter) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.advance(nanos(now))
	take := min(hits, b.cur)
	b.cur -= take
	b.prev = max(0, b.prev-(hits-take))
	return nil
}

// Reconfigure implements Bucket: both counts scale to the new limit, rounded
// up, and stay in the windows holding the latest time seen under the new
// period.
func (b *slidingCounter) Reconfigure(now time.Time, l Limit) error {
	if err := fwCheckLimit(b.l, l); err != nil {
		return err
	}
	b.advance(nanos(now))
	b.prev = fwScaleCeil(b.prev, l.Limit, b.l.Limit)
	b.cur = fwScaleCeil(b.cur, l.Limit, b.l.Limit)
	b.l = l
	return nil
}

// Merge implements Bucket: the higher of each count, both states seen at the
// later of their times and now.
func (b *slidingCounter) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*slidingCounter)
	if !ok || o == nil {
		return fwMismatch(b.l.Algorithm, other)
	}
	eff := later(later(b.last, o.last), nanos(now))
	bp, bc := b.at(eff)
	// Seen through this bucket's period.
	oc := *o
	oc.l.Period = b.l.Period
	op, occ := oc.at(eff)
	b.last, b.prev, b.cur = eff, max(bp, op), max(bc, occ)
	return nil
}

// Config implements Bucket.
func (b *slidingCounter) Config() Limit { return b.l }

// Idle implements Bucket: both counts are forgotten.
func (b *slidingCounter) Idle(now time.Time) bool {
	prev, cur := b.at(later(b.last, nanos(now)))
	return prev == 0 && cur == 0
}

// Clone implements Bucket.
func (b *slidingCounter) Clone() Bucket { c := *b; return &c }

// AppendBinary implements Bucket.
func (b *slidingCounter) AppendBinary(buf []byte) ([]byte, error) {
	buf = appendLimit(buf, b.l)
	buf = appendVarint(buf, b.last)
	buf = appendUvarint(buf, uint64(b.prev))
	buf = appendUvarint(buf, uint64(b.cur))
	return buf, nil
}
