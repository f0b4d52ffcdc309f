package bucket

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// concurrency is a semaphore of Limit permits. A lease, named by its id, holds
// n >= 1 permits until released or until Period after it was last acquired or
// renewed, so a crashed holder cannot leak permits; expired leases free their
// permits lazily, at the next call. Take acquires anonymous permits, which only
// expire. Bound: at most Limit permits held at once (Drain aside). Memory: at
// most min(Limit, MaxLogLimit) named leases and as many anonymous (expiry,
// count) runs. Take and a renewal allocate nothing in steady state; a new
// named lease may (map entry, slot growth).
type concurrency struct {
	l     Limit
	last  int64 // latest time seen, Unix ns
	held  int64 // permits held, anonymous and named
	anon  slRing
	slots []ccLease // named leases by non-decreasing expiry from first on; the last one is live
	first int
	live  int            // live named leases
	index map[string]int // lease id -> position in slots
}

var (
	_ Bucket    = (*concurrency)(nil)
	_ Semaphore = (*concurrency)(nil)
)

// ccLease is a named lease. A released or renewed-elsewhere slot has n == 0.
type ccLease struct {
	id  string
	n   int64 // permits held
	exp int64 // expiry, Unix ns
}

func newConcurrency(l Limit, now int64) Bucket { return &concurrency{l: l, last: now} }

// ccMaxRuns returns how many named leases, and how many anonymous runs, a
// state under l keeps at most.
func ccMaxRuns(l Limit) int { return int(min(l.Limit, MaxLogLimit)) }

