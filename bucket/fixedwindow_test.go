package bucket

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// fwStep is one step of a table test over a bucket: an operation at base+at
// and, for "take" (the default op), the decision wanted.
type fwStep struct {
	name    string
	at      time.Duration // since the table's base instant
	op      string        // "take" (default), "drain" or "refund"
	hits    int64
	allowed bool
	remain  int64
	retry   time.Duration
	reset   time.Duration // ResetAt, since the base instant
}

// fwRun plays steps on b from base, checking every decision.
func fwRun(t *testing.T, b Bucket, base time.Time, steps []fwStep) {
	t.Helper()
	for _, s := range steps {
		now := base.Add(s.at)
		switch s.op {
		case "drain":
			if err := b.Drain(now, s.hits); err != nil {
				t.Fatalf("%s: Drain: %v", s.name, err)
			}
			continue
		case "refund":
			if err := b.Refund(now, s.hits); err != nil {
				t.Fatalf("%s: Refund: %v", s.name, err)
			}
			continue
		}
		d, err := b.Take(now, s.hits)
		if err != nil {
			t.Fatalf("%s: Take: %v", s.name, err)
		}
		want := Decision{Allowed: s.allowed, Limit: b.Config().Limit, Remaining: s.remain,
			RetryAfter: s.retry, ResetAt: base.Add(s.reset)}
		if !d.ResetAt.Equal(want.ResetAt) || d.Allowed != want.Allowed || d.Remaining != want.Remaining ||
			d.RetryAfter != want.RetryAfter || d.Limit != want.Limit || d.Wait != 0 {
			t.Errorf("%s: Take(+%v, %d)\n got  %+v\n want %+v", s.name, s.at, s.hits, fwShow(d, base), fwShow(want, base))
		}
	}
}

// fwShow prints a decision with its ResetAt relative to base.
func fwShow(d Decision, base time.Time) any {
	return struct {
		Allowed          bool
		Limit, Remaining int64
		RetryAfter       time.Duration
		ResetAfterBase   time.Duration
	}{d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAt.Sub(base)}
}

// fwMust returns a fresh bucket for l at now.
func fwMust(t testing.TB, l Limit, now time.Time) Bucket {
	t.Helper()
	b, err := New(l, now)
	if err != nil {
		t.Fatalf("New(%+v): %v", l, err)
	}
	return b
}

// fwRoundTrip checks that b survives AppendBinary and Decode byte for byte,
// and returns the decoded copy.
func fwRoundTrip(t testing.TB, b Bucket) Bucket {
	t.Helper()
	enc, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary: %v", err)
	}
	d, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode(AppendBinary): %v", err)
	}
	again, _ := d.AppendBinary(nil)
	if !bytes.Equal(enc, again) {
		t.Fatalf("round trip changed the state:\n %x\n %x", enc, again)
	}
	if d.Config() != b.Config() {
		t.Fatalf("round trip changed the limit: %+v, want %+v", d.Config(), b.Config())
	}
	return d
}

