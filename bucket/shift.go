package bucket

import "time"

// Shifting a state moves every instant it holds by the same duration, as if
// everything it records had happened d later (d < 0: earlier). It is how a
// state kept on one node's clock is read on another's: a node whose clock
// runs ahead of the receiver's by d sends states whose instants are d in the
// receiver's future; shifted by -d they mean what they meant at the sender.
// Shifting changes no count, no level and no window's content: only where
// those lie in time (a fixed window's count moves with its window). Every
// instant saturates at the int64 range rather than wrapping.

// shiftNs moves t, Unix ns, by d, saturated.
func shiftNs(t int64, d time.Duration) int64 { return addSat(t, int64(d)) }

// shiftLog moves every entry of r by d.
func shiftLog(r *slRing, d time.Duration) {
	for i := 0; i < r.size; i++ {
		e := r.at(i)
		e.t = shiftNs(e.t, d)
	}
}

// Shift implements Bucket.
func (b *tokenBucket) Shift(d time.Duration) { b.last = shiftNs(b.last, d) }

// Shift implements Bucket.
func (q *leakyQueue) Shift(d time.Duration) { q.g.Shift(d) }

// Shift implements Bucket.
func (g *gcra) Shift(d time.Duration) {
	if d == 0 {
		return
	}
	last := shiftNs(g.last, d)
	// tat is in units of 1/Limit ns: move it by |d|*Limit, not past zero.
	// The backlog tat - at(last) is kept as it was, within its bound.
	var back gcraU128
	if at := g.at(g.last); at.less(g.tat) {
		back = g.tat.sub(at)
	}
	g.last = last
	g.tat = g.at(last).add(back)
}

// Shift implements Bucket.
func (b *fixedWindow) Shift(d time.Duration) { b.last = shiftNs(b.last, d) }

// Shift implements Bucket.
func (b *slidingCounter) Shift(d time.Duration) { b.last = shiftNs(b.last, d) }

// Shift implements Bucket.
func (b *slidingLog) Shift(d time.Duration) {
	b.last = shiftNs(b.last, d)
	b.gapAt = shiftNs(b.gapAt, d)
	b.dropAt = shiftNs(b.dropAt, d)
	shiftLog(&b.log, d)
}

// Shift implements Bucket.
func (c *concurrency) Shift(d time.Duration) {
	c.last = shiftNs(c.last, d)
	shiftLog(&c.anon, d)
	for i := range c.slots {
		c.slots[i].exp = shiftNs(c.slots[i].exp, d)
	}
}

// Shift implements Bucket. The smooth limiters count in microseconds: d is
// truncated to them.
func (s *smoothLimiter) Shift(d time.Duration) {
	us := d.Microseconds()
	s.last = addSat(s.last, us)
	s.next = addSat(s.next, us)
}
