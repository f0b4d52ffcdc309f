package bucket

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestSlidingLogErrors(t *testing.T) {
	fwCommonErrors(t, Limit{Algorithm: SlidingLog, Limit: 3, Period: time.Second})
}

func TestSlidingLogSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	b := fwMust(t, Limit{Algorithm: SlidingLog, Limit: 3, Period: 10 * s}, t0)
	fwRun(t, b, t0, []fwStep{
		{name: "fresh peek", allowed: true, remain: 3, reset: 0},
		{name: "take 1", hits: 1, allowed: true, remain: 2, reset: 10 * s},
		{name: "take 1 more", at: 2 * s, hits: 1, allowed: true, remain: 1, reset: 12 * s},
		{name: "2 do not fit: wait for the first to expire", at: 3 * s, hits: 2, remain: 1, retry: 7 * s, reset: 12 * s},
		{name: "more than the limit never fits", at: 3 * s, hits: 4, remain: 1, retry: MaxRetry, reset: 12 * s},
		{name: "last one fits", at: 4 * s, hits: 1, allowed: true, remain: 0, reset: 14 * s},
		{name: "full", at: 9 * s, hits: 1, retry: s, reset: 14 * s},
		{name: "first expired: (0s, 10s] excludes 0s", at: 10 * s, hits: 1, allowed: true, remain: 0, reset: 20 * s},
		{name: "clock back is no time elapsed", at: 5 * s, hits: 1, retry: 2 * s, reset: 20 * s},
		{name: "refund takes the newest", at: 10 * s, op: "refund", hits: 1},
		{name: "refunded", at: 10 * s, allowed: true, remain: 1, reset: 14 * s},
		{name: "drain past the limit", at: 11 * s, op: "drain", hits: 5},
		{name: "in debt, even a peek is refused", at: 11 * s, remain: 0, retry: 10 * s, reset: 21 * s},
		{name: "1 fits when 4 have expired", at: 11 * s, hits: 1, remain: 0, retry: 10 * s, reset: 21 * s},
		{name: "all expired", at: 21 * s, hits: 3, allowed: true, remain: 0, reset: 31 * s},
	})
	if got := b.(*slidingLog).log.size; got != 1 {
		t.Errorf("3 hits at one instant take %d entries, want 1", got)
	}
}

func TestSlidingLogMinGap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	b := fwMust(t, Limit{Algorithm: SlidingLog, Limit: 10, Period: time.Minute, MinGap: time.Second}, t0)
	fwRun(t, b, t0, []fwStep{
		{name: "first", hits: 1, allowed: true, remain: 9, reset: time.Minute},
		{name: "too close", at: 500 * ms, hits: 1, remain: 9, retry: 500 * ms, reset: time.Minute},
		{name: "too close, even a peek", at: 999 * ms, remain: 9, retry: ms, reset: time.Minute},
		{name: "gap passed", at: time.Second, hits: 2, allowed: true, remain: 7, reset: time.Minute + time.Second},
		{name: "both: gap and limit", at: 1500 * ms, hits: 8, remain: 7, retry: time.Minute - 1500*ms, reset: time.Minute + time.Second},
	})
	// MinGap longer than the period: the gap outlives the log.
	b = fwMust(t, Limit{Algorithm: SlidingLog, Limit: 10, Period: time.Second, MinGap: 5 * time.Second}, t0)
	fwRun(t, b, t0, []fwStep{
		{name: "first", hits: 1, allowed: true, remain: 9, reset: 5 * time.Second},
		{name: "log empty, gap not passed", at: 2 * time.Second, hits: 1, remain: 10, retry: 3 * time.Second, reset: 5 * time.Second},
	})
	if b.Idle(t0.Add(4*time.Second)) || !b.Idle(t0.Add(5*time.Second)) {
		t.Error("Idle must wait for the gap to pass")
	}
}