// fwCheckDecision checks what holds for every decision of every algorithm here.
func fwCheckDecision(t testing.TB, what string, l Limit, hits int64, d Decision) {
	t.Helper()
	switch {
	case d.Remaining < 0 || d.Remaining > l.Limit:
		t.Fatalf("%s: Remaining %d out of [0, %d]", what, d.Remaining, l.Limit)
	case d.Allowed && (hits > l.Limit || d.RetryAfter != 0):
		t.Fatalf("%s: allowed %d hits of %d with RetryAfter %v", what, hits, l.Limit, d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Fatalf("%s: rejected with RetryAfter %v", what, d.RetryAfter)
	case hits > l.Limit && d.RetryAfter != MaxRetry:
		t.Fatalf("%s: %d hits > %d, RetryAfter %v, want MaxRetry", what, hits, l.Limit, d.RetryAfter)
	case d.Limit != l.Limit || d.Wait != 0:
		t.Fatalf("%s: Limit %d Wait %v", what, d.Limit, d.Wait)
	}
}

// fwCommonErrors checks the errors shared by every algorithm of this file set.
func fwCommonErrors(t *testing.T, l Limit) {
	now := time.Unix(1_700_000_000, 0)
	b := fwMust(t, l, now)
	if _, err := b.Take(now, -1); !errors.Is(err, ErrNegativeHits) {
		t.Errorf("Take(-1) = %v, want ErrNegativeHits", err)
	}
	if err := b.Drain(now, -1); !errors.Is(err, ErrNegativeHits) {
		t.Errorf("Drain(-1) = %v, want ErrNegativeHits", err)
	}
	if err := b.Refund(now, -1); !errors.Is(err, ErrNegativeHits) {
		t.Errorf("Refund(-1) = %v, want ErrNegativeHits", err)
	}
	other := l
	other.Algorithm = TokenBucket
	if err := b.Reconfigure(now, other); !errors.Is(err, ErrMismatch) {
		t.Errorf("Reconfigure(token_bucket) = %v, want ErrMismatch", err)
	}
	bad := l
	bad.Limit = 0
	var le *LimitError
	if err := b.Reconfigure(now, bad); !errors.As(err, &le) || le.Field != "limit" {
		t.Errorf("Reconfigure(limit 0) = %v, want a *LimitError on limit", err)
	}
	if err := b.Merge(now, fwMust(t, Limit{Algorithm: GCRA, Limit: 1, Period: time.Second}, now)); !errors.Is(err, ErrMismatch) {
		t.Errorf("Merge(gcra) = %v, want ErrMismatch", err)
	}
	if err := b.Merge(now, nil); !errors.Is(err, ErrMismatch) {
		t.Errorf("Merge(nil) = %v, want ErrMismatch", err)
	}
	if b.Config() != l {
		t.Errorf("Config after failed calls = %+v, want %+v", b.Config(), l)
	}
}

func TestFixedWindowErrors(t *testing.T) {
	fwCommonErrors(t, Limit{Algorithm: FixedWindow, Limit: 3, Period: time.Second})
}

func TestFixedWindowSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // a multiple of 10s: a window starts here
	b := fwMust(t, Limit{Algorithm: FixedWindow, Limit: 3, Period: 10 * time.Second}, t0.Add(time.Second))
	fwRun(t, b, t0, []fwStep{
		{name: "fresh peek", at: time.Second, allowed: true, remain: 3, reset: 10 * time.Second},
		{name: "take 2", at: 2 * time.Second, hits: 2, allowed: true, remain: 1, reset: 10 * time.Second},
		{name: "2 more do not fit", at: 3 * time.Second, hits: 2, remain: 1, retry: 7 * time.Second, reset: 10 * time.Second},
		{name: "more than the limit never fits", at: 3 * time.Second, hits: 4, remain: 1, retry: MaxRetry, reset: 10 * time.Second},
		{name: "last one fits", at: 9 * time.Second, hits: 1, allowed: true, remain: 0, reset: 10 * time.Second},
		{name: "window full", at: 10*time.Second - 1, hits: 1, retry: 1, reset: 10 * time.Second},
		{name: "clock back is no time elapsed", at: 5 * time.Second, hits: 1, retry: 1, reset: 10 * time.Second},
		{name: "new window", at: 10 * time.Second, hits: 3, allowed: true, remain: 0, reset: 20 * time.Second},
		{name: "clock back to the old window", at: 9 * time.Second, hits: 1, retry: 10 * time.Second, reset: 20 * time.Second},
		{name: "refund", at: 11 * time.Second, op: "refund", hits: 5},
		{name: "refund never goes past fresh", at: 11 * time.Second, allowed: true, remain: 3, reset: 20 * time.Second},
		{name: "drain past the limit", at: 12 * time.Second, op: "drain", hits: 7},
		{name: "in debt, even a peek is refused", at: 12 * time.Second, remain: 0, retry: 8 * time.Second, reset: 20 * time.Second},
		{name: "debt forgiven with the window", at: 25 * time.Second, hits: 1, allowed: true, remain: 2, reset: 30 * time.Second},
		{name: "windows skipped", at: time.Hour, hits: 3, allowed: true, remain: 0, reset: time.Hour + 10*time.Second},
	})
}

// TestFixedWindowEdgeBurst shows the weakness of the algorithm: 2*Limit hits
// admitted within 2ns, Limit at the end of a window and Limit at the start of
// the next.
func TestFixedWindowEdgeBurst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := Limit{Algorithm: FixedWindow, Limit: 100, Period: time.Minute}
	edge := t0.Add(-20 * time.Second) // 1_699_999_980 is a minute boundary
	b := fwMust(t, l, edge.Add(-time.Second))
	fwRun(t, b, edge, []fwStep{
		{name: "limit at the last ns", at: -1, hits: 100, allowed: true, remain: 0},
		{name: "window full", at: -1, hits: 1, retry: 1},
		{name: "limit at the first ns of the next", at: 0, hits: 100, allowed: true, remain: 0, reset: time.Minute},
	})
}