// ccString reads a length-prefixed string of at least one byte.
func ccString(r *reader, what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n == 0 || n > uint64(len(r.buf)-r.off) {
		r.fail(what)
		return ""
	}
	s := string(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

func decodeConcurrency(l Limit, r *reader) (Bucket, error) {
	c := &concurrency{l: l}
	c.last = r.varint("concurrency last")
	horizon := addSat(c.last, int64(l.Period))
	prev := int64(math.MinInt64)
	// count reads the length of a list whose items take at least size bytes.
	count := func(what string, size uint64) int {
		n := r.uvarint(what)
		if r.err == nil && (n > uint64(ccMaxRuns(l)) || n > uint64(len(r.buf)-r.off)/size) {
			r.fail(what)
		}
		if r.err != nil {
			return 0
		}
		return int(n)
	}
	// check validates an expiry, in order after prev (strictly for runs), and
	// a count of permits.
	check := func(exp, n int64, strict bool) {
		if exp < c.last || exp > horizon || exp < prev || (strict && exp == prev) {
			r.fail("concurrency expiry")
		}
		if n <= 0 || n > math.MaxInt64-c.held {
			r.fail("concurrency permits")
		}
		prev, c.held = exp, c.held+n
	}
	es := make([]slEntry, count("concurrency runs", 2))
	for i := range es {
		es[i].t = r.varint("concurrency expiry")
		es[i].n = r.int63("concurrency permits")
		check(es[i].t, es[i].n, i > 0)
	}
	c.anon = slFromEntries(es)
	prev = math.MinInt64
	n := count("concurrency leases", 4)
	for i := 0; i < n && r.err == nil; i++ {
		s := ccLease{id: ccString(r, "concurrency lease id")}
		s.n = r.int63("concurrency lease permits")
		s.exp = r.varint("concurrency lease expiry")
		check(s.exp, s.n, false)
		if _, dup := c.index[s.id]; dup {
			r.fail("concurrency duplicate lease")
		}
		c.pushLease(s)
	}
	if r.err != nil {
		return nil, r.err
	}
	return c, nil
}

// expire frees the permits of the leases expired at eff.
func (c *concurrency) expire(eff int64) {
	for c.anon.size > 0 && c.anon.front().t <= eff {
		c.held -= c.anon.front().n
		c.anon.popFront()
	}
	for c.first < len(c.slots) {
		s := &c.slots[c.first]
		if s.n > 0 {
			if s.exp > eff {
				break
			}
			c.held -= s.n
			delete(c.index, s.id)
			c.live--
		}
		*s = ccLease{}
		c.first++
	}
	if c.first == len(c.slots) {
		c.slots, c.first = c.slots[:0], 0
	}
}

// advance moves the semaphore to now (or keeps it where it is if now is
// earlier), expires leases and returns that effective time.
func (c *concurrency) advance(now int64) int64 {
	eff := later(c.last, now)
	c.last = eff
	c.expire(eff)
	return eff
}

// pushAnon adds n permits that expire at exp, no earlier than any run held.
// When the runs are at their maximum, the newest run takes them (and the
// later expiry): its permits are held a little longer, never lost.
func (c *concurrency) pushAnon(exp, n int64) {
	n = min(n, math.MaxInt64-c.held)
	if n <= 0 {
		return
	}
	c.held += n
	if c.anon.size > 0 {
		if b := c.anon.back(); b.t >= exp || c.anon.size >= ccMaxRuns(c.l) {
			b.n += n
			b.t = max(b.t, exp)
			return
		}
	}
	c.anon.push(slEntry{exp, n}, ccMaxRuns(c.l))
}

// pushLease appends a live lease, the latest to expire, reusing released
// slots when at least half of them are released.
func (c *concurrency) pushLease(s ccLease) {
	if len(c.slots) == cap(c.slots) && 2*c.live <= len(c.slots) && len(c.slots) > 0 {
		j := 0
		for _, t := range c.slots[c.first:] {
			if t.n > 0 {
				c.slots[j] = t
				c.index[t.id] = j
				j++
			}
		}
		clear(c.slots[j:])
		c.slots, c.first = c.slots[:j], 0
	}
	if c.index == nil {
		c.index = make(map[string]int)
	}
	c.index[s.id] = len(c.slots)
	c.slots = append(c.slots, s)
	c.live++
}

// dropLease releases the lease at position i and trims released slots off
// the end.
func (c *concurrency) dropLease(i int) {
	s := &c.slots[i]
	c.held -= s.n
	c.live--
	delete(c.index, s.id)
	*s = ccLease{}
	for len(c.slots) > c.first && c.slots[len(c.slots)-1].n == 0 {
		c.slots = c.slots[:len(c.slots)-1]
	}
	if c.first == len(c.slots) {
		c.slots, c.first = c.slots[:0], 0
	}
}

// Take implements Bucket: it acquires anonymous permits, which only expire.
func (c *concurrency) Take(now time.Time, hits int64) (Decision, error) {
	return c.Acquire(now, "", hits)
}

// Acquire implements Semaphore. An empty lease acquires anonymous permits,
// like Take. Acquiring 0 permits under a held lease renews it and is always
// allowed; under another lease it peeks.
func (c *concurrency) Acquire(now time.Time, lease string, n int64) (Decision, error) {
	if n < 0 {
		return Decision{}, ErrNegativeHits
	}
	eff := c.advance(nanos(now))
	exp := addSat(eff, int64(c.l.Period))
	pos, held := c.index[lease]
	if lease == "" {
		held = false
	}
	full := lease != "" && !held && n > 0 && c.live >= ccMaxRuns(c.l)
	d := Decision{Limit: c.l.Limit}
	switch {
	case (held && n == 0) || (n <= c.l.Limit-c.held && !full):
		d.Allowed = true
		switch {
		case held:
			c.renew(pos, n, exp)
		case n == 0:
		case lease == "":
			c.pushAnon(exp, n)
		default:
			c.held += n
			c.pushLease(ccLease{id: lease, n: n, exp: exp})
		}
	case n > c.l.Limit:
		d.RetryAfter = MaxRetry
	default:
		d.RetryAfter = c.retry(eff, n, full)
	}
	d.Remaining = max(0, c.l.Limit-c.held)
	d.ResetAt = unix(c.resetAt(eff))
	return d, nil
}

// renew adds n permits to the live lease at position pos and moves its expiry
// to exp, the latest of all.
func (c *concurrency) renew(pos int, n, exp int64) {
	c.held += n
	s := &c.slots[pos]
	if pos == len(c.slots)-1 {
		s.n += n
		s.exp = max(s.exp, exp)
		return
	}
	t := ccLease{id: s.id, n: s.n + n, exp: exp}
	*s = ccLease{}
	c.live--
	c.pushLease(t)
}

// retry returns how long until n permits fit, by walking the anonymous runs
// and the named leases in order of expiry; full says a new lease must also
// wait for the oldest lease to end.
func (c *concurrency) retry(eff, n int64, full bool) time.Duration {
	at := eff
	if need := addSat(c.held, n) - c.l.Limit; need > 0 {
		var freed int64
		i, j := 0, c.first
		for freed < need && (i < c.anon.size || j < len(c.slots)) {
			if j < len(c.slots) && c.slots[j].n == 0 {
				j++
				continue
			}
			if j == len(c.slots) || (i < c.anon.size && c.anon.at(i).t <= c.slots[j].exp) {
				e := c.anon.at(i)
				freed, at = addSat(freed, e.n), e.t
				i++
			} else {
				freed, at = addSat(freed, c.slots[j].n), c.slots[j].exp
				j++
			}
		}
	}
	if full {
		at = max(at, c.slots[c.first].exp)
	}
	return fwRetry(at, eff)
}

// resetAt returns when the last lease expires (eff if none is held).
func (c *concurrency) resetAt(eff int64) int64 {
	at := eff
	if c.anon.size > 0 {
		at = max(at, c.anon.back().t)
	}
	if len(c.slots) > c.first {
		at = max(at, c.slots[len(c.slots)-1].exp)
	}
	return at
}

// Release implements Semaphore.
func (c *concurrency) Release(now time.Time, lease string) int64 {
	c.advance(nanos(now))
	pos, ok := c.index[lease]
	if !ok {
		return 0
	}
	n := c.slots[pos].n
	c.dropLease(pos)
	return n
}

// Drain implements Bucket: it force-acquires anonymous permits, past Limit if
// need be (the permits held saturate at MaxInt64).
func (c *concurrency) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	eff := c.advance(nanos(now))
	if hits > 0 {
		c.pushAnon(addSat(eff, int64(c.l.Period)), hits)
	}
	return nil
}

// Refund implements Bucket: it releases anonymous permits, the newest first.
// Named leases are released only by Release.
func (c *concurrency) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	c.advance(nanos(now))
	c.held -= c.anon.takeNewest(hits)
	return nil
}