// TestSlidingLogCountRejected shows ClassDojo's rule: a client that keeps
// trying stays blocked until it pauses for a Period, and the log keeps at most
// Limit entries.
func TestSlidingLogCountRejected(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	l := Limit{Algorithm: SlidingLog, Limit: 2, Period: 10 * s, CountRejected: true}
	steps := []fwStep{
		{name: "1st", hits: 1, allowed: true, remain: 1, reset: 10 * s},
		{name: "2nd", at: s, hits: 1, allowed: true, remain: 0, reset: 11 * s},
		{name: "3rd rejected, logged", at: 2 * s, hits: 1, remain: 0, retry: 9 * s, reset: 12 * s},
		{name: "hammer", at: 5 * s, hits: 1, remain: 0, retry: 7 * s, reset: 15 * s},
		{name: "hammer again", at: 11 * s, hits: 1, remain: 0, retry: 4 * s, reset: 21 * s},
		{name: "still blocked", at: 14 * s, hits: 1, remain: 0, retry: 7 * s, reset: 24 * s},
		{name: "after a pause of a period", at: 24 * s, hits: 1, allowed: true, remain: 1, reset: 34 * s},
	}
	b := fwMust(t, l, t0)
	fwRun(t, b, t0, steps)
	if got := len(b.(*slidingLog).log.buf); got > 2 {
		t.Errorf("log buffer of %d entries, want at most Limit 2", got)
	}
	// Without CountRejected the hammering client gets in at 10s and 11s.
	l.CountRejected = false
	b = fwMust(t, l, t0)
	fwRun(t, b, t0, []fwStep{
		steps[0], steps[1],
		{name: "3rd rejected, not logged", at: 2 * s, hits: 1, remain: 0, retry: 8 * s, reset: 11 * s},
		{name: "in at 11s", at: 11 * s, hits: 1, allowed: true, remain: 1, reset: 21 * s},
	})
}

func TestSlidingLogLazyAndZeroAlloc(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := fwMust(t, Limit{Algorithm: SlidingLog, Limit: 64, Period: time.Second}, t0).(*slidingLog)
	if b.log.buf != nil {
		t.Fatal("a fresh bucket allocated its log")
	}
	b.Take(t0, 0)
	if b.log.buf != nil {
		t.Fatal("a peek allocated the log")
	}
	b.Take(t0, 3)
	if len(b.log.buf) != 8 {
		t.Fatalf("first entry: buffer of %d, want 8", len(b.log.buf))
	}
	i := 0
	next := func() { i++; b.Take(t0.Add(time.Duration(i)*7*time.Millisecond), 1) }
	for range 1000 {
		next()
	}
	if n := testing.AllocsPerRun(1000, next); n != 0 {
		t.Errorf("steady-state Take: %v allocs, want 0", n)
	}
	if len(b.log.buf) > 64 {
		t.Errorf("buffer of %d entries, want at most Limit 64", len(b.log.buf))
	}
}

func TestSlidingLogReconfigureMergeIdle(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	l := Limit{Algorithm: SlidingLog, Limit: 4, Period: 10 * s}
	b := fwMust(t, l, t0)
	for i := range 4 {
		b.Take(t0.Add(time.Duration(i)*s), 1)
	}
	if b.Idle(t0.Add(12*s)) || !b.Idle(t0.Add(13*s)) {
		t.Error("Idle must wait for the newest entry to expire")
	}
	l2 := l
	l2.Limit = 2
	if err := b.Reconfigure(t0.Add(4*s), l2); err != nil {
		t.Fatal(err)
	}
	// The log is kept, its newest 2 entries (2s, 3s) under the new limit.
	fwRun(t, b, t0, []fwStep{{name: "shrunk", at: 4 * s, hits: 1, remain: 0, retry: 8 * s, reset: 13 * s}})
	if len(b.(*slidingLog).log.buf) > 2 {
		t.Errorf("buffer of %d after shrinking to 2", len(b.(*slidingLog).log.buf))
	}
	l3 := l2
	l3.Period = 5 * s
	b.Reconfigure(t0.Add(4*s), l3)
	fwRun(t, b, t0, []fwStep{{name: "shorter period", at: 7 * s, hits: 1, allowed: true, remain: 0, reset: 12 * s}})

	o := fwMust(t, l3, t0)
	o.Take(t0.Add(6*s), 2) // 6s: 2, and 7s: 1 here
	if err := b.Merge(t0.Add(7*s), o); err != nil {
		t.Fatal(err)
	}
	fwRun(t, b, t0, []fwStep{{name: "union, newest Limit entries", at: 7 * s, remain: 0, reset: 12 * s, retry: 4 * s}})
	self := b.Clone()
	b.Merge(t0.Add(7*s), self)
	self.Take(t0.Add(20*s), 2)
	fwRun(t, b, t0, []fwStep{{name: "merge with itself changes nothing", at: 7 * s, remain: 0, reset: 12 * s, retry: 4 * s}})
	fwRoundTrip(t, b)
}

