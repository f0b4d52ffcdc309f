package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// gcra is the generic cell rate algorithm (virtual scheduling): one emission
// interval T = Period/Limit per hit and a theoretical arrival time tat; n hits
// at t are admitted iff max(tat, t) + n*T - t <= capacity*T, and then tat
// moves there. That is exactly TokenBucket for the same Limit, Period and
// Burst (tokens = capacity - max(0, tat-t)/T) and gives the same Decisions,
// with the same bound. T is fractional when Limit does not divide Period, so
// tat is kept exactly as a 128-bit count of 1/Limit ns (T is then Period
// units). Trade-off: one timestamp of state (plus the last instant seen, so a
// clock going backwards counts as no time elapsed); two divisions per Take.
type gcra struct {
	l     Limit
	cap   int64    // hits admitted at once when fresh: capacity (GCRA) or capacity+1 (LeakyQueue)
	capP  gcraU128 // cap*Period: the most backlog an admission may leave, in 1/Limit ns
	maxW  gcraU128 // MaxWait*Limit: the most backlog a LeakyQueue request may queue behind
	debtP gcraU128 // (cap - tokenFloor)*Period: the most backlog Drain may leave
	tat   gcraU128 // theoretical arrival time: (Unix ns + 2^63) * Limit
	last  int64    // latest instant seen, Unix ns
}

var _ Bucket = (*gcra)(nil)

func newGCRA(l Limit, now int64) Bucket { return newGCRAState(l, now) }

func newGCRAState(l Limit, now int64) *gcra {
	g := &gcra{last: now}
	g.setLimit(l)
	g.tat = g.at(now)
	return g
}

func decodeGCRA(l Limit, r *reader) (Bucket, error) {
	g, err := decodeGCRAState(l, r)
	if err != nil {
		return nil, err
	}
	return g, nil
}

func decodeGCRAState(l Limit, r *reader) (*gcra, error) {
	g := &gcra{}
	g.setLimit(l)
	g.tat.hi = r.uvarint("tat")
	g.tat.lo = r.uvarint("tat")
	g.last = r.varint("last")
	if r.err != nil {
		return nil, r.err
	}
	if g.at(g.last).add(g.debtP).less(g.tat) {
		return nil, fmt.Errorf("%w: %v backlog beyond its bound", ErrCorrupt, l.Algorithm)
	}
	return g, nil
}

// setLimit sets l and the quantities derived from it.
func (g *gcra) setLimit(l Limit) {
	g.l = l
	g.cap = l.Capacity()
	g.maxW = gcraU128{}
	if l.Algorithm == LeakyQueue {
		g.cap++ // one proceeds, Burst queue
		g.maxW = gcraMul(uint64(l.MaxWait), uint64(l.Limit))
	}
	p := uint64(l.Period)
	g.capP = gcraMul(uint64(g.cap), p)
	g.debtP = gcraMul(uint64(g.cap-tokenFloor), p)
}

// at returns instant t in tat's units.
func (g *gcra) at(t int64) gcraU128 {
	return gcraMul(uint64(t)^(1<<63), uint64(g.l.Limit))
}

// advance records now and returns the instant the call counts at (the latest
// seen), that instant in tat's units, and the backlog max(0, tat - t).
func (g *gcra) advance(now int64) (t int64, ts, back gcraU128) {
	t = later(g.last, now)
	g.last = t
	ts = g.at(t)
	if ts.less(g.tat) {
		back = g.tat.sub(ts)
	}
	return t, ts, back
}

// remaining returns how many more hits fit on top of backlog back.
func (g *gcra) remaining(back gcraU128) int64 {
	if g.capP.less(back) {
		return 0
	}
	return g.capP.sub(back).div(uint64(g.l.Period))
}

// Take implements Bucket.
func (g *gcra) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	t, ts, back := g.advance(nanos(now))
	d := Decision{Limit: g.cap}
	if hits > g.cap {
		d.RetryAfter = MaxRetry
	} else {
		need := back.add(gcraMul(uint64(hits), uint64(g.l.Period)))
		if g.capP.less(need) {
			d.RetryAfter = time.Duration(need.sub(g.capP).ceilDiv(uint64(g.l.Limit)))
		} else {
			d.Allowed = true
			if hits > 0 {
				back = need
				g.tat = ts.add(back)
			}
		}
	}
	d.Remaining = g.remaining(back)
	d.ResetAt = unix(addSat(t, back.ceilDiv(uint64(g.l.Limit))))
	return d, nil
}

// Drain implements Bucket.
func (g *gcra) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	_, ts, back := g.advance(nanos(now))
	if hits == 0 {
		return nil
	}
	back = back.add(gcraMul(uint64(hits), uint64(g.l.Period)))
	if g.debtP.less(back) {
		back = g.debtP
	}
	g.tat = ts.add(back)
	return nil
}

