package bucket

import "time"

// leakyMeter is a leaky bucket used as a meter (policing): a level in [0, c],
// c = l.Capacity(), drains at l.Limit per l.Period, continuously; a request of
// n hits is admitted iff level + n <= c and then adds n, a rejected one adds
// nothing. Remaining is floor(c - level) and ResetAt the instant the level
// reaches 0. The meter is the token bucket mirrored (level = c - tokens), and
// is kept as one, exactly: the same Decisions and the same bound, at most
// c + Limit*t/Period hits admitted over any interval of length t. Drain may
// raise the level past c (up to c - tokenFloor); requests wait until it drains.
type leakyMeter struct {
	// tokens = c - level. Take, Drain, Refund, Config, AppendBinary, Idle
	// (the level is 0) and Reconfigure (the level scales by
	// newCapacity/oldCapacity) are the token bucket's.
	tokenBucket
}

var _ Bucket = (*leakyMeter)(nil)

func newLeakyMeter(l Limit, now int64) Bucket { return &leakyMeter{*newTokenState(l, now)} }

func decodeLeakyMeter(l Limit, r *reader) (Bucket, error) {
	tb, err := decodeTokenState(l, r)
	if err != nil {
		return nil, err
	}
	return &leakyMeter{*tb}, nil
}

// level returns the level at the last instant seen, in hits (for tests).
func (m *leakyMeter) level() float64 {
	l := m.l.Value()
	return float64(l.Capacity()-m.whole) - float64(m.frac)/float64(l.Period)
}

// Merge implements Bucket: the higher level wins.
func (m *leakyMeter) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*leakyMeter)
	if !ok {
		return ErrMismatch
	}
	return m.merge(now, &o.tokenBucket)
}

// Clone implements Bucket.
func (m *leakyMeter) Clone() Bucket { return &leakyMeter{m.tokenBucket} }

// leakyQueue is the leaky bucket as a queue (shaping), the synchronous leaky
// bucket: hits leave one every I = Period/Limit, and the state tat is when the
// next slot is free (the last scheduled departure + I). n hits at t start at
// s = max(t, tat), Wait = s - t, and take n slots (tat = s + n*I); they are
// rejected if Wait > MaxWait or if more than Burst hits would then wait
// (ceil(Wait/I)+n-1 > Burst, nginx's burst: one proceeds, Burst queue). So it
// admits as GCRA of capacity Burst+1 capped by MaxWait, callers proceed at
// most Limit*t/Period + n over any t, and Remaining (one-hit requests
// admissible now) is Burst+1, one more than Decision.Limit, when idle.
type leakyQueue struct {
	g gcra // g.cap = Burst + 1
}

var _ Bucket = (*leakyQueue)(nil)

func newLeakyQueue(l Limit, now int64) Bucket { return &leakyQueue{*newGCRAState(l, now)} }

func decodeLeakyQueue(l Limit, r *reader) (Bucket, error) {
	g, err := decodeGCRAState(l, r)
	if err != nil {
		return nil, err
	}
	return &leakyQueue{*g}, nil
}

// Take implements Bucket. An admitted request must wait Decision.Wait before
// it proceeds; a rejected one is the 503 of the synchronous leaky bucket.
func (q *leakyQueue) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	g := &q.g
	t, ts, back := g.advance(nanos(now))
	rate := uint64(g.l.Limit)
	d := Decision{Limit: g.cap - 1}
	if hits > g.cap {
		d.RetryAfter = MaxRetry
	} else {
		need := back.add(gcraMul(uint64(hits), uint64(g.l.Period)))
		overCap, overWait := g.capP.less(need), g.maxW.less(back)
		if !overCap && !overWait {
			d.Allowed = true
			d.Wait = time.Duration(back.ceilDiv(rate))
			if hits > 0 {
				back = need
				g.tat = ts.add(back)
			}
		} else {
			var ex gcraU128 // how far the backlog is over the tighter cap
			if overCap {
				ex = need.sub(g.capP)
			}
			if w := back.sub(g.maxW); overWait && ex.less(w) {
				ex = w
			}
			d.RetryAfter = time.Duration(ex.ceilDiv(rate))
		}
	}
	d.Remaining = q.remaining(back)
	d.ResetAt = unix(addSat(t, back.ceilDiv(rate)))
	return d, nil
}

// remaining returns how many one-hit requests would be admitted now, one
// after another, behind backlog back: within the queue cap, and the j-th
// (from 0) waiting back + j*I <= MaxWait.
func (q *leakyQueue) remaining(back gcraU128) int64 {
	g := &q.g
	if g.maxW.less(back) {
		return 0
	}
	return min(g.remaining(back), addSat(g.maxW.sub(back).div(uint64(g.l.Period)), 1))
}

// Drain implements Bucket: the hits take slots at the end of the queue.
func (q *leakyQueue) Drain(now time.Time, hits int64) error { return q.g.Drain(now, hits) }

// Refund implements Bucket: the last hits' slots are freed.
func (q *leakyQueue) Refund(now time.Time, hits int64) error { return q.g.Refund(now, hits) }

// Reconfigure implements Bucket. The queue keeps its schedule: callers already
// told to wait keep their slots, so the time of the next free slot stays and
// only later requests see the new interval and caps.
func (q *leakyQueue) Reconfigure(now time.Time, l Limit) error { return q.g.Reconfigure(now, l) }

// Merge implements Bucket: the later next free slot wins.
func (q *leakyQueue) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*leakyQueue)
	if !ok {
		return ErrMismatch
	}
	return q.g.merge(now, &o.g)
}

// Config implements Bucket.
func (q *leakyQueue) Config() Limit { return q.g.l }

// Idle implements Bucket: the queue is empty and the last departure was at
// least one interval ago.
func (q *leakyQueue) Idle(now time.Time) bool { return q.g.Idle(now) }

// Clone implements Bucket.
func (q *leakyQueue) Clone() Bucket { return &leakyQueue{q.g} }

// AppendBinary implements Bucket, in GCRA's layout.
func (q *leakyQueue) AppendBinary(b []byte) ([]byte, error) { return q.g.AppendBinary(b) }