// slRef is the naive sliding log: every logged hit, unbounded.
type slRef struct {
	l     Limit
	eff   int64
	log   []slEntry
	acted bool
	gapAt int64
}

func (r *slRef) sum(at int64) (n int64) {
	for _, e := range r.log {
		if at-e.t < int64(r.l.Period) {
			n += e.n
		}
	}
	return n
}

func (r *slRef) gap(at int64) bool {
	return r.l.MinGap > 0 && r.acted && at-r.gapAt < int64(r.l.MinGap)
}

func (r *slRef) ok(at, hits int64) bool { return !r.gap(at) && r.sum(at)+hits <= r.l.Limit }

func (r *slRef) record(hits int64) {
	r.log = append(r.log, slEntry{r.eff, hits})
	r.acted, r.gapAt = true, r.eff
}

func (r *slRef) take(now, hits int64) Decision {
	r.eff = max(r.eff, now)
	d := Decision{Limit: r.l.Limit, Allowed: r.ok(r.eff, hits)}
	if hits > 0 && (d.Allowed || r.l.CountRejected) {
		r.record(hits)
	}
	if !d.Allowed {
		// The first instant at which an entry expires or the gap ends that admits it.
		var at []int64
		for _, e := range r.log {
			at = append(at, e.t+int64(r.l.Period))
		}
		at = append(at, r.gapAt+int64(r.l.MinGap))
		slices.Sort(at)
		d.RetryAfter = MaxRetry
		for _, a := range at {
			if a > r.eff && r.ok(a, hits) && hits <= r.l.Limit {
				d.RetryAfter = time.Duration(a - r.eff)
				break
			}
		}
	}
	d.Remaining = max(0, r.l.Limit-r.sum(r.eff))
	reset := r.eff
	for _, e := range r.log {
		if r.eff-e.t < int64(r.l.Period) {
			reset = max(reset, e.t+int64(r.l.Period))
		}
	}
	if r.gap(r.eff) {
		reset = max(reset, r.gapAt+int64(r.l.MinGap))
	}
	d.ResetAt = unix(reset)
	return d
}

// TestSlidingLogProperty plays random sequences against the naive, unbounded
// log: the decisions are the same (the bounded log drops nothing that
// matters), and no rolling window of Period admits more than Limit hits.
func TestSlidingLogProperty(t *testing.T) {
	drops := 0
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		l := Limit{Algorithm: SlidingLog, Limit: 1 + rng.Int64N(6), Period: time.Duration(1 + rng.Int64N(60))}
		if rng.IntN(2) == 0 {
			l.MinGap = time.Duration(rng.Int64N(2 * int64(l.Period)))
		}
		l.CountRejected = rng.IntN(2) == 0
		p := int64(l.Period)
		now := rng.Int64N(1000) - 500
		b := fwMust(t, l, unix(now))
		ref := &slRef{l: l, eff: now}
		var admitted []slEntry
		for i := range 600 {
			now += rng.Int64N(p/2+2) - 1 // sometimes backwards
			hits := rng.Int64N(l.Limit + 2)
			if rng.IntN(12) == 0 {
				b.Drain(unix(now), hits)
				ref.eff = max(ref.eff, now)
				if hits > 0 {
					ref.record(hits)
				}
				continue
			}
			d, _ := b.Take(unix(now), hits)
			want := ref.take(now, hits)
			if d != want {
				t.Fatalf("seed %d %+v step %d: Take(%d, %d)\n got  %+v\n want %+v", seed, l, i, now, hits, d, want)
			}
			if d.Allowed && hits > 0 {
				admitted = append(admitted, slEntry{ref.eff, hits})
				var in int64
				for _, e := range admitted {
					if ref.eff-e.t < p {
						in += e.n
					}
				}
				if in > l.Limit {
					t.Fatalf("seed %d: %d hits admitted in (%d, %d], limit %d", seed, in, ref.eff-p, ref.eff, l.Limit)
				}
			}
			if b.(*slidingLog).dropped {
				drops++
			}
			if n := b.(*slidingLog).log.size; n > int(l.Limit) {
				t.Fatalf("seed %d: %d entries > limit %d", seed, n, l.Limit)
			}
			if i%40 == 0 {
				b = fwRoundTrip(t, b)
			}
		}
	}
	if drops == 0 {
		t.Error("no sequence filled the log: the drop of the oldest entry is untested")
	}
	t.Logf("%d steps with dropped entries in the window", drops)
}