// Refund implements Bucket.
func (g *gcra) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	_, ts, back := g.advance(nanos(now))
	if back.isZero() || hits == 0 {
		return nil
	}
	give := gcraMul(uint64(hits), uint64(g.l.Period))
	if back.less(give) {
		give = back
	}
	g.tat = ts.add(back.sub(give))
	return nil
}

// Reconfigure implements Bucket: the hits consumed (the backlog divided by T)
// are scaled by newCapacity/oldCapacity, as TokenBucket scales its tokens.
func (g *gcra) Reconfigure(now time.Time, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Algorithm != g.l.Algorithm {
		return ErrMismatch
	}
	t, _, back := g.advance(nanos(now))
	g.rescale(t, back, l)
	return nil
}

// rescale moves g, whose backlog at t is back, to limit l.
func (g *gcra) rescale(t int64, back gcraU128, l Limit) {
	oldL, oldCap := g.l, g.l.Capacity()
	g.setLimit(l)
	if back.isZero() {
		g.tat = g.at(t)
		return
	}
	var nb gcraU128 // the new backlog
	if l.Algorithm == LeakyQueue {
		// Callers already told to wait keep their slots: the time of the next
		// free slot stays, converted to the new units.
		if back.hi >= uint64(oldL.Limit) {
			nb = gcraMul(math.MaxInt64, uint64(l.Limit))
		} else {
			q, r := bits.Div64(back.hi, back.lo, uint64(oldL.Limit))
			nb = gcraMul(q, uint64(l.Limit)).add(gcraU128{0, uint64(mulDiv(int64(r), l.Limit, oldL.Limit))})
		}
	} else {
		// back < debtP, so the quotient (hits consumed) fits in 64 bits.
		q, r := bits.Div64(back.hi, back.lo, uint64(oldL.Period))
		w, f := tbRescale(int64(q), int64(r), int64(oldL.Period), oldCap, int64(l.Period), l.Capacity())
		if w >= g.cap-tokenFloor {
			nb = g.debtP
		} else {
			nb = gcraMul(uint64(w), uint64(l.Period)).add(gcraU128{0, uint64(f)})
		}
	}
	if g.debtP.less(nb) {
		nb = g.debtP
	}
	g.tat = g.at(t).add(nb)
}

// Merge implements Bucket: the later theoretical arrival time wins (other is
// first moved to this bucket's limit if it differs).
func (g *gcra) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*gcra)
	if !ok {
		return ErrMismatch
	}
	return g.merge(now, o)
}

func (g *gcra) merge(now time.Time, o *gcra) error {
	if o.l.Algorithm != g.l.Algorithm {
		return ErrMismatch
	}
	v := *o
	t, _, _ := g.advance(later(nanos(now), v.last))
	if v.l != g.l {
		vt, _, back := v.advance(t)
		v.rescale(vt, back, g.l)
	}
	if g.tat.less(v.tat) {
		g.tat = v.tat
	}
	return nil
}

// Config implements Bucket.
func (g *gcra) Config() Limit { return g.l }

// Idle implements Bucket: no backlog at now.
func (g *gcra) Idle(now time.Time) bool {
	return !g.at(later(g.last, nanos(now))).less(g.tat)
}

// Clone implements Bucket.
func (g *gcra) Clone() Bucket {
	c := *g
	return &c
}

// AppendBinary implements Bucket: the header, then tat's high and low words
// (uvarints) and the last instant (varint).
func (g *gcra) AppendBinary(b []byte) ([]byte, error) {
	b = appendLimit(b, g.l)
	b = appendUvarint(b, g.tat.hi)
	b = appendUvarint(b, g.tat.lo)
	b = appendVarint(b, g.last)
	return b, nil
}

// gcraU128 is an unsigned 128-bit integer, for exact products of a count and
// a Period or of an instant and a Limit.
type gcraU128 struct{ hi, lo uint64 }

func gcraMul(a, b uint64) gcraU128 {
	hi, lo := bits.Mul64(a, b)
	return gcraU128{hi, lo}
}

func (x gcraU128) add(y gcraU128) gcraU128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return gcraU128{hi, lo}
}

// sub returns x - y for x >= y.
func (x gcraU128) sub(y gcraU128) gcraU128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return gcraU128{hi, lo}
}

func (x gcraU128) less(y gcraU128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

func (x gcraU128) isZero() bool { return x.hi == 0 && x.lo == 0 }

// div returns x/d rounded down, saturated at MaxInt64.
func (x gcraU128) div(d uint64) int64 {
	if x.hi >= d {
		return math.MaxInt64
	}
	q, _ := bits.Div64(x.hi, x.lo, d)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// ceilDiv returns x/d rounded up, saturated at MaxInt64.
func (x gcraU128) ceilDiv(d uint64) int64 {
	if x.hi >= d {
		return math.MaxInt64
	}
	q, r := bits.Div64(x.hi, x.lo, d)
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 || q == 0 && r != 0 {
		return math.MaxInt64
	}
	return int64(q)
}
