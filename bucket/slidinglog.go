package bucket

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// slidingLog admits a request at now iff the hits logged in (now-Period, now]
// plus its own are at most Limit: exact in every rolling window, optionally
// with MinGap between two logged actions, and with CountRejected logging
// rejected attempts too (ClassDojo's Redis sorted-set limiter), so a client
// that keeps trying stays blocked until it pauses for a Period. The log is a
// lazily grown ring of run-length (time, hits) entries, at most Limit of them
// (Limit <= MaxLogLimit): a fresh bucket holds nothing and a steady-state Take
// allocates nothing. A full log drops its oldest entry (see drop).
type slidingLog struct {
	l     Limit
	last  int64 // latest time seen, Unix ns; every entry is at or before it
	gapAt int64 // time of the latest logged action, when acted
	acted bool  // whether any action was logged (MinGap applies from gapAt)
	// dropAt is the time of the newest entry dropped from a full log while
	// it is in the window (dropped): it counts as one hit.
	dropAt  int64
	dropped bool
	sum     int64 // hits in the log
	log     slRing
}

var _ Bucket = (*slidingLog)(nil)

// slEntry is one run of a log: n (>= 1) hits at t, Unix ns. Concurrency uses
// it for anonymous permits, t being their expiry.
type slEntry struct{ t, n int64 }

// slRing is a FIFO of entries in a ring buffer that grows on demand up to a
// maximum length set by its owner.
type slRing struct {
	buf  []slEntry
	head int // index in buf of the oldest entry
	size int
}