func TestFixedWindowArithmetic(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	for _, c := range []struct{ t, p, k, off, end int64 }{
		{0, 10, 0, 0, 10},
		{9, 10, 0, 9, 10},
		{10, 10, 1, 0, 20},
		{-1, 10, -1, 9, 0},
		{-10, 10, -1, 0, 0},
		{-11, 10, -2, 9, -10},
		{minI, 1, minI, 0, minI + 1},
		{maxI, 1, maxI, 0, maxI}, // the end saturates
		{minI, maxI, -2, maxI - 1, minI + 1},
		{-1, maxI, -1, maxI - 1, 0},
		{maxI, maxI, 1, 0, maxI},
		{maxI - 1, maxI, 0, maxI - 1, maxI},
		{1_700_000_000_000_000_000, maxI, 0, 1_700_000_000_000_000_000, maxI},
	} {
		if k, off, end := fwIndex(c.t, c.p), fwOffset(c.t, c.p), fwEnd(c.t, c.p); k != c.k || off != c.off || end != c.end {
			t.Errorf("t=%d p=%d: index %d offset %d end %d, want %d %d %d", c.t, c.p, k, off, end, c.k, c.off, c.end)
		}
	}
	for _, c := range []struct{ a, num, den, want int64 }{
		{0, 5, 3, 0}, {3, 5, 3, 5}, {1, 1, 3, 1}, {4, 1, 3, 2}, {maxI, maxI, 1, maxI},
		{maxI, MaxLimit, MaxLimit, maxI}, {10, MaxLimit, 1, maxI}, {MaxLimit, 1, MaxLimit, 1},
	} {
		if got := fwScaleCeil(c.a, c.num, c.den); got != c.want {
			t.Errorf("fwScaleCeil(%d, %d, %d) = %d, want %d", c.a, c.num, c.den, got, c.want)
		}
	}
}

func TestFixedWindowReconfigureMergeIdle(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := Limit{Algorithm: FixedWindow, Limit: 10, Period: 10 * time.Second}
	b := fwMust(t, l, t0)
	if !b.Idle(t0) {
		t.Fatal("fresh bucket not idle")
	}
	b.Take(t0, 3)
	if b.Idle(t0.Add(9 * time.Second)) {
		t.Fatal("idle with 3 hits in the window")
	}
	if !b.Idle(t0.Add(10 * time.Second)) {
		t.Fatal("not idle in the next window")
	}
	l2 := l
	l2.Limit = 5
	if err := b.Reconfigure(t0.Add(time.Second), l2); err != nil {
		t.Fatal(err)
	}
	// 3 of 10 scale to ceil(1.5) = 2 of 5: nothing resets.
	fwRun(t, b, t0, []fwStep{{name: "scaled down", at: time.Second, allowed: true, remain: 3, reset: 10 * time.Second}})

	other := fwMust(t, l2, t0)
	other.Take(t0, 4)
	stale := fwMust(t, l2, t0.Add(-time.Minute))
	stale.Take(t0.Add(-time.Minute), 5) // an old window: forgotten
	for _, o := range []Bucket{other, stale, b.Clone()} {
		if err := b.Merge(t0.Add(2*time.Second), o); err != nil {
			t.Fatal(err)
		}
	}
	fwRun(t, b, t0, []fwStep{{name: "merged: most consumed", at: 2 * time.Second, allowed: true, remain: 1, reset: 10 * time.Second}})
	c := b.Clone()
	c.Take(t0.Add(2*time.Second), 1)
	fwRun(t, b, t0, []fwStep{{name: "clone is independent", at: 2 * time.Second, allowed: true, remain: 1, reset: 10 * time.Second}})
	d := fwRoundTrip(t, b)
	fwRun(t, d, t0, []fwStep{{name: "decoded", at: 3 * time.Second, hits: 1, allowed: true, remain: 0, reset: 10 * time.Second}})
}

