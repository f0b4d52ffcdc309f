package bucket

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// ccStep is one step of a semaphore table: op is "take" (default),
// "acquire", "release" (want released permits in remain), "drain" or
// "refund".
type ccStep struct {
	name    string
	at      time.Duration
	op      string
	lease   string
	n       int64
	allowed bool
	remain  int64
	retry   time.Duration
	reset   time.Duration
}

func ccRun(t *testing.T, s Semaphore, base time.Time, steps []ccStep) {
	t.Helper()
	for _, c := range steps {
		now := base.Add(c.at)
		var d Decision
		var err error
		switch c.op {
		case "release":
			if got := s.Release(now, c.lease); got != c.remain {
				t.Errorf("%s: Release(%q) = %d, want %d", c.name, c.lease, got, c.remain)
			}
			continue
		case "drain":
			err = s.Drain(now, c.n)
		case "refund":
			err = s.Refund(now, c.n)
		case "acquire":
			d, err = s.Acquire(now, c.lease, c.n)
		default:
			d, err = s.Take(now, c.n)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.op == "drain" || c.op == "refund" {
			continue
		}
		want := Decision{Allowed: c.allowed, Limit: s.Config().Limit, Remaining: c.remain, RetryAfter: c.retry, ResetAt: base.Add(c.reset)}
		if d.Allowed != want.Allowed || d.Remaining != want.Remaining || d.RetryAfter != want.RetryAfter ||
			!d.ResetAt.Equal(want.ResetAt) || d.Limit != want.Limit {
			t.Errorf("%s: %s(+%v, %q, %d)\n got  %+v\n want %+v", c.name, c.op, c.at, c.lease, c.n, fwShow(d, base), fwShow(want, base))
		}
	}
}

func ccMust(t testing.TB, l Limit, now time.Time) Semaphore {
	t.Helper()
	return fwMust(t, l, now).(Semaphore)
}

func TestConcurrencyErrors(t *testing.T) {
	fwCommonErrors(t, Limit{Algorithm: Concurrency, Limit: 3, Period: time.Second})
}

func TestConcurrencySteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	sem := ccMust(t, Limit{Algorithm: Concurrency, Limit: 3, Period: 10 * s}, t0)
	ccRun(t, sem, t0, []ccStep{
		{name: "fresh peek", allowed: true, remain: 3},
		{name: "a", op: "acquire", lease: "a", n: 1, allowed: true, remain: 2, reset: 10 * s},
		{name: "b", op: "acquire", at: s, lease: "b", n: 1, allowed: true, remain: 1, reset: 11 * s},
		{name: "anonymous", at: 2 * s, n: 1, allowed: true, remain: 0, reset: 12 * s},
		{name: "c waits for a to expire", op: "acquire", at: 3 * s, lease: "c", n: 1, remain: 0, retry: 7 * s, reset: 12 * s},
		{name: "renew a: always allowed", op: "acquire", at: 4 * s, lease: "a", n: 0, allowed: true, remain: 0, reset: 14 * s},
		{name: "c now waits for b", op: "acquire", at: 4 * s, lease: "c", n: 1, remain: 0, retry: 7 * s, reset: 14 * s},
		{name: "release b", op: "release", at: 5 * s, lease: "b", remain: 1},
		{name: "release b again", op: "release", at: 5 * s, lease: "b", remain: 0},
		{name: "c", op: "acquire", at: 5 * s, lease: "c", n: 1, allowed: true, remain: 0, reset: 15 * s},
		{name: "more than the limit never fits", op: "acquire", at: 5 * s, lease: "c", n: 4, remain: 0, retry: MaxRetry, reset: 15 * s},
		{name: "c wants 1 more: anonymous expires first", op: "acquire", at: 6 * s, lease: "c", n: 1, remain: 0, retry: 6 * s, reset: 15 * s},
		{name: "c grows and renews", op: "acquire", at: 12 * s, lease: "c", n: 1, allowed: true, remain: 0, reset: 22 * s},
		{name: "clock back is no time elapsed", at: 7 * s, n: 1, remain: 0, retry: 2 * s, reset: 22 * s},
		{name: "a expired at 14s", op: "release", at: 14 * s, lease: "a", remain: 0},
		{name: "drain past the limit", op: "drain", at: 14 * s, n: 4},
		{name: "in debt: c (2) expires, then the drained 4", at: 14 * s, remain: 0, retry: 10 * s, reset: 24 * s},
		{name: "renewing c in debt", op: "acquire", at: 14 * s, lease: "c", allowed: true, remain: 0, reset: 24 * s},
		{name: "refund gives back anonymous permits only", op: "refund", at: 14 * s, n: 5},
		{name: "refunded", at: 14 * s, allowed: true, remain: 1, reset: 24 * s},
		{name: "empty id is anonymous", op: "acquire", at: 14 * s, n: 1, allowed: true, remain: 0, reset: 24 * s},
		{name: "peek under an unknown lease creates nothing", op: "acquire", at: 15 * s, lease: "d", allowed: true, remain: 0, reset: 24 * s},
		{name: "d unknown", op: "release", at: 15 * s, lease: "d", remain: 0},
		{name: "c released", op: "release", at: 15 * s, lease: "c", remain: 2},
	})
	if !sem.Idle(t0.Add(24 * s)) {
		t.Error("not idle when every lease expired")
	}
}