// at returns the i-th oldest entry.
func (r *slRing) at(i int) *slEntry {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

func (r *slRing) front() *slEntry { return r.at(0) }
func (r *slRing) back() *slEntry  { return r.at(r.size - 1) }

func (r *slRing) popFront() {
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.size--
}

func (r *slRing) popBack() { r.size-- }

// takeNewest removes up to n hits from the newest runs, emptied runs
// included, and returns how many it removed.
func (r *slRing) takeNewest(n int64) int64 {
	taken := int64(0)
	for taken < n && r.size > 0 {
		e := r.back()
		k := min(e.n, n-taken)
		e.n -= k
		taken += k
		if e.n == 0 {
			r.popBack()
		}
	}
	return taken
}

// push appends e. The caller ensures size < limit; the buffer doubles (up to
// limit) when full.
func (r *slRing) push(e slEntry, limit int) {
	if r.size == len(r.buf) {
		r.resize(min(limit, max(8, 2*len(r.buf))))
	}
	*r.at(r.size) = e
	r.size++
}

// resize moves the entries, oldest first, to a buffer of length n >= size.
func (r *slRing) resize(n int) {
	buf := make([]slEntry, n)
	r.copyTo(buf)
	r.buf, r.head = buf, 0
}

// copyTo copies the entries, oldest first, to dst and returns how many.
func (r *slRing) copyTo(dst []slEntry) int {
	n := 0
	if r.size > 0 {
		end := r.head + r.size
		n = copy(dst, r.buf[r.head:min(end, len(r.buf))])
		if end > len(r.buf) {
			n += copy(dst[n:], r.buf[:end-len(r.buf)])
		}
	}
	return n
}

// entries returns a compact copy of the entries, oldest first.
func (r *slRing) entries() []slEntry {
	if r.size == 0 {
		return nil
	}
	s := make([]slEntry, r.size)
	r.copyTo(s)
	return s
}

// slFromEntries returns a ring holding es (not copied).
func slFromEntries(es []slEntry) slRing { return slRing{buf: es, size: len(es)} }

// slUnion returns the entries of a and b (each sorted by strictly increasing
// t) as one sorted list, keeping the larger n of two entries at the same t.
func slUnion(a, b []slEntry) []slEntry {
	out := make([]slEntry, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	slices.SortFunc(out, func(x, y slEntry) int { return cmp.Compare(x.t, y.t) })
	j := 0
	for i, e := range out {
		if i > 0 && out[j-1].t == e.t {
			out[j-1].n = max(out[j-1].n, e.n)
			continue
		}
		out[j] = e
		j++
	}
	return out[:j]
}

func newSlidingLog(l Limit, now int64) Bucket { return &slidingLog{l: l, last: now} }

func decodeSlidingLog(l Limit, r *reader) (Bucket, error) {
	b := &slidingLog{l: l}
	b.last = r.varint("sliding_log last")
	flags := r.uvarint("sliding_log flags")
	if flags&^3 != 0 {
		r.fail("sliding_log flags")
	}
	if flags&1 != 0 {
		b.acted = true
		b.gapAt = r.varint("sliding_log gap")
		if b.gapAt > b.last {
			r.fail("sliding_log gap after last")
		}
	}
	if flags&2 != 0 {
		b.dropped = true
		b.dropAt = r.varint("sliding_log drop")
		if b.dropAt > b.last || elapsed(b.dropAt, b.last) >= int64(l.Period) {
			r.fail("sliding_log drop")
		}
	}
	size := r.uvarint("sliding_log size")
	if r.err != nil {
		return nil, r.err
	}
	// Every entry takes at least two bytes: bound the allocation by the input.
	if size > uint64(l.Limit) || size > uint64(len(r.buf)-r.off)/2 {
		r.fail("sliding_log size")
		return nil, r.err
	}
	es := make([]slEntry, size)
	for i := range es {
		e := &es[i]
		if i == 0 {
			e.t = r.varint("sliding_log time")
		} else {
			prev := es[i-1].t
			delta := r.uvarint("sliding_log time delta")
			if delta == 0 || delta > uint64(math.MaxInt64)-uint64(prev) {
				r.fail("sliding_log time delta")
			}
			e.t = int64(uint64(prev) + delta)
		}
		e.n = r.int63("sliding_log hits")
		if e.n <= 0 || e.n > math.MaxInt64-b.sum {
			r.fail("sliding_log hits")
		}
		if r.err != nil {
			return nil, r.err
		}
		b.sum += e.n
	}
	if size > 0 {
		switch {
		case !b.acted || b.gapAt < es[size-1].t:
			r.fail("sliding_log gap before last entry")
		case elapsed(es[0].t, b.last) >= int64(l.Period):
			r.fail("sliding_log expired entry")
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	b.log = slFromEntries(es)
	return b, nil
}

// expire forgets the entries out of the window ending at eff.
func (b *slidingLog) expire(eff int64) {
	p := int64(b.l.Period)
	for b.log.size > 0 && elapsed(b.log.front().t, eff) >= p {
		b.sum -= b.log.front().n
		b.log.popFront()
	}
	if b.dropped && elapsed(b.dropAt, eff) >= p {
		b.dropped = false
	}
}

// drop removes the oldest entry of a full log (Limit entries), which only
// CountRejected, Drain, Merge or a Reconfigure to a smaller Limit can fill.
// Only the time of the newest dropped entry is kept, counted as one hit
// until it leaves the window. That changes no decision: while a dropped entry
// would still be in the window, every kept entry, newer, is too, and Limit
// entries of at least one hit each fill the window, so the log is over the
// limit whatever the dropped hits were. Only after a Refund (or a Merge) are
// the dropped hits undercounted, as that one hit.
func (b *slidingLog) drop() {
	e := b.log.front()
	b.sum -= e.n
	if !b.dropped || e.t > b.dropAt {
		b.dropAt, b.dropped = e.t, true
	}
	b.log.popFront()
}

// used returns the hits that count at the time last: logged, plus one for
// dropped entries in the window.
func (b *slidingLog) used() int64 {
	if b.dropped {
		return addSat(b.sum, 1)
	}
	return b.sum
}

// advance moves the bucket to now (or keeps it where it is if now is
// earlier), expires old entries and returns that effective time.
func (b *slidingLog) advance(now int64) int64 {
	eff := later(b.last, now)
	b.last = eff
	b.expire(eff)
	return eff
}

// record logs n > 0 hits at eff, the latest time seen. The sum saturates at
// MaxInt64; a full log drops its oldest entry.
func (b *slidingLog) record(eff, n int64) {
	b.acted, b.gapAt = true, eff
	n = min(n, math.MaxInt64-b.sum)
	if n == 0 {
		return
	}
	b.sum += n
	if b.log.size > 0 && b.log.back().t == eff {
		b.log.back().n += n
		return
	}
	if b.log.size >= int(b.l.Limit) {
		b.drop()
	}
	b.log.push(slEntry{eff, n}, int(b.l.Limit))
}

// gapBlocked reports whether MinGap forbids an action at eff.
func (b *slidingLog) gapBlocked(eff int64) bool {
	return b.l.MinGap > 0 && b.acted && elapsed(b.gapAt, eff) < int64(b.l.MinGap)
}

// Take implements Bucket. With CountRejected a rejected attempt is logged
// like an admitted one, and RetryAfter counts it. Remaining is the room left
// in the window; MinGap shows only in RetryAfter.
func (b *slidingLog) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	eff := b.advance(nanos(now))
	d := Decision{Limit: b.l.Limit}
	if !b.gapBlocked(eff) && hits <= b.l.Limit-b.used() {
		if hits > 0 {
			b.record(eff, hits)
		}
		d.Allowed = true
	} else {
		if hits > 0 && b.l.CountRejected {
			b.record(eff, hits)
		}
		d.RetryAfter = b.retry(eff, hits)
	}
	d.Remaining = max(0, b.l.Limit-b.used())
	d.ResetAt = unix(b.resetAt(eff))
	return d, nil
}

// retry returns how long until hits would be admitted, the log as it is now.
func (b *slidingLog) retry(eff, hits int64) time.Duration {
	if hits > b.l.Limit {
		return MaxRetry
	}
	at := eff
	if need := addSat(b.used(), hits) - b.l.Limit; need > 0 {
		// Walk the entries in order of expiry, the dropped hit among them.
		var freed int64
		drop := b.dropped
		for i := 0; freed < need && (drop || i < b.log.size); {
			var e slEntry
			if drop && (i == b.log.size || b.dropAt <= b.log.at(i).t) {
				e, drop = slEntry{b.dropAt, 1}, false
			} else {
				e = *b.log.at(i)
				i++
			}
			freed = addSat(freed, e.n)
			at = addSat(e.t, int64(b.l.Period))
		}
	}
	if b.gapBlocked(eff) {
		at = max(at, addSat(b.gapAt, int64(b.l.MinGap)))
	}
	return fwRetry(at, eff)
}

// resetAt returns when the log is empty and MinGap has passed.
func (b *slidingLog) resetAt(eff int64) int64 {
	at := eff
	if b.log.size > 0 {
		at = addSat(b.log.back().t, int64(b.l.Period))
	}
	if b.dropped { // only after a Refund can it outlive the log
		at = max(at, addSat(b.dropAt, int64(b.l.Period)))
	}
	if b.gapBlocked(eff) {
		at = max(at, addSat(b.gapAt, int64(b.l.MinGap)))
	}
	return at
}

// Drain implements Bucket: the hits are logged at now, past the limit if
// need be (the sum saturates at MaxInt64), and count as an action for MinGap.
func (b *slidingLog) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	eff := b.advance(nanos(now))
	if hits > 0 {
		b.record(eff, hits)
	}
	return nil
}

// Refund implements Bucket: the newest logged hits are removed first. MinGap
// still counts from the latest action.
func (b *slidingLog) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	b.advance(nanos(now))
	b.sum -= b.log.takeNewest(hits)
	return nil
}

// Reconfigure implements Bucket: the log is kept; past the new Limit, its
// oldest entries are dropped (see the type's comment) and the buffer shrinks.
func (b *slidingLog) Reconfigure(now time.Time, l Limit) error {
	if err := fwCheckLimit(b.l, l); err != nil {
		return err
	}
	eff := b.advance(nanos(now))
	b.l = l
	b.expire(eff)
	for b.log.size > int(l.Limit) {
		b.drop()
	}
	if len(b.log.buf) > int(l.Limit) {
		b.log.resize(b.log.size)
	}
	return nil
}

// live returns a copy of the entries still in the window ending at eff.
func (b *slidingLog) live(eff int64) []slEntry {
	es := b.log.entries()
	p := int64(b.l.Period)
	i := 0
	for i < len(es) && elapsed(es[i].t, eff) >= p {
		i++
	}
	return es[i:]
}

// Merge implements Bucket: the union of the two logs, the larger count where
// both hold the same instant, trimmed to the newest Limit entries.
func (b *slidingLog) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*slidingLog)
	if !ok || o == nil {
		return fwMismatch(b.l.Algorithm, other)
	}
	eff := later(later(b.last, o.last), nanos(now))
	es := slUnion(b.live(eff), o.live(eff))
	p := int64(b.l.Period)
	for len(es) > 0 && elapsed(es[0].t, eff) >= p { // other's period may be longer
		es = es[1:]
	}
	dropAt, dropped := int64(math.MinInt64), false
	markDrop := func(t int64) { dropAt, dropped = max(t, dropAt), true }
	for _, x := range [2]*slidingLog{b, o} {
		if x.dropped && elapsed(x.dropAt, eff) < p {
			markDrop(x.dropAt)
		}
	}
	if extra := len(es) - int(b.l.Limit); extra > 0 {
		markDrop(es[extra-1].t)
		es = es[extra:]
	}
	if !dropped {
		dropAt = 0
	}
	b.dropAt, b.dropped = dropAt, dropped
	b.sum = 0
	for i := range es {
		es[i].n = min(es[i].n, math.MaxInt64-b.sum)
		b.sum += es[i].n
	}
	es = slices.DeleteFunc(es, func(e slEntry) bool { return e.n == 0 })
	if o.acted && (!b.acted || o.gapAt > b.gapAt) {
		b.gapAt = o.gapAt
	}
	b.acted = b.acted || o.acted
	b.last = eff
	b.log = slFromEntries(es)
	return nil
}

