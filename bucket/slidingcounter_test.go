package bucket

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSlidingCounterErrors(t *testing.T) {
	fwCommonErrors(t, Limit{Algorithm: SlidingCounter, Limit: 3, Period: time.Second})
}

// TestSlidingCounterWorkedExample is the textbook case: 7 per minute, 5 hits
// in the previous minute and 3 in this one; 30% into this minute the estimate
// is 3 + 5*0.7 = 6.5, rounded down to 6, so one more hit is allowed.
func TestSlidingCounterWorkedExample(t *testing.T) {
	m := time.Unix(1_699_999_980, 0) // a minute boundary
	s := time.Second
	b := fwMust(t, Limit{Algorithm: SlidingCounter, Limit: 7, Period: time.Minute}, m.Add(-time.Minute))
	fwRun(t, b, m, []fwStep{
		{name: "5 in the previous minute", at: -50 * s, hits: 5, allowed: true, remain: 2, reset: time.Minute},
		{name: "3 in this one: 3 + floor(5*50/60) = 7", at: 10 * s, hits: 3, allowed: true, remain: 0, reset: 2 * time.Minute},
		{name: "30% in: 3 + floor(5*0.7) = 6", at: 18 * s, remain: 1, allowed: true, reset: 2 * time.Minute},
		{name: "the request at 30% is allowed", at: 18 * s, hits: 1, allowed: true, remain: 0, reset: 2 * time.Minute},
		{name: "the next waits until floor(5*w) <= 2: w < 36/60", at: 18 * s, hits: 1, remain: 0, retry: 6*s + 1, reset: 2 * time.Minute},
		{name: "at 24s: 4 + floor(5*36/60) = 7", at: 24 * s, hits: 1, remain: 0, retry: 1, reset: 2 * time.Minute},
		{name: "at 24s+1ns: 4 + 2 = 6", at: 24*s + 1, hits: 1, allowed: true, remain: 0, reset: 2 * time.Minute},
		{name: "next minute: floor(5*59/60) = 4", at: time.Minute + s, hits: 3, allowed: true, remain: 0, reset: 3 * time.Minute},
		{name: "clock back is no time elapsed: at 1m1s, 3 + floor(5*w) <= 6 when w < 48/60", at: 10 * s, hits: 1,
			remain: 0, retry: 11*s + 1, reset: 3 * time.Minute},
		{name: "more than the limit never fits", at: time.Minute + s, hits: 8, remain: 0, retry: MaxRetry, reset: 3 * time.Minute},
		{name: "refund: current count first", at: time.Minute + s, op: "refund", hits: 4},
		{name: "refunded 3 of now, 1 of before: floor(4*59/60) = 3", at: time.Minute + s, allowed: true, remain: 4, reset: 2 * time.Minute},
		{name: "drain past the limit", at: time.Minute + 2*s, op: "drain", hits: 20},
		{name: "debt: wait for the next window, then floor(20*w) <= 6: w < 7/20", at: time.Minute + 2*s, hits: 1,
			remain: 0, retry: 58*s + 39*s + 1, reset: 3 * time.Minute},
		{name: "then", at: 2*time.Minute + 39*s + 1, hits: 1, allowed: true, remain: 0, reset: 4 * time.Minute},
		{name: "two windows later all is forgotten", at: 4 * time.Minute, hits: 7, allowed: true, remain: 0, reset: 6 * time.Minute},
	})
}

