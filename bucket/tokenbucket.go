package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"time"
	"unique"
)

// tokenFloor is the fewest tokens (the largest debt) that Drain can leave in a
// token bucket or a leaky meter, and, negated, the most hits beyond the
// capacity that GCRA and LeakyQueue keep as backlog. It is far beyond any real
// use and keeps every product of a token count and a Period inside 128 bits.
const tokenFloor = -MaxLimit

// tokenBucket holds up to c = l.Capacity() tokens and gains l.Limit tokens per
// l.Period, continuously; a request of n hits is admitted iff n tokens are
// present, and takes them. The token count is kept exactly, as whole +
// frac/Period: a refill adds elapsed*Limit to frac with 128-bit products, so
// no rounding ever drifts the rate. Bound: over any interval of length t, at
// most c + Limit*t/Period hits are admitted (plus what Refund returns). It
// starts full, so a burst of c passes at once; Drain may push it into debt
// down to tokenFloor. Three integers of state; one division per refill.
//
// The limit is interned (package unique): a store holds up to millions of
// buckets under a few limits, and a handle is 8 bytes where a Limit is 56,
// which keeps the bucket at 32 bytes (issue 16: a store's memory per key).
// The canonical limit is shared by every bucket that runs under it, and
// freed by the collector once none does.
type tokenBucket struct {
	l     unique.Handle[Limit]
	whole int64 // whole tokens, in [tokenFloor, c]
	frac  int64 // fraction of a token, in units of 1/l.Period: [0, Period); 0 when whole == c
	last  int64 // latest instant seen, Unix ns
}

var _ Bucket = (*tokenBucket)(nil)

func newTokenBucket(l Limit, now int64) Bucket { return newTokenState(l, now) }

func newTokenState(l Limit, now int64) *tokenBucket {
	c := l.Capacity()
	return &tokenBucket{l: unique.Make(l), whole: c, last: now}
}