func TestConcurrencyRunsAndSlots(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	// Drains at distinct instants past the run limit fold into the newest run.
	sem := ccMust(t, Limit{Algorithm: Concurrency, Limit: 2, Period: time.Second}, t0)
	for i := range 5 {
		sem.Drain(t0.Add(time.Duration(i)*time.Millisecond), 1)
	}
	c := sem.(*concurrency)
	if c.anon.size != 2 || c.held != 5 || c.anon.back().t != nanos(t0.Add(time.Second+4*time.Millisecond)) {
		t.Errorf("runs %d held %d: want 2 runs holding 5", c.anon.size, c.held)
	}
	fwRoundTrip(t, sem)

	// Renewing leases in turn reuses released slots: memory follows the live leases.
	sem = ccMust(t, Limit{Algorithm: Concurrency, Limit: 8, Period: time.Second}, t0)
	c = sem.(*concurrency)
	for i := range 10_000 {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		sem.Release(now, strconv.Itoa(i%8))
		if d, _ := sem.Acquire(now, strconv.Itoa(i%8), 1); !d.Allowed {
			t.Fatalf("step %d: %+v", i, d)
		}
		sem.Acquire(now, strconv.Itoa((i+3)%8), 0) // renew another: a released slot in the middle
	}
	if c.live > 8 || cap(c.slots) > 32 || len(c.index) != c.live {
		t.Errorf("live %d slots %d/%d index %d", c.live, len(c.slots), cap(c.slots), len(c.index))
	}
	i := 0
	renew := func() { i++; sem.Acquire(t0.Add(time.Second+time.Duration(i)), strconv.Itoa(i%4), 0) }
	for range 100 {
		renew()
	}
	sem.Acquire(t0.Add(time.Second), "0", 1)
	if n := testing.AllocsPerRun(1000, renew); n != 0 {
		t.Errorf("renewal: %v allocs, want 0", n)
	}
	j := 0
	take := func() { j++; sem.Take(t0.Add(2*time.Second+time.Duration(j)*time.Millisecond), 1) }
	for range 2000 {
		take()
	}
	if n := testing.AllocsPerRun(1000, take); n != 0 {
		t.Errorf("steady-state Take: %v allocs, want 0", n)
	}
}

func TestConcurrencyReconfigureMerge(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	l := Limit{Algorithm: Concurrency, Limit: 4, Period: 10 * s}
	sem := ccMust(t, l, t0)
	sem.Acquire(t0, "a", 2)
	sem.Take(t0.Add(s), 1)
	l2 := l
	l2.Limit, l2.Period = 2, 5*s
	if err := sem.Reconfigure(t0.Add(2*s), l2); err != nil {
		t.Fatal(err)
	}
	// Leases kept (3 held > 2), expiries capped at 2s + 5s.
	ccRun(t, sem, t0, []ccStep{{name: "kept, shortened", at: 2 * s, remain: 0, retry: 5 * s, reset: 7 * s}})
	l3 := l2
	l3.Period = time.Minute
	sem.Reconfigure(t0.Add(3*s), l3)
	ccRun(t, sem, t0, []ccStep{
		{name: "a longer period keeps expiries", at: 3 * s, remain: 0, retry: 4 * s, reset: 7 * s},
		{name: "new leases get it", op: "acquire", at: 7 * s, lease: "b", n: 1, allowed: true, remain: 1, reset: 67 * s},
	})

	l4 := l3
	l4.Limit = 10 // another node's view
	o := ccMust(t, l4, t0)
	o.Acquire(t0.Add(6*s), "b", 2) // b: 2 until 66s here, 1 until 67s there
	o.Acquire(t0.Add(6*s), "c", 1)
	o.Take(t0.Add(8*s), 1)
	if err := sem.Merge(t0.Add(8*s), o); err != nil {
		t.Fatal(err)
	}
	// Union: b holds max(1, 2) = 2 until 67s, c 1 until 66s, anonymous 1
	// until 68s: 4 of 2, and 2 free when b expires.
	ccRun(t, sem, t0, []ccStep{{name: "merged", at: 8 * s, remain: 0, retry: 59 * s, reset: 68 * s}})
	sem.Merge(t0.Add(8*s), sem.Clone())
	ccRun(t, sem, t0, []ccStep{
		{name: "merge with itself changes nothing", at: 8 * s, remain: 0, retry: 59 * s, reset: 68 * s},
		{name: "release merged b", op: "release", at: 8 * s, lease: "b", remain: 2},
	})
	d := fwRoundTrip(t, sem).(Semaphore)
	ccRun(t, d, t0, []ccStep{{name: "decoded c", op: "release", at: 8 * s, lease: "c", remain: 1}})
}