// TestSlidingCounterRollingBound reaches the rolling-window bound: Limit in
// the last nanosecond of a window, then Limit - floor(2*Limit/P) two
// nanoseconds before the next window ends, inside one rolling window of P.
func TestSlidingCounterRollingBound(t *testing.T) {
	for _, c := range []struct{ limit, period, second int64 }{
		{7, 100, 7},   // 2*Limit: the weight 2/100 rounds 7*2/100 down to 0
		{60, 100, 59}, // 2*Limit - floor(120/100)
		{5, 2, 0},     // 2ns windows: (t-2, t] = {t-1, t}, and prev weighs fully at offset 0
	} {
		base := unix(1_700_000_000_000_000_000) // a multiple of 100 and 2
		b := fwMust(t, Limit{Algorithm: SlidingCounter, Limit: c.limit, Period: time.Duration(c.period)}, base)
		first := c.period - 1          // last ns of window 0
		second := first + c.period - 1 // offset P-2 of window 1, less than P after first
		d1, _ := b.Take(base.Add(time.Duration(first)), c.limit)
		d2, _ := b.Take(base.Add(time.Duration(second)), c.second)
		d3, _ := b.Take(base.Add(time.Duration(second)), 1)
		bound := c.limit + (c.limit*(c.period-2)+c.period-1)/c.period
		if !d1.Allowed || !d2.Allowed || d3.Allowed || c.limit+c.second != bound {
			t.Errorf("limit %d period %d: %v %v %v, %d+%d hits in a rolling window, bound %d",
				c.limit, c.period, d1.Allowed, d2.Allowed, d3.Allowed, c.limit, c.second, bound)
		}
	}
}

func TestSlidingCounterOffset(t *testing.T) {
	const maxI = math.MaxInt64
	for _, c := range []struct{ prev, a, p, want int64 }{
		{5, 2, 60, 25}, // 5*(60-25)/60 = 2.9
		{5, 5, 60, 0},  // prev itself fits
		{5, 4, 60, 1},  // 5*59/60 = 4.9
		{5, 0, 60, 49}, // 5*11/60 = 0.9
		{1, 0, 1, 1},   // 1ns windows: only the next window
		{maxI, 0, maxI, maxI},
		{MaxLimit, MaxLimit - 1, maxI, 1},
	} {
		got := scOffset(c.prev, c.a, c.p)
		w := func(x int64) int64 { return mulDiv(c.prev, c.p-x, c.p) }
		if got != c.want || (got < c.p && w(got) > c.a) || (got > 0 && w(got-1) <= c.a) {
			t.Errorf("scOffset(%d, %d, %d) = %d, want %d", c.prev, c.a, c.p, got, c.want)
		}
	}
}

func TestSlidingCounterReconfigureMergeIdle(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // a multiple of 10s
	s := time.Second
	l := Limit{Algorithm: SlidingCounter, Limit: 10, Period: 10 * s}
	b := fwMust(t, l, t0)
	b.Take(t0, 4)
	b.Take(t0.Add(10*s), 3)
	if b.Idle(t0.Add(19*s)) || !b.Idle(t0.Add(30*s)) {
		t.Error("Idle must wait until both windows are forgotten")
	}
	l2 := l
	l2.Limit = 5
	if err := b.Reconfigure(t0.Add(10*s), l2); err != nil {
		t.Fatal(err)
	}
	// 4 and 3 of 10 scale to 2 and 2 of 5: at 15s, 2 + floor(2*0.5) = 3.
	fwRun(t, b, t0, []fwStep{{name: "scaled", at: 15 * s, allowed: true, remain: 2, reset: 30 * s}})

	o := fwMust(t, l2, t0)
	o.Take(t0.Add(5*s), 5)  // previous window: 5 > 2
	o.Take(t0.Add(15*s), 0) // current: 0 < 2
	if err := b.Merge(t0.Add(15*s), o); err != nil {
		t.Fatal(err)
	}
	// 2 + floor(5*0.5) = 4.
	fwRun(t, b, t0, []fwStep{{name: "merged: the higher of each", at: 15 * s, allowed: true, remain: 1, reset: 30 * s}})
	b.Merge(t0.Add(15*s), b.Clone())
	fwRun(t, b, t0, []fwStep{{name: "merge with itself changes nothing", at: 15 * s, allowed: true, remain: 1, reset: 30 * s}})
	fwRoundTrip(t, b)
	if n := testing.AllocsPerRun(100, func() { b.Take(t0.Add(16*s), 1) }); n != 0 {
		t.Errorf("Take: %v allocs, want 0", n)
	}
}