func decodeTokenBucket(l Limit, r *reader) (Bucket, error) {
	b, err := decodeTokenState(l, r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func decodeTokenState(l Limit, r *reader) (*tokenBucket, error) {
	b := new(tokenBucket)
	if err := b.decode(unique.Make(l), r); err != nil {
		return nil, err
	}
	return b, nil
}

// decode reads a token state of limit h into b; b is unchanged on error.
func (b *tokenBucket) decode(h unique.Handle[Limit], r *reader) error {
	l := h.Value()
	t := tokenBucket{l: h}
	t.whole = r.varint("tokens")
	t.frac = r.int63("token fraction")
	t.last = r.varint("last")
	if r.err != nil {
		return r.err
	}
	if t.whole < tokenFloor || t.whole > l.Capacity() || t.frac >= int64(l.Period) || (t.whole == l.Capacity() && t.frac != 0) {
		return fmt.Errorf("%w: %v tokens %d+%d/%d out of range", ErrCorrupt, l.Algorithm, t.whole, t.frac, l.Period)
	}
	*b = t
	return nil
}

// decodeSame decodes buf, a whole state, when it is a token state under
// exactly b's limit, and reports false otherwise (any other limit, a
// corrupt or out-of-range state, trailing bytes): decode then decides. It
// accepts a subset of what Decode accepts, with the same result.
func (b *tokenBucket) decodeSame(buf []byte) (tokenBucket, bool) {
	l := b.l.Value()
	i, ok := sameLimitAt(buf, &l)
	if !ok {
		return tokenBucket{}, false
	}
	return decodeStateAt(b.l, &l, buf, i)
}

// decodeStateAt is decodeSame after the limit: it decodes buf[i:], the
// fields of a token state under h (l: its value) that end buf, and reports
// false when they are not a valid state of l.
func decodeStateAt(h unique.Handle[Limit], l *Limit, buf []byte, i int) (tokenBucket, bool) {
	t := tokenBucket{l: h}
	var frac uint64
	t.whole, i = varintAt(buf, i)
	if i >= 0 {
		frac, i = uvarintAt(buf, i)
	}
	if i >= 0 {
		t.last, i = varintAt(buf, i)
	}
	c := l.Capacity()
	if i != len(buf) || frac >= uint64(l.Period) || t.whole < tokenFloor || t.whole > c || (t.whole == c && frac != 0) {
		return tokenBucket{}, false
	}
	t.frac = int64(frac)
	return t, true
}

// refill advances the bucket to t, adding the tokens earned since last. A t
// before last is no time elapsed.
func (b *tokenBucket) refill(t int64) {
	l := b.l.Value()
	b.refillUnder(t, &l)
}

// refillUnder is refill for a caller that holds b's limit, l: the limit is
// copied out of its handle once per call, not once per field read.
func (b *tokenBucket) refillUnder(t int64, l *Limit) {
	e := elapsed(b.last, t)
	if e == 0 {
		return
	}
	b.last = t
	c := l.Capacity()
	if b.whole >= c {
		return
	}
	// frac + e*Limit, in units of 1/Period, split into whole tokens and a fraction.
	hi, lo := bits.Mul64(uint64(e), uint64(l.Limit))
	lo, carry := bits.Add64(lo, uint64(b.frac), 0)
	hi += carry
	p := uint64(l.Period)
	room := uint64(c - b.whole) // at most c - tokenFloor <= 2e18
	if hi >= p {
		b.whole, b.frac = c, 0
		return
	}
	q, rem := bits.Div64(hi, lo, p)
	if q >= room {
		b.whole, b.frac = c, 0
		return
	}
	b.whole += int64(q)
	b.frac = int64(rem)
}

// timeTo returns the nanoseconds until the bucket, under its limit l,
// holds need tokens (need <= c), rounded up, or 0 if it holds them
// already.
func (b *tokenBucket) timeTo(need int64, l *Limit) int64 {
	if b.whole >= need {
		return 0
	}
	// (need - whole)*Period - frac is the shortfall in units of 1/Period; each
	// nanosecond earns Limit of them.
	hi, lo := bits.Mul64(uint64(need-b.whole), uint64(l.Period))
	lo, borrow := bits.Sub64(lo, uint64(b.frac), 0)
	hi -= borrow
	return gcraU128{hi, lo}.ceilDiv(uint64(l.Limit))
}

// Take implements Bucket.
func (b *tokenBucket) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	l := b.l.Value()
	b.refillUnder(nanos(now), &l)
	c := l.Capacity()
	d := Decision{Limit: c}
	switch {
	case hits > c:
		d.RetryAfter = MaxRetry
	case hits <= b.whole:
		b.whole -= hits
		d.Allowed = true
	default:
		d.RetryAfter = time.Duration(b.timeTo(hits, &l))
	}
	d.Remaining = max(b.whole, 0)
	d.ResetAt = unix(addSat(b.last, b.timeTo(c, &l)))
	return d, nil
}

// Drain implements Bucket.
func (b *tokenBucket) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.refill(nanos(now))
	b.whole = max(addSat(b.whole, -hits), tokenFloor)
	return nil
}

// Refund implements Bucket.
func (b *tokenBucket) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	l := b.l.Value()
	b.refillUnder(nanos(now), &l)
	b.whole = addSat(b.whole, hits)
	if c := l.Capacity(); b.whole >= c {
		b.whole, b.frac = c, 0
	}
	return nil
}

// Reconfigure implements Bucket: the tokens earned so far are counted under
// the old limit, then scaled by newCapacity/oldCapacity.
func (b *tokenBucket) Reconfigure(now time.Time, l Limit) error {
	l = l.WithDefaults()
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Algorithm != b.l.Value().Algorithm {
		return ErrMismatch
	}
	b.refill(nanos(now))
	b.rescale(unique.Make(l))
	return nil
}