// Config implements Bucket.
func (b *slidingLog) Config() Limit { return b.l }

// Idle implements Bucket.
func (b *slidingLog) Idle(now time.Time) bool {
	eff := later(b.last, nanos(now))
	p := int64(b.l.Period)
	empty := b.log.size == 0 || elapsed(b.log.back().t, eff) >= p
	return empty && !(b.dropped && elapsed(b.dropAt, eff) < p) && !b.gapBlocked(eff)
}

// Clone implements Bucket.
func (b *slidingLog) Clone() Bucket {
	c := *b
	c.log = slFromEntries(b.log.entries())
	return &c
}

// AppendBinary implements Bucket. Times after the first are written as
// deltas.
func (b *slidingLog) AppendBinary(buf []byte) ([]byte, error) {
	buf = appendLimit(buf, b.l)
	buf = appendVarint(buf, b.last)
	var flags uint64
	if b.acted {
		flags |= 1
	}
	if b.dropped {
		flags |= 2
	}
	buf = appendUvarint(buf, flags)
	if b.acted {
		buf = appendVarint(buf, b.gapAt)
	}
	if b.dropped {
		buf = appendVarint(buf, b.dropAt)
	}
	buf = appendUvarint(buf, uint64(b.log.size))
	for i := 0; i < b.log.size; i++ {
		e := b.log.at(i)
		if i == 0 {
			buf = appendVarint(buf, e.t)
		} else {
			buf = appendUvarint(buf, uint64(e.t)-uint64(b.log.at(i-1).t))
		}
		buf = appendUvarint(buf, uint64(e.n))
	}
	return buf, nil
}