// Reconfigure implements Bucket: every lease is kept, with its permits (so
// Remaining may stay 0 until enough end under a smaller Limit); a shorter
// Period caps every expiry at now plus the new Period.
func (c *concurrency) Reconfigure(now time.Time, l Limit) error {
	if err := fwCheckLimit(c.l, l); err != nil {
		return err
	}
	eff := c.advance(nanos(now))
	horizon := addSat(eff, int64(l.Period))
	anon := c.anon.entries()
	for i := range anon {
		anon[i].t = min(anon[i].t, horizon)
	}
	for i := range c.slots {
		c.slots[i].exp = min(c.slots[i].exp, horizon)
	}
	c.l = l
	// Named leases past the new maximum, the earliest to expire, become
	// anonymous (as in Merge): their permits are kept, their ids forgotten.
	for i := c.first; c.live > ccMaxRuns(l); i++ {
		if s := &c.slots[i]; s.n > 0 {
			anon = append(anon, slEntry{s.exp, s.n})
			delete(c.index, s.id)
			*s = ccLease{}
			c.live--
		}
	}
	slices.SortStableFunc(anon, func(a, b slEntry) int { return cmp.Compare(a.t, b.t) })
	c.anon = slFromEntries(ccRuns(anon, ccMaxRuns(l))) // the sum is unchanged: held
	return nil
}

// ccRuns returns the runs es (sorted by expiry, possibly equal) with equal
// expiries merged and, past max runs, the oldest runs folded into the next
// one (held a little longer, never lost). It reuses es.
func ccRuns(es []slEntry, max int) []slEntry {
	j := 0
	for i, e := range es {
		if i > 0 && es[j-1].t == e.t {
			es[j-1].n = addSat(es[j-1].n, e.n)
			continue
		}
		es[j] = e
		j++
	}
	es = es[:j]
	for len(es) > max {
		es[1].n = addSat(es[1].n, es[0].n)
		es = es[1:]
	}
	return slices.Clip(es)
}