// rescale moves the bucket to the limit h, scaling the token count by the
// ratio of the capacities (whole tokens exactly, the fraction in floating
// point).
func (b *tokenBucket) rescale(h unique.Handle[Limit]) {
	l := h.Value()
	c := l.Capacity()
	old := b.l.Value()
	b.whole, b.frac = tbRescale(b.whole, b.frac, int64(old.Period), old.Capacity(), int64(l.Period), c)
	switch {
	case b.whole >= c:
		b.whole, b.frac = c, 0
	case b.whole < tokenFloor:
		b.whole, b.frac = tokenFloor, 0
	}
	b.l = h
}

// Merge implements Bucket: both states are brought to the latest instant
// either has seen (and now), other is scaled to this bucket's limit if it
// differs, and the one with fewer tokens wins.
func (b *tokenBucket) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*tokenBucket)
	if !ok {
		return ErrMismatch
	}
	return b.merge(now, o)
}

func (b *tokenBucket) merge(now time.Time, o *tokenBucket) error {
	if o.l != b.l && o.l.Value().Algorithm != b.l.Value().Algorithm {
		return ErrMismatch
	}
	v := *o
	t := later(nanos(now), later(b.last, v.last))
	b.refill(t)
	v.refill(t)
	if v.l != b.l {
		v.rescale(b.l)
	}
	if v.whole < b.whole || (v.whole == b.whole && v.frac < b.frac) {
		b.whole, b.frac = v.whole, v.frac
	}
	return nil
}

// Config implements Bucket.
func (b *tokenBucket) Config() Limit { return b.l.Value() }

// Idle implements Bucket: the bucket is full at now.
func (b *tokenBucket) Idle(now time.Time) bool {
	v := *b
	l := b.l.Value()
	v.refillUnder(nanos(now), &l)
	return v.whole >= l.Capacity()
}

// Clone implements Bucket.
func (b *tokenBucket) Clone() Bucket {
	c := *b
	return &c
}

// AppendBinary implements Bucket: the header, then whole tokens (varint),
// the fraction (uvarint, units of 1/Period) and the last instant (varint).
func (b *tokenBucket) AppendBinary(buf []byte) ([]byte, error) {
	return b.appendState(appendLimit(buf, b.l.Value())), nil
}

// appendState appends b's state, the fields after its limit.
func (b *tokenBucket) appendState(buf []byte) []byte {
	buf = appendVarint(buf, b.whole)
	buf = appendUvarint(buf, uint64(b.frac))
	buf = appendVarint(buf, b.last)
	return buf
}

// tbRescale returns (whole + frac/p1) * c2/c1 as whole2 + frac2/p2, rounded
// down. Whole tokens scale exactly; the fractional part goes through a
// float64 (Reconfigure is rare and a fraction of a token is below any
// decision's resolution). whole must be at least tokenFloor; frac in [0, p1);
// a result beyond ±2^62 is saturated there (callers clamp it).
func tbRescale(whole, frac, p1, c1, p2, c2 int64) (int64, int64) {
	if c1 == c2 {
		return whole, mulDiv(frac, p2, p1)
	}
	const sat = 1 << 62
	neg := whole < 0
	mag := uint64(whole)
	if neg {
		mag = uint64(-whole)
	}
	hi, lo := bits.Mul64(mag, uint64(c2))
	if hi >= uint64(c1) {
		if neg {
			return -sat, 0
		}
		return sat, 0
	}
	q, r := bits.Div64(hi, lo, uint64(c1))
	if q > sat {
		if neg {
			return -sat, 0
		}
		return sat, 0
	}
	w := int64(q)
	if neg { // floor division: whole*c2 = w*c1 + r with 0 <= r < c1
		w = -w
		if r != 0 {
			w--
			r = uint64(c1) - r
		}
	}
	// Fractional tokens left: r/c1 + (frac/p1)*(c2/c1), in [0, 1 + c2/c1).
	f := (float64(r) + float64(frac)/float64(p1)*float64(c2)) / float64(c1)
	fw := math.Floor(f)
	w += int64(fw)
	fr := int64((f - fw) * float64(p2))
	if fr >= p2 {
		fr = p2 - 1
	}
	return w, max(fr, 0)
}