func TestFixedWindowExtremes(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Limit
		now  time.Time
	}{
		{"1ns period", Limit{Algorithm: FixedWindow, Limit: MaxLimit, Period: 1}, time.Unix(1_700_000_000, 0)},
		{"max period", Limit{Algorithm: FixedWindow, Limit: MaxLimit, Period: MaxPeriod}, time.Unix(1_700_000_000, 0)},
		{"max period before 1970", Limit{Algorithm: FixedWindow, Limit: 1, Period: MaxPeriod}, time.Unix(-9_000_000_000, 0)},
	} {
		b := fwMust(t, c.l, c.now)
		for i, hits := range []int64{0, 1, MaxLimit, math.MaxInt64, 1} {
			d, _ := b.Take(c.now, hits)
			fwCheckDecision(t, c.name, c.l, hits, d)
			if i == 1 && !d.Allowed {
				t.Errorf("%s: first hit refused: %+v", c.name, d)
			}
		}
		b.Drain(c.now, math.MaxInt64)
		b.Drain(c.now, math.MaxInt64)
		d, _ := b.Take(c.now, 1)
		fwCheckDecision(t, c.name+" drained", c.l, 1, d)
		fwRoundTrip(t, b)
	}
}

// TestFixedWindowProperty plays random sequences against a naive reference
// that keeps a count per window, and checks that no aligned window admits more
// than Limit.
func TestFixedWindowProperty(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 4))
		l := Limit{Algorithm: FixedWindow, Limit: 1 + rng.Int64N(8), Period: time.Duration(1 + rng.Int64N(50))}
		p := int64(l.Period)
		now := rng.Int64N(1000) - 500
		b := fwMust(t, l, unix(now))
		counts := map[int64]int64{} // naive: count per window index
		admitted := map[int64]int64{}
		eff := now
		for i := range 500 {
			now += rng.Int64N(2*p) - p/4 // sometimes backwards
			eff = max(eff, now)
			k := fwIndex(eff, p)
			hits := rng.Int64N(l.Limit + 2)
			if rng.IntN(10) == 0 {
				b.Drain(unix(now), hits)
				counts[k] += hits
				continue
			}
			d, _ := b.Take(unix(now), hits)
			end := (k + 1) * p
			want := Decision{Allowed: counts[k]+hits <= l.Limit, Limit: l.Limit, ResetAt: unix(end)}
			switch {
			case want.Allowed:
				counts[k] += hits
				admitted[k] += hits
			case hits > l.Limit:
				want.RetryAfter = MaxRetry
			default:
				want.RetryAfter = time.Duration(end - eff)
			}
			want.Remaining = max(0, l.Limit-counts[k])
			if d != want {
				t.Fatalf("seed %d step %d: Take(%d, %d) = %+v, want %+v", seed, i, now, hits, d, want)
			}
			if admitted[k] > l.Limit {
				t.Fatalf("seed %d: window %d admitted %d > %d", seed, k, admitted[k], l.Limit)
			}
			if i%50 == 0 {
				b = fwRoundTrip(t, b)
			}
		}
	}
}

// fwFuzzBody drives a bucket of l through every call with extreme values and
// checks the invariants shared by all algorithms.
func fwFuzzBody(t *testing.T, l Limit, start, dt, hits int64) {
	if l.Validate() != nil {
		return
	}
	b, err := New(l, unix(start))
	if err != nil {
		t.Fatal(err)
	}
	now := start
	for i, h := range []int64{hits, 0, 1, hits / 2, math.MaxInt64, l.Limit, hits} {
		d, err := b.Take(unix(now), h)
		if (err != nil) != (h < 0) {
			t.Fatalf("Take(%d) error %v", h, err)
		}
		if err == nil {
			fwCheckDecision(t, "take", l, h, d)
		}
		switch i {
		case 1:
			b.Drain(unix(now), hits)
		case 2:
			b.Refund(unix(now), hits)
		case 3:
			c := b.Clone()
			c.Drain(unix(now), l.Limit)
			if err := b.Merge(unix(now), c); err != nil {
				t.Fatal(err)
			}
		case 4:
			l2 := l
			l2.Limit = max(1, l.Limit/2)
			l2.Period = max(1, l.Period/3)
			if err := b.Reconfigure(unix(now), l2); err != nil {
				t.Fatal(err)
			}
			l = l2
		}
		b.Idle(unix(now))
		b = fwRoundTrip(t, b)
		now = addSat(now, dt)
		if i == 4 {
			now = start // and back
		}
	}
}

// fwFuzzLimit builds a limit of algorithm a from fuzzed numbers.
func fwFuzzLimit(a Algorithm, limit, period int64) Limit {
	return Limit{Algorithm: a, Limit: 1 + int64(uint64(limit)%MaxLimit), Period: time.Duration(1 + uint64(period)%math.MaxInt64)}
}