// ccRef is the naive semaphore: every lease and anonymous grant, expired by
// scanning.
type ccRef struct {
	l      Limit
	eff    int64
	leases map[string]slEntry // t: expiry
	anon   []slEntry
}

func (r *ccRef) heldAt(at int64) (n int64) {
	for _, e := range r.leases {
		if e.t > at {
			n += e.n
		}
	}
	for _, e := range r.anon {
		if e.t > at {
			n += e.n
		}
	}
	return n
}

func (r *ccRef) acquire(now int64, lease string, n int64) Decision {
	r.eff = max(r.eff, now)
	for id, e := range r.leases {
		if e.t <= r.eff {
			delete(r.leases, id)
		}
	}
	r.anon = slices.DeleteFunc(r.anon, func(e slEntry) bool { return e.t <= r.eff })
	exp := r.eff + int64(r.l.Period)
	cur, held := r.leases[lease]
	d := Decision{Limit: r.l.Limit, Allowed: (held && n == 0) || r.heldAt(r.eff)+n <= r.l.Limit}
	switch {
	case d.Allowed && held:
		r.leases[lease] = slEntry{exp, cur.n + n}
	case d.Allowed && n > 0 && lease == "":
		r.anon = append(r.anon, slEntry{exp, n})
	case d.Allowed && n > 0:
		r.leases[lease] = slEntry{exp, n}
	case n > r.l.Limit:
		d.RetryAfter = MaxRetry
	case !d.Allowed:
		var at []int64
		for _, e := range r.leases {
			at = append(at, e.t)
		}
		for _, e := range r.anon {
			at = append(at, e.t)
		}
		slices.Sort(at)
		for _, a := range at {
			if r.heldAt(a)+n <= r.l.Limit {
				d.RetryAfter = time.Duration(a - r.eff)
				break
			}
		}
	}
	d.Remaining = max(0, r.l.Limit-r.heldAt(r.eff))
	reset := r.eff
	for _, e := range r.leases {
		reset = max(reset, e.t)
	}
	for _, e := range r.anon {
		reset = max(reset, e.t)
	}
	d.ResetAt = unix(reset)
	return d
}

// TestConcurrencyProperty plays random acquisitions, releases, takes and
// refunds against the naive semaphore: same decisions, and never more than
// Limit permits held.
func TestConcurrencyProperty(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 8))
		l := Limit{Algorithm: Concurrency, Limit: 1 + rng.Int64N(6), Period: time.Duration(1 + rng.Int64N(60))}
		p := int64(l.Period)
		now := rng.Int64N(1000) - 500
		sem := ccMust(t, l, unix(now))
		ref := &ccRef{l: l, eff: now, leases: map[string]slEntry{}}
		for i := range 800 {
			now += rng.Int64N(p/3+2) - 1 // sometimes backwards
			lease := ""
			if rng.IntN(4) != 0 {
				lease = string(rune('a' + rng.IntN(8)))
			}
			n := rng.Int64N(l.Limit + 2)
			switch rng.IntN(10) {
			case 0:
				ref.acquire(now, "", 0) // expire
				got, want := sem.Release(unix(now), lease), ref.leases[lease].n
				delete(ref.leases, lease)
				if got != want {
					t.Fatalf("seed %d step %d: Release(%q) = %d, want %d", seed, i, lease, got, want)
				}
				continue
			case 1:
				sem.Refund(unix(now), n)
				ref.acquire(now, "", 0)
				slices.SortFunc(ref.anon, func(a, b slEntry) int { return cmp.Compare(b.t, a.t) })
				for k := range ref.anon {
					take := min(n, ref.anon[k].n)
					ref.anon[k].n -= take
					n -= take
				}
				ref.anon = slices.DeleteFunc(ref.anon, func(e slEntry) bool { return e.n == 0 })
				continue
			}
			d, _ := sem.Acquire(unix(now), lease, n)
			want := ref.acquire(now, lease, n)
			if d != want {
				t.Fatalf("seed %d %+v step %d: Acquire(%d, %q, %d)\n got  %+v\n want %+v", seed, l, i, now, lease, n, d, want)
			}
			if h := ref.heldAt(ref.eff); h > l.Limit {
				t.Fatalf("seed %d: %d permits held > %d", seed, h, l.Limit)
			}
			if i%50 == 0 {
				sem = fwRoundTrip(t, sem).(Semaphore)
			}
			if i%70 == 0 {
				sem = sem.Clone().(Semaphore)
			}
		}
	}
}