func TestSlidingLogDecodeRejects(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := Limit{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	head := appendLimit(nil, l)
	for _, c := range []struct {
		name string
		body []any // int64 -> varint, uint64 -> uvarint
	}{
		{"flags 4", []any{int64(10), uint64(4)}},
		{"drop after last", []any{int64(10), uint64(2), int64(11), uint64(0)}},
		{"drop expired", []any{int64(2_000_000_000), uint64(2), int64(10), uint64(0)}},
		{"gap after last", []any{int64(10), uint64(1), int64(11), uint64(0)}},
		{"too many entries", []any{int64(10), uint64(1), int64(10), uint64(4), int64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1)}},
		{"zero hits", []any{int64(10), uint64(1), int64(10), uint64(1), int64(10), uint64(0)}},
		{"unsorted", []any{int64(10), uint64(1), int64(10), uint64(2), int64(9), uint64(1), uint64(0), uint64(1)}},
		{"time overflow", []any{int64(math.MaxInt64), uint64(1), int64(math.MaxInt64), uint64(2), int64(math.MaxInt64), uint64(1), uint64(1), uint64(1)}},
		{"entry after gap", []any{int64(10), uint64(1), int64(5), uint64(1), int64(6), uint64(1)}},
		{"expired entry", []any{int64(2_000_000_000), uint64(1), int64(10), uint64(1), int64(10), uint64(1)}},
		{"sum overflow", []any{int64(10), uint64(1), int64(10), uint64(2), int64(9), uint64(math.MaxInt64), uint64(1), uint64(1)}},
		{"entries without log", []any{int64(10), uint64(0), uint64(1), int64(9), uint64(1)}},
	} {
		b := slices.Clone(head)
		for _, v := range c.body {
			switch v := v.(type) {
			case int64:
				b = appendVarint(b, v)
			case uint64:
				b = appendUvarint(b, v)
			}
		}
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: Decode accepted %x", c.name, b)
		}
	}
	_ = t0
}

func FuzzSlidingLog(f *testing.F) {
	fwFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, limit, period, start, dt, hits int64) {
		l := fwFuzzLimit(SlidingLog, limit, period)
		l.Limit = 1 + int64(uint64(limit)%MaxLogLimit)
		l.MinGap = time.Duration(uint64(dt) % uint64(math.MaxInt64))
		l.CountRejected = hits%2 == 0
		fwFuzzBody(t, l, start, dt, hits)
	})
}

func BenchmarkTakeSlidingLog(b *testing.B) {
	for _, c := range []struct {
		name string
		step time.Duration
	}{{"admitted", 10 * time.Millisecond}, {"mixed", 7 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			t0 := time.Unix(1_700_000_000, 0)
			bk := fwMust(b, Limit{Algorithm: SlidingLog, Limit: 100, Period: time.Second}, t0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				bk.Take(t0.Add(time.Duration(i)*c.step), 1)
			}
		})
	}
}