func fwFuzzSeeds(f *testing.F) {
	f.Add(int64(3), int64(time.Second), int64(1_700_000_000_000_000_000), int64(time.Millisecond), int64(2))
	f.Add(int64(MaxLimit-1), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(0), int64(0), int64(math.MinInt64), int64(1), int64(-1))
	f.Add(int64(6), int64(59), int64(-7), int64(-3), int64(7))
}

func FuzzFixedWindow(f *testing.F) {
	fwFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, limit, period, start, dt, hits int64) {
		fwFuzzBody(t, fwFuzzLimit(FixedWindow, limit, period), start, dt, hits)
	})
}

func BenchmarkTakeFixedWindow(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	bk := fwMust(b, Limit{Algorithm: FixedWindow, Limit: 1000, Period: time.Second}, t0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.Take(t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
}

// TestFixedWindowCountRejected plays Lyft's counting: after a request of 60
// hits on 50 per second, every later request of that window is rejected,
// with nothing remaining; the next window starts afresh.
func TestFixedWindowCountRejected(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	l := Limit{Algorithm: FixedWindow, Limit: 50, Period: time.Second, CountRejected: true}
	b, err := New(l, base)
	if err != nil {
		t.Fatal(err)
	}
	fwRun(t, b, base, []fwStep{
		{name: "30 fit", hits: 30, allowed: true, remain: 20, reset: time.Second},
		{name: "60 more: over, and counted", at: 100 * time.Millisecond, hits: 60, retry: MaxRetry, reset: time.Second},
		{name: "1 more: still over", at: 200 * time.Millisecond, hits: 1, retry: 800 * time.Millisecond, reset: time.Second},
		{name: "a peek: over too", at: 300 * time.Millisecond, hits: 0, retry: 700 * time.Millisecond, reset: time.Second},
		{name: "next window", at: time.Second, hits: 50, allowed: true, remain: 0, reset: 2 * time.Second},
		{name: "51st: over", at: 1100 * time.Millisecond, hits: 1, retry: 900 * time.Millisecond, reset: 2 * time.Second},
	})
	// Without CountRejected the rejected 60 do not count: the next request
	// that fits is admitted.
	l.CountRejected = false
	b, _ = New(l, base)
	fwRun(t, b, base, []fwStep{
		{name: "30 fit", hits: 30, allowed: true, remain: 20, reset: time.Second},
		{name: "60 more: over, not counted", at: 100 * time.Millisecond, hits: 60, remain: 20, retry: MaxRetry, reset: time.Second},
		{name: "1 more: fits", at: 200 * time.Millisecond, hits: 1, allowed: true, remain: 19, reset: time.Second},
	})
}

// TestFixedWindowCountRejectedModel compares FixedWindow with CountRejected
// to a naive model of Lyft's counting (a counter per window index, every
// hit added, a request admitted when its window's counter stays within the
// limit) over seeded random sequences, times going forward and back.
func TestFixedWindowCountRejectedModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 0))
	base := time.Unix(1_700_000_000, 0)
	for seq := range 500 {
		limit := 1 + rng.Int64N(20)
		period := time.Duration(1+rng.Int64N(5)) * time.Second
		b, err := New(Limit{Algorithm: FixedWindow, Limit: limit, Period: period, CountRejected: true}, base)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[int64]int64{} // the model: hits per window index
		latest := base
		at := base
		for step := range 60 {
			at = at.Add(time.Duration(rng.Int64N(int64(period))) - period/4) // sometimes back in time
			hits := rng.Int64N(limit + 3)
			d, err := b.Take(at, hits)
			if err != nil {
				t.Fatal(err)
			}
			eff := at // the bucket never goes back: it decides at the latest time seen
			if eff.Before(latest) {
				eff = latest
			}
			latest = eff
			w := fwIndex(eff.UnixNano(), int64(period))
			counts[w] += hits
			want := counts[w] <= limit
			remain := max(0, limit-counts[w])
			if d.Allowed != want || d.Remaining != remain {
				t.Fatalf("sequence %d step %d (limit %d per %v, %d hits at +%v): allowed %v remaining %d, model %v %d",
					seq, step, limit, period, hits, at.Sub(base), d.Allowed, d.Remaining, want, remain)
			}
		}
	}
}