func TestConcurrencyDecodeRejects(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Limit: 3, Period: 10}
	for _, c := range []struct {
		name string
		body []any // int64 -> varint, uint64 -> uvarint, string -> length-prefixed
	}{
		{"too many runs", []any{int64(0), uint64(4), int64(1), uint64(1), int64(2), uint64(1), int64(3), uint64(1), int64(4), uint64(1), uint64(0)}},
		{"runs unsorted", []any{int64(0), uint64(2), int64(2), uint64(1), int64(1), uint64(1), uint64(0)}},
		{"runs equal", []any{int64(0), uint64(2), int64(2), uint64(1), int64(2), uint64(1), uint64(0)}},
		{"zero permits", []any{int64(0), uint64(1), int64(2), uint64(0), uint64(0)}},
		{"beyond the timeout", []any{int64(0), uint64(1), int64(11), uint64(1), uint64(0)}},
		{"before last", []any{int64(5), uint64(1), int64(4), uint64(1), uint64(0)}},
		{"permits overflow", []any{int64(0), uint64(2), int64(2), uint64(math.MaxInt64), int64(3), uint64(1), uint64(0)}},
		{"empty id", []any{int64(0), uint64(0), uint64(1), "", uint64(1), int64(3)}},
		{"duplicate id", []any{int64(0), uint64(0), uint64(2), "a", uint64(1), int64(3), "a", uint64(1), int64(4)}},
		{"leases unsorted", []any{int64(0), uint64(0), uint64(2), "a", uint64(1), int64(4), "b", uint64(1), int64(3)}},
		{"too many leases", []any{int64(0), uint64(0), uint64(4), "a", uint64(1), int64(4), "b", uint64(1), int64(4), "c", uint64(1), int64(4), "d", uint64(1), int64(4)}},
		{"id past the end", []any{int64(0), uint64(0), uint64(1), uint64(50), uint64(1)}},
	} {
		b := appendLimit(nil, l)
		for _, v := range c.body {
			switch v := v.(type) {
			case int64:
				b = appendVarint(b, v)
			case uint64:
				b = appendUvarint(b, v)
			case string:
				b = append(appendUvarint(b, uint64(len(v))), v...)
			}
		}
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: Decode accepted %x", c.name, b)
		}
	}
}

func FuzzConcurrency(f *testing.F) {
	fwFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, limit, period, start, dt, hits int64) {
		l := fwFuzzLimit(Concurrency, limit, period)
		fwFuzzBody(t, l, start, dt, hits)
		sem := fwMust(t, l, unix(start)).(Semaphore)
		now := start
		for i := range 6 {
			id := strconv.Itoa(int(uint64(hits+int64(i)) % 3))
			d, err := sem.Acquire(unix(now), id, hits)
			if (err != nil) != (hits < 0) {
				t.Fatalf("Acquire(%d): %v", hits, err)
			}
			if err == nil {
				fwCheckDecision(t, "acquire", l, hits, d)
			}
			if got := sem.Release(unix(now), strconv.Itoa(i%3)); got < 0 {
				t.Fatalf("Release = %d", got)
			}
			now = addSat(now, dt)
			sem = fwRoundTrip(t, sem).(Semaphore)
		}
	})
}

func BenchmarkTakeConcurrency(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	sem := ccMust(b, Limit{Algorithm: Concurrency, Limit: 1000, Period: time.Second}, t0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sem.Take(t0.Add(time.Duration(i)*700*time.Microsecond), 1)
	}
}

func BenchmarkConcurrencyAcquireRelease(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	sem := ccMust(b, Limit{Algorithm: Concurrency, Limit: 1000, Period: time.Second}, t0)
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		sem.Acquire(now, ids[i%64], 1)
		sem.Release(now, ids[(i+32)%64])
	}
}