// Merge implements Bucket: the union of the leases of both, each with the
// larger count and the later expiry of its two copies, and the union of the
// anonymous runs, the larger count where both expire at the same instant.
// Named leases past the maximum (the earliest to expire) become anonymous.
func (c *concurrency) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*concurrency)
	if !ok || o == nil {
		return fwMismatch(c.l.Algorithm, other)
	}
	eff := later(later(c.last, o.last), nanos(now))
	c.advance(eff)
	horizon := addSat(eff, int64(c.l.Period))
	live := func(es []slEntry) []slEntry {
		out := es[:0]
		for _, e := range es {
			if e.t <= eff {
				continue
			}
			e.t = min(e.t, horizon) // other's Period may be longer
			if len(out) > 0 && out[len(out)-1].t == e.t {
				out[len(out)-1].n += e.n // one side's runs sum to at most MaxInt64
				continue
			}
			out = append(out, e)
		}
		return out
	}
	anon := slUnion(live(c.anon.entries()), live(o.anon.entries()))
	leases := make([]ccLease, 0, c.live+o.live)
	seen := make(map[string]int, c.live+o.live)
	for _, x := range [2]*concurrency{c, o} {
		for _, s := range x.slots[x.first:] {
			if s.n == 0 || s.exp <= eff {
				continue
			}
			s.exp = min(s.exp, horizon)
			if i, dup := seen[s.id]; dup {
				leases[i].n = max(leases[i].n, s.n)
				leases[i].exp = max(leases[i].exp, s.exp)
				continue
			}
			seen[s.id] = len(leases)
			leases = append(leases, s)
		}
	}
	slices.SortStableFunc(leases, func(a, b ccLease) int { return cmp.Compare(a.exp, b.exp) })
	if extra := len(leases) - ccMaxRuns(c.l); extra > 0 {
		for _, s := range leases[:extra] {
			anon = append(anon, slEntry{s.exp, s.n})
		}
		leases = leases[extra:]
		slices.SortStableFunc(anon, func(a, b slEntry) int { return cmp.Compare(a.t, b.t) })
	}
	// Rebuild, the permits held saturating at MaxInt64.
	c.held = 0
	clamp := func(n int64) int64 { n = min(n, math.MaxInt64-c.held); c.held += n; return n }
	runs := ccRuns(anon, ccMaxRuns(c.l))
	for i := range runs {
		runs[i].n = clamp(runs[i].n)
	}
	c.anon = slFromEntries(slices.DeleteFunc(runs, func(e slEntry) bool { return e.n == 0 }))
	c.slots, c.first, c.live, c.index = nil, 0, 0, nil
	for _, s := range leases {
		if s.n = clamp(s.n); s.n > 0 {
			c.pushLease(s)
		}
	}
	return nil
}

// Config implements Bucket.
func (c *concurrency) Config() Limit { return c.l }

// Idle implements Bucket: no permit is held at now.
func (c *concurrency) Idle(now time.Time) bool {
	eff := later(c.last, nanos(now))
	return c.resetAt(eff) <= eff
}

// Clone implements Bucket.
func (c *concurrency) Clone() Bucket {
	d := &concurrency{l: c.l, last: c.last, held: c.held}
	d.anon = slFromEntries(c.anon.entries())
	for _, s := range c.slots[c.first:] {
		if s.n > 0 {
			d.pushLease(s)
		}
	}
	return d
}

// AppendBinary implements Bucket: the anonymous runs, then the live leases
// in order of expiry.
func (c *concurrency) AppendBinary(b []byte) ([]byte, error) {
	b = appendLimit(b, c.l)
	b = appendVarint(b, c.last)
	b = appendUvarint(b, uint64(c.anon.size))
	for i := 0; i < c.anon.size; i++ {
		e := c.anon.at(i)
		b = appendVarint(b, e.t)
		b = appendUvarint(b, uint64(e.n))
	}
	b = appendUvarint(b, uint64(c.live))
	for _, s := range c.slots[c.first:] {
		if s.n > 0 {
			b = appendUvarint(b, uint64(len(s.id)))
			b = append(b, s.id...)
			b = appendUvarint(b, uint64(s.n))
			b = appendVarint(b, s.exp)
		}
	}
	return b, nil
}