// TestSlidingCounterProperty plays random sequences against a naive reference
// that keeps the count of every window and finds RetryAfter by trying every
// nanosecond; and checks both bounds: Limit per aligned window, and
// Limit + ceil(Limit*(P-2)/P) per rolling window of P.
func TestSlidingCounterProperty(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 6))
		l := Limit{Algorithm: SlidingCounter, Limit: 1 + rng.Int64N(10), Period: time.Duration(1 + rng.Int64N(40))}
		p := int64(l.Period)
		bound := l.Limit
		if p >= 2 {
			bound += (l.Limit*(p-2) + p - 1) / p
		}
		now := rng.Int64N(1000) - 500
		b := fwMust(t, l, unix(now))
		counts := map[int64]int64{} // per window, drains included
		perWindow := map[int64]int64{}
		var admitted []slEntry
		est := func(at int64) int64 {
			k := fwIndex(at, p)
			return counts[k] + counts[k-1]*(p-fwOffset(at, p))/p
		}
		eff := now
		for i := range 800 {
			now += rng.Int64N(p/3+2) - 1 // sometimes backwards
			eff = max(eff, now)
			k := fwIndex(eff, p)
			hits := rng.Int64N(l.Limit + 2)
			if rng.IntN(15) == 0 {
				b.Drain(unix(now), hits)
				counts[k] += hits
				continue
			}
			d, _ := b.Take(unix(now), hits)
			want := Decision{Limit: l.Limit, Allowed: est(eff)+hits <= l.Limit}
			switch {
			case want.Allowed:
				counts[k] += hits
				perWindow[k] += hits
				admitted = append(admitted, slEntry{eff, hits})
			case hits > l.Limit:
				want.RetryAfter = MaxRetry
			default:
				for at := eff + 1; ; at++ {
					if est(at)+hits <= l.Limit {
						want.RetryAfter = time.Duration(at - eff)
						break
					}
				}
			}
			want.Remaining = max(0, l.Limit-est(eff))
			switch {
			case counts[k] > 0:
				want.ResetAt = unix((k + 2) * p)
			case counts[k-1] > 0:
				want.ResetAt = unix((k + 1) * p)
			default:
				want.ResetAt = unix(eff)
			}
			if d != want {
				t.Fatalf("seed %d %+v step %d: Take(%d, %d)\n got  %+v\n want %+v", seed, l, i, now, hits, d, want)
			}
			if perWindow[k] > l.Limit {
				t.Fatalf("seed %d: window %d admitted %d > %d", seed, k, perWindow[k], l.Limit)
			}
			if d.Allowed {
				var in int64
				for _, e := range admitted {
					if eff-e.t < p {
						in += e.n
					}
				}
				if in > bound {
					t.Fatalf("seed %d: %d hits admitted in (%d, %d], bound %d", seed, in, eff-p, eff, bound)
				}
			}
			if i%50 == 0 {
				b = fwRoundTrip(t, b)
			}
		}
	}
}

func TestSlidingCounterExtremes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, l := range []Limit{
		{Algorithm: SlidingCounter, Limit: MaxLimit, Period: 1},
		{Algorithm: SlidingCounter, Limit: MaxLimit, Period: MaxPeriod},
		{Algorithm: SlidingCounter, Limit: 1, Period: MaxPeriod},
	} {
		b := fwMust(t, l, now)
		for _, hits := range []int64{MaxLimit, 1, 0, math.MaxInt64} {
			d, _ := b.Take(now, hits)
			fwCheckDecision(t, "extreme", l, hits, d)
		}
		b.Drain(now, math.MaxInt64)
		b.Drain(now, math.MaxInt64)
		for _, at := range []time.Duration{0, 1, MaxPeriod / 2} {
			d, _ := b.Take(now.Add(at), 1)
			fwCheckDecision(t, "drained", l, 1, d)
		}
		fwRoundTrip(t, b)
	}
}

func FuzzSlidingCounter(f *testing.F) {
	fwFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, limit, period, start, dt, hits int64) {
		fwFuzzBody(t, fwFuzzLimit(SlidingCounter, limit, period), start, dt, hits)
	})
}

func BenchmarkTakeSlidingCounter(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	bk := fwMust(b, Limit{Algorithm: SlidingCounter, Limit: 1000, Period: time.Second}, t0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.Take(t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
}
