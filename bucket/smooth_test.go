package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// Helpers are prefixed with smooth: other algorithms' tests share the package.

var smoothT0 = time.Unix(1_700_000_000, 0)

// smoothUs is t in Unix microseconds, a smooth limiter's clock.
func smoothUs(t time.Time) int64 { return nsToMicros(nanos(t)) }

const smoothMs = time.Millisecond

// smoothAcquireLimit is Guava's create(perSecond) (or create(perSecond, warmUp)
// when warmUp > 0) used through acquire: MaxWait is unbounded.
func smoothAcquireLimit(perSecond int64, warmUp time.Duration) Limit {
	l := Limit{Algorithm: SmoothBursty, Limit: perSecond, Period: time.Second, MaxWait: MaxPeriod}
	if warmUp > 0 {
		l.Algorithm, l.WarmUp = SmoothWarmingUp, warmUp
	}
	return l
}

// smoothGuavaSeconds formats a wait as Guava's FakeStopwatch does
// (String.format("%3.2f"), which rounds half up).
func smoothGuavaSeconds(d time.Duration) string {
	cs := (int64(d) + 5_000_000) / 10_000_000
	return fmt.Sprintf("%d.%02d", cs/100, cs%100)
}

// smoothStep is one line of a replay of Guava's RateLimiterTest: an acquire of
// hits at the explicit instant at (since t0; Guava's acquire sleeps its wait,
// so the instants add up the waits; checked to Guava's microsecond) whose wait
// Guava records as want ("R1.38"), a user sleep, or a setRate to rate per
// second.
type smoothStep struct {
	at    time.Duration
	hits  int64
	want  string
	sleep time.Duration
	rate  int64
}

func smoothAcq(at time.Duration, hits int64, want string) smoothStep {
	return smoothStep{at: at, hits: hits, want: want}
}
func smoothSleep(d time.Duration) smoothStep                { return smoothStep{sleep: d} }
func smoothSetRate(at time.Duration, rate int64) smoothStep { return smoothStep{at: at, rate: rate} }

// smoothGuavaCases are Guava's RateLimiterTest scenarios; want strings are
// Guava's assertEvents, in order.
var smoothGuavaCases = []struct {
	name       string
	l          Limit
	coldFactor float64
	steps      []smoothStep
}{
	{"testSimple", smoothAcquireLimit(5, 0), 3, []smoothStep{
		smoothAcq(0, 1, "R0.00"), smoothAcq(0, 1, "R0.20"), smoothAcq(200*smoothMs, 1, "R0.20")}},
	{"testSimpleWithWait/testSimpleAcquireReturnValues", smoothAcquireLimit(5, 0), 3, []smoothStep{
		smoothAcq(0, 1, "R0.00"), smoothSleep(200 * smoothMs),
		smoothAcq(200*smoothMs, 1, "R0.00"), smoothAcq(200*smoothMs, 1, "R0.20")}},
	{"testSimpleAcquireEarliestAvailableIsInPast", smoothAcquireLimit(5, 0), 3, []smoothStep{
		smoothAcq(0, 1, "R0.00"), smoothSleep(400 * smoothMs), smoothAcq(400*smoothMs, 1, "R0.00"),
		smoothAcq(400*smoothMs, 1, "R0.00"), smoothAcq(400*smoothMs, 1, "R0.20")}},
	{"testOneSecondBurst", smoothAcquireLimit(5, 0), 3, []smoothStep{
		smoothSleep(time.Second), smoothSleep(time.Second), smoothAcq(2*time.Second, 1, "R0.00"),
		smoothAcq(2*time.Second, 1, "R0.00"), smoothAcq(2*time.Second, 3, "R0.00"),
		smoothAcq(2*time.Second, 1, "R0.00"), smoothAcq(2*time.Second, 1, "R0.20")}},
	{"testSimpleWeights", smoothAcquireLimit(1, 0), 3, []smoothStep{
		smoothAcq(0, 1, "R0.00"), smoothAcq(0, 1, "R1.00"), smoothAcq(1*time.Second, 2, "R1.00"),
		smoothAcq(2*time.Second, 4, "R2.00"), smoothAcq(4*time.Second, 8, "R4.00"),
		smoothAcq(8*time.Second, 1, "R8.00")}},
	{"testBurstyAndUpdate", smoothAcquireLimit(1, 0), 3, []smoothStep{
		smoothAcq(0, 1, "R0.00"), smoothAcq(0, 1, "R1.00"), smoothSetRate(time.Second, 2),
		smoothAcq(time.Second, 1, "R1.00"), smoothAcq(2*time.Second, 2, "R0.50"),
		smoothAcq(2500*smoothMs, 4, "R1.00"), smoothAcq(3500*smoothMs, 1, "R2.00")}},
	{"testWarmUp", smoothAcquireLimit(2, 4*time.Second), 3, smoothConcat(
		smoothWarmUpCycle(0),
		[]smoothStep{smoothSleep(500 * smoothMs), smoothSleep(4 * time.Second)},
		smoothWarmUpCycle(10*time.Second),
		[]smoothStep{smoothSleep(500 * smoothMs), smoothSleep(2 * time.Second)},
		smoothSteady(18*time.Second, 500*smoothMs, "R0.50", 8))},
	{"testWarmUpWithColdFactor", smoothAcquireLimit(5, 4*time.Second), 10, smoothConcat(
		smoothColdFactor10Cycle(0),
		[]smoothStep{smoothSleep(200 * smoothMs), smoothSleep(4 * time.Second)},
		smoothColdFactor10Cycle(8872727*time.Microsecond),
		[]smoothStep{smoothSleep(200 * smoothMs), smoothSleep(time.Second)},
		smoothSteady(14745454*time.Microsecond, 200*smoothMs, "R0.20", 8))},
	{"testWarmUpWithColdFactor1", smoothAcquireLimit(5, 4*time.Second), 1, smoothConcat(
		smoothSteady(0, 200*smoothMs, "R0.20", 8), []smoothStep{smoothSleep(340 * smoothMs)},
		smoothSteady(1740*smoothMs, 200*smoothMs, "R0.20", 8))},
	{"testWarmUpAndUpdate", smoothAcquireLimit(2, 4*time.Second), 3, smoothConcat(
		smoothWarmUpCycle(0), []smoothStep{smoothSleep(4500 * smoothMs)},
		smoothWarmUpCycle(10 * time.Second)[:3],
		[]smoothStep{
			smoothSetRate(12500*smoothMs, 4), smoothAcq(12500*smoothMs, 1, "R0.88"), // the old rate's debt
			smoothAcq(13375*smoothMs, 1, "R0.34"), smoothAcq(13718750*time.Microsecond, 1, "R0.28"),
			smoothAcq(14000*smoothMs, 1, "R0.25"), smoothAcq(14250*smoothMs, 1, "R0.25"),
			smoothSleep(4250 * smoothMs),
			smoothAcq(18750*smoothMs, 1, "R0.00"), smoothAcq(18750*smoothMs, 1, "R0.72"),
			smoothAcq(19468750*time.Microsecond, 1, "R0.66"), smoothAcq(20125*smoothMs, 1, "R0.59"),
			smoothAcq(20718750*time.Microsecond, 1, "R0.53"), smoothAcq(21250*smoothMs, 1, "R0.47"),
			smoothAcq(21718750*time.Microsecond, 1, "R0.41"), smoothAcq(22125*smoothMs, 1, "R0.34"),
			smoothAcq(22468750*time.Microsecond, 1, "R0.28"), smoothAcq(22750*smoothMs, 1, "R0.25"),
			smoothAcq(23000*smoothMs, 1, "R0.25")})},
	{"testWarmUpAndUpdateWithColdFactor", smoothAcquireLimit(5, 4*time.Second), 10, smoothConcat(
		smoothColdFactor10Cycle(0), []smoothStep{smoothSleep(4200 * smoothMs)},
		smoothColdFactor10Cycle(8872727 * time.Microsecond)[:3],
		[]smoothStep{
			smoothSetRate(11882727*time.Microsecond, 10), smoothAcq(11882727*time.Microsecond, 1, "R0.76"),
			smoothAcq(12645227*time.Microsecond, 1, "R0.20"), smoothAcq(12840852*time.Microsecond, 1, "R0.10"),
			smoothAcq(12945454*time.Microsecond, 1, "R0.10"), smoothAcq(13045454*time.Microsecond, 1, "R0.10"),
			smoothSleep(4100 * smoothMs),
			smoothAcq(17245454*time.Microsecond, 1, "R0.00"), smoothAcq(17245454*time.Microsecond, 1, "R0.94"),
			smoothAcq(18183579*time.Microsecond, 1, "R0.81"), smoothAcq(18997954*time.Microsecond, 1, "R0.69"),
			smoothAcq(19688579*time.Microsecond, 1, "R0.57"), smoothAcq(20255454*time.Microsecond, 1, "R0.44"),
			smoothAcq(20698579*time.Microsecond, 1, "R0.32"), smoothAcq(21017954*time.Microsecond, 1, "R0.20"),
			smoothAcq(21213579*time.Microsecond, 1, "R0.10"), smoothAcq(21318181*time.Microsecond, 1, "R0.10"),
			smoothAcq(21418181*time.Microsecond, 1, "R0.10")})},
}

func smoothConcat(parts ...[]smoothStep) []smoothStep {
	var all []smoothStep
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// smoothWarmUpCycle is 8 acquires from cold at 2 per second with a 4s warm-up
// ("R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50"), starting at at.
func smoothWarmUpCycle(at time.Duration) []smoothStep {
	offsets := []time.Duration{0, 0, 1375, 2500, 3375, 4000, 4500, 5000}
	waits := []string{"R0.00", "R1.38", "R1.13", "R0.88", "R0.63", "R0.50", "R0.50", "R0.50"}
	steps := make([]smoothStep, len(offsets))
	for i := range offsets {
		steps[i] = smoothAcq(at+offsets[i]*smoothMs, 1, waits[i])
	}
	return steps
}

// smoothColdFactor10Cycle is 8 acquires from cold at 5 per second, 4s warm-up,
// cold factor 10 ("R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20").
func smoothColdFactor10Cycle(at time.Duration) []smoothStep {
	offsets := []time.Duration{0, 0, 1752500, 3010000, 3772500, 4072727, 4272727, 4472727}
	waits := []string{"R0.00", "R1.75", "R1.26", "R0.76", "R0.30", "R0.20", "R0.20", "R0.20"}
	steps := make([]smoothStep, len(offsets))
	for i := range offsets {
		steps[i] = smoothAcq(at+offsets[i]*time.Microsecond, 1, waits[i])
	}
	return steps
}

// smoothSteady is n acquires at the stable interval: "R0.00" then want.
func smoothSteady(at, interval time.Duration, want string, n int) []smoothStep {
	steps := []smoothStep{smoothAcq(at, 1, "R0.00")}
	for i := 1; i < n; i++ {
		steps = append(steps, smoothAcq(at+time.Duration(i-1)*interval, 1, want))
	}
	return steps
}

func TestSmoothGuavaRateLimiterTest(t *testing.T) {
	for _, tc := range smoothGuavaCases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			if l.Algorithm == SmoothWarmingUp {
				l.ColdFactorMilli = uint16(tc.coldFactor * 1000)
			}
			s := newSmooth(l, smoothUs(smoothT0))
			var clock time.Duration // Guava's FakeStopwatch
			for i, st := range tc.steps {
				switch {
				case st.sleep > 0:
					clock += st.sleep
					continue
				case clock != st.at:
					t.Fatalf("step %d: the table says %v but the clock is at %v", i, st.at, clock)
				case st.rate > 0:
					l := s.Config()
					l.Limit = st.rate
					if err := s.Reconfigure(smoothT0.Add(clock), l); err != nil {
						t.Fatalf("step %d: setRate(%d): %v", i, st.rate, err)
					}
					continue
				}
				d, err := s.Take(smoothT0.Add(clock), st.hits)
				if err != nil || !d.Allowed {
					t.Fatalf("step %d: acquire(%d) at %v: %+v, %v", i, st.hits, clock, d, err)
				}
				if got := "R" + smoothGuavaSeconds(d.Wait); got != st.want {
					t.Errorf("step %d: acquire(%d) at %v: got %s (%v), want %s", i, st.hits, clock, got, d.Wait, st.want)
				}
				clock += d.Wait
			}
		})
	}
}

// TestSmoothGuavaTryAcquire replays Guava's tryAcquire tests; tryAcquire
// sleeps the wait it accepts, which the explicit instants include.
func TestSmoothGuavaTryAcquire(t *testing.T) {
	type step struct {
		at      time.Duration
		hits    int64
		timeout time.Duration
		want    bool
	}
	perSecond := func(n int64) Limit { return Limit{Algorithm: SmoothBursty, Limit: n, Period: time.Second} }
	tests := []struct {
		name  string
		l     Limit
		steps []step
	}{
		{"testImmediateTryAcquire", perSecond(1), []step{{0, 1, 0, true}, {0, 1, 0, false}}},
		// Double.MIN_VALUE permits per second: the slowest rate, 1 per MaxPeriod.
		{"testDoubleMinValueCanAcquireExactlyOnce", Limit{Algorithm: SmoothBursty, Limit: 1, Period: MaxPeriod},
			[]step{{0, 1, 0, true}, {0, 1, 0, false}, {math.MaxInt32 * smoothMs, 1, 0, false}}},
		{"testTryAcquire_noWaitAllowed", perSecond(5),
			[]step{{0, 1, 0, true}, {0, 1, 0, false}, {0, 1, 0, false}, {100 * smoothMs, 1, 0, false}}},
		{"testTryAcquire_someWaitAllowed", perSecond(5), []step{{0, 1, 0, true},
			{0, 1, 200 * smoothMs, true}, {200 * smoothMs, 1, 100 * smoothMs, false}, {300 * smoothMs, 1, 100 * smoothMs, true}}},
		{"testTryAcquire_overflow", perSecond(5), []step{{0, 1, 0, true}, {100 * smoothMs, 1, MaxPeriod, true}}},
		{"testTryAcquire_negative", perSecond(5),
			[]step{{0, 5, 0, true}, {900 * smoothMs, 1, 0, false}, {time.Second, 1, 0, true}}},
	}
	for _, tc := range tests {
		s := newSmooth(tc.l, smoothUs(smoothT0))
		for i, st := range tc.steps {
			d := s.tryAcquire(smoothUs(smoothT0.Add(st.at)), st.hits, int64(st.timeout/time.Microsecond))
			if d.Allowed != st.want {
				t.Errorf("%s step %d: tryAcquire(%d, %v) at %v: got %v, want %v", tc.name, i, st.hits, st.timeout, st.at, d.Allowed, st.want)
			}
		}
	}
}

// smoothMeasure is Guava's measureTotalTimeMillis: acquire permits in random
// chunks, then one more to repay the debt; the time it all took.
func smoothMeasure(s *smoothLimiter, clock *time.Duration, permits int64, rng *rand.Rand) time.Duration {
	start := *clock
	for permits > 0 {
		n := max(1, rng.Int64N(permits))
		permits -= n
		d, _ := s.Take(smoothT0.Add(*clock), n)
		*clock += d.Wait
	}
	d, _ := s.Take(smoothT0.Add(*clock), 1)
	*clock += d.Wait
	return (*clock - start).Truncate(smoothMs)
}

func TestSmoothGuavaTimeToWarmUpIsHonouredEvenWithWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const warmupPermits = 10
	for trial := 0; trial < 100; trial++ {
		for _, coldFactor := range []float64{2, 3, 10} {
			// qps 4, 2, 1, 0.5 and 0.1 as Limit per Period.
			for _, q := range []struct{ n, secs int64 }{{4, 1}, {2, 1}, {1, 1}, {1, 2}, {1, 10}} {
				qps := float64(q.n) / float64(q.secs)
				warmup := time.Duration((1+coldFactor)*warmupPermits/(2.0*qps)*1000.0) * smoothMs
				l := Limit{Algorithm: SmoothWarmingUp, Limit: q.n, Period: time.Duration(q.secs) * time.Second, MaxWait: MaxPeriod, WarmUp: warmup, ColdFactorMilli: uint16(coldFactor * 1000)}
				s := newSmooth(l, smoothUs(smoothT0))
				var clock time.Duration
				if got := smoothMeasure(s, &clock, warmupPermits, rng); got != warmup {
					t.Fatalf("trial %d cold factor %v qps %v: took %v, want %v", trial, coldFactor, qps, got, warmup)
				}
			}
		}
	}
}

func TestSmoothGuavaWeNeverGetABurstMoreThanOneSec(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newSmooth(smoothAcquireLimit(1, 0), smoothUs(smoothT0))
	var clock time.Duration
	for _, rate := range []int64{1000, 1, 10, 1000000, 10, 1} {
		clock += time.Duration(rate) * time.Second
		if err := s.Reconfigure(smoothT0.Add(clock), smoothAcquireLimit(rate, 0)); err != nil {
			t.Fatal(err)
		}
		if burst := smoothMeasure(s, &clock, rate, rng); burst > time.Second {
			t.Errorf("rate %d: a second's worth took %v, want at most 1s", rate, burst)
		}
		if after := smoothMeasure(s, &clock, rate, rng); after < time.Second {
			t.Errorf("rate %d: a second's worth after the burst took %v, want at least 1s", rate, after)
		}
	}
}

// TestSmoothDecisions steps through the fields of Decision over explicit
// instants, hits == 0 peeking.
func TestSmoothDecisions(t *testing.T) {
	bursty := Limit{Algorithm: SmoothBursty, Limit: 10, Period: time.Second} // 100ms apart, 10 stored
	warming := Limit{Algorithm: SmoothWarmingUp, Limit: 2, Period: time.Second, WarmUp: 4 * time.Second, MaxWait: time.Second}
	type step struct {
		name  string
		at    time.Duration
		hits  int64
		want  Decision // ResetAt as an offset from t0, in nanoseconds
		reset time.Duration
	}
	tests := []struct {
		l     Limit
		steps []step
	}{
		{bursty, []step{
			{"fresh peek", 0, 0, Decision{Allowed: true, Limit: 10}, time.Second},
			{"first is free", 0, 1, Decision{Allowed: true, Limit: 10}, 1100 * smoothMs},
			{"second must not wait", 0, 1, Decision{Limit: 10, RetryAfter: 100 * smoothMs}, 1100 * smoothMs},
			{"ticket reached", 100 * smoothMs, 1, Decision{Allowed: true, Limit: 10}, 1200 * smoothMs},
			{"a second idle stores 10", 1200 * smoothMs, 0, Decision{Allowed: true, Limit: 10, Remaining: 10}, 1200 * smoothMs},
			{"25 > capacity admitted", 1200 * smoothMs, 25, Decision{Allowed: true, Limit: 10}, 3700 * smoothMs},
			{"next pays 15 intervals", 1300 * smoothMs, 1, Decision{Limit: 10, RetryAfter: 1400 * smoothMs}, 3700 * smoothMs},
			{"clock back: no time elapsed", 1250 * smoothMs, 1, Decision{Limit: 10, RetryAfter: 1400 * smoothMs}, 3700 * smoothMs},
			{"debt paid", 2700 * smoothMs, 1, Decision{Allowed: true, Limit: 10}, 3800 * smoothMs},
			{"3 stored, 2 taken", 3100 * smoothMs, 2, Decision{Allowed: true, Limit: 10, Remaining: 1}, 4000 * smoothMs},
		}},
		{warming, []step{ // 500ms stable, 1.5s cold, threshold 4, max 8, cool-down 500ms
			{"cold peek", 0, 0, Decision{Allowed: true, Limit: 8, Remaining: 8}, 0},
			{"first is free", 0, 1, Decision{Allowed: true, Limit: 8}, 1875 * smoothMs},
			{"1.375s > MaxWait", 0, 1, Decision{Limit: 8, RetryAfter: 375 * smoothMs}, 1875 * smoothMs},
			{"within MaxWait", 375 * smoothMs, 1, Decision{Allowed: true, Limit: 8, Wait: time.Second}, 3500 * smoothMs},
			{"peek reports the wait", 2 * time.Second, 0, Decision{Allowed: true, Limit: 8, Wait: 500 * smoothMs}, 3500 * smoothMs},
			{"cold again", 3500 * smoothMs, 0, Decision{Allowed: true, Limit: 8, Remaining: 8}, 3500 * smoothMs},
		}},
	}
	for _, tc := range tests {
		b, err := New(tc.l, smoothT0)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range tc.steps {
			st.want.ResetAt = smoothT0.Add(st.reset)
			got, err := b.Take(smoothT0.Add(st.at), st.hits)
			if err != nil || got != st.want {
				t.Errorf("%v %q: Take(t0+%v, %d):\n got %+v, %v\nwant %+v", tc.l.Algorithm, st.name, st.at, st.hits, got, err, st.want)
			}
		}
	}
}

func TestSmoothDrainRefundReconfigure(t *testing.T) {
	l := Limit{Algorithm: SmoothBursty, Limit: 10, Period: time.Second}
	b, _ := New(l, smoothT0)
	at := func(d time.Duration) time.Time { return smoothT0.Add(d) }
	// Drained hits count past the limit: 30 at t0 is a 3s debt.
	if err := b.Drain(at(0), 30); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Take(at(time.Second), 1); d.Allowed || d.RetryAfter != 2*time.Second {
		t.Errorf("after Drain(30): got %+v, want rejected for 2s", d)
	}
	// Refunding 15 pulls the ticket back 1.5s; 10 more clear the debt (5)
	// and store the 5 left over.
	_ = b.Refund(at(time.Second), 15)
	if d, _ := b.Take(at(time.Second), 0); d.RetryAfter != 500*smoothMs {
		t.Errorf("after Refund(15): got %+v, want RetryAfter 500ms", d)
	}
	_ = b.Refund(at(time.Second), 10)
	if d, _ := b.Take(at(time.Second), 0); !d.Allowed || d.Remaining != 5 {
		t.Errorf("after Refund(10): got %+v, want 5 stored", d)
	}
	// Refund never stores more than maxPermits.
	_ = b.Refund(at(time.Second), 1000)
	if d, _ := b.Take(at(time.Second), 0); d.Remaining != 10 {
		t.Errorf("after Refund(1000): got %+v, want 10 stored", d)
	}
	// Reconfigure to 40/s: stored permits scale from 10 of 10 to 40 of 40.
	l.Limit = 40
	if err := b.Reconfigure(at(time.Second), l); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Take(at(time.Second), 0); d.Remaining != 40 || d.Limit != 40 {
		t.Errorf("after Reconfigure(40/s): got %+v, want 40 of 40", d)
	}
	// Errors.
	var le *LimitError
	if err := b.Reconfigure(at(time.Second), Limit{Algorithm: SmoothBursty, Limit: 0, Period: time.Second}); !errors.As(err, &le) {
		t.Errorf("Reconfigure(invalid) = %v, want a *LimitError", err)
	}
	if err := b.Reconfigure(at(time.Second), Limit{Algorithm: SmoothWarmingUp, Limit: 1, Period: time.Second, WarmUp: time.Second}); !errors.Is(err, ErrMismatch) {
		t.Errorf("Reconfigure(other algorithm) = %v, want ErrMismatch", err)
	}
	_, errTake := b.Take(at(time.Second), -1)
	for i, err := range []error{errTake, b.Drain(at(time.Second), -1), b.Refund(at(time.Second), -1)} {
		if !errors.Is(err, ErrNegativeHits) {
			t.Errorf("negative hits, call %d: got %v, want ErrNegativeHits", i, err)
		}
	}
}

func TestSmoothMergeIdleClone(t *testing.T) {
	l := Limit{Algorithm: SmoothWarmingUp, Limit: 2, Period: time.Second, WarmUp: 4 * time.Second, MaxWait: MaxPeriod}
	a, _ := New(l, smoothT0)
	if !a.Idle(smoothT0) {
		t.Error("fresh SmoothWarmingUp: not idle")
	}
	b := a.Clone()
	_, _ = a.Take(smoothT0, 1) // stored 7, ticket at 1.375s
	_, _ = b.Take(smoothT0, 3) // stored 5, ticket at 3.375s
	if a.Idle(smoothT0) || !b.Clone().Idle(smoothT0.Add(time.Hour)) {
		t.Error("Idle: want false right after a Take, true once cold again")
	}
	if err := a.Merge(smoothT0, b); err != nil {
		t.Fatal(err)
	}
	if ab, bb := smoothEncode(a), smoothEncode(b); ab != bb {
		t.Errorf("merged state differs from the more consumed one")
	}
	if d, _ := a.Take(smoothT0.Add(time.Second), 0); d.Wait != 2375*smoothMs {
		t.Errorf("merged: got %+v, want the later ticket (wait 2.375s)", d)
	}
	if err := a.Merge(smoothT0, newSmooth(Limit{Algorithm: SmoothBursty, Limit: 1, Period: time.Second}, 0)); !errors.Is(err, ErrMismatch) {
		t.Errorf("Merge(other algorithm) = %v, want ErrMismatch", err)
	}
	// A fresh SmoothBursty stores nothing: once it has saved permits it is
	// not idle (it would admit a burst a fresh one would not).
	c, _ := New(Limit{Algorithm: SmoothBursty, Limit: 1, Period: time.Second}, smoothT0)
	if !c.Idle(smoothT0) || c.Idle(smoothT0.Add(time.Microsecond)) || c.Idle(smoothT0.Add(time.Hour)) {
		t.Error("SmoothBursty Idle: want true only while nothing is stored")
	}
}

func smoothEncode(b Bucket) string {
	enc, _ := b.AppendBinary(nil)
	return string(enc)
}

func TestSmoothEncoding(t *testing.T) {
	l := Limit{Algorithm: SmoothWarmingUp, Limit: 7, Period: 3 * time.Second, Burst: 0, MaxWait: time.Second, WarmUp: time.Minute}
	b, _ := New(l, smoothT0)
	_ = b.Drain(smoothT0.Add(time.Second), 3)
	enc, _ := b.AppendBinary(nil)
	got, err := Decode(enc)
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("Decode(AppendBinary()) = %+v, %v; want %+v", got, err, b)
	}
	s := b.(*smoothLimiter)
	corrupt := func(next, last int64, stored float64) []byte {
		e := appendLimit(nil, l)
		e = appendVarint(appendVarint(e, microsToNs(next)), microsToNs(last))
		return appendFloat(e, stored)
	}
	for name, e := range map[string][]byte{
		"stored above max": corrupt(s.next, s.last, s.maxPermits*2),
		"stored negative":  corrupt(s.next, s.last, -1),
		"stored NaN":       corrupt(s.next, s.last, math.NaN()),
		"ticket before":    corrupt(s.last-1, s.last, 0),
		"truncated":        enc[:len(enc)-1],
	} {
		if _, err := Decode(e); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Decode = %v, want ErrCorrupt", name, err)
		}
	}
}

// smoothCheck checks the invariants of a state and, unless nil, a decision.
func smoothCheck(t *testing.T, s *smoothLimiter, d *Decision) {
	t.Helper()
	if !(s.stored >= 0 && s.stored <= s.maxPermits*smoothStoredSlack) || s.next < s.last || s.next > maxMicros || s.last < minMicros {
		t.Fatalf("broken state %+v", s)
	}
	if d == nil {
		return
	}
	if d.Remaining < 0 || d.Remaining > d.Limit || d.Wait < 0 || d.RetryAfter < 0 ||
		(d.Allowed && d.RetryAfter != 0) || (!d.Allowed && (d.Wait != 0 || d.RetryAfter == 0)) {
		t.Fatalf("bad decision %+v", d)
	}
}

// TestSmoothExtremes: 1ns and MaxPeriod periods, the largest limits and hits,
// instants at both ends of the int64 range.
func TestSmoothExtremes(t *testing.T) {
	for _, alg := range []Algorithm{SmoothBursty, SmoothWarmingUp} {
		for _, l := range []Limit{
			{Limit: MaxLimit, Period: 1, Burst: MaxLimit, WarmUp: MaxPeriod, MaxWait: MaxPeriod},
			{Limit: MaxLimit, Period: 1, WarmUp: time.Microsecond},
			{Limit: 1, Period: MaxPeriod, WarmUp: time.Microsecond},
			{Limit: 1, Period: MaxPeriod, WarmUp: MaxPeriod, ColdFactorMilli: math.MaxUint16},
			{Limit: MaxLimit, Period: 1, WarmUp: time.Microsecond, ColdFactorMilli: 1000},
			{Limit: 1, Period: MaxPeriod, Burst: MaxLimit, WarmUp: MaxPeriod, MaxWait: MaxPeriod},
		} {
			l.Algorithm = alg
			for _, start := range []int64{math.MinInt64, 0, math.MaxInt64} {
				if l.Validate() != nil {
					l.ColdFactorMilli = 0 // cold_factor is smooth_warming_up's
				}
				if err := l.Validate(); err != nil {
					t.Fatal(err)
				}
				s := newSmooth(l, nsToMicros(start))
				for _, now := range []int64{start, math.MaxInt64, math.MinInt64, 0} {
					for _, hits := range []int64{0, 1, math.MaxInt64} {
						d, err := s.Take(unix(now), hits)
						if err != nil {
							t.Fatal(err)
						}
						smoothCheck(t, s, &d)
						_ = s.Drain(unix(now), hits)
						_ = s.Refund(unix(now), hits/2)
						smoothCheck(t, s, nil)
					}
				}
			}
		}
	}
}

// TestSmoothBoundProperty checks, on random traffic, the bound of the type
// comment over every window [a, T]: admitted <= (T-a+MaxWait)/stable + last
// hits + (SmoothBursty) stored at a, plus the truncation of waits and of the
// clock to whole microseconds (at most 3µs per request).
func TestSmoothBoundProperty(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := Limit{Algorithm: SmoothBursty, Limit: 1 + rng.Int64N(1000), Period: smoothMs + time.Duration(rng.Int64N(int64(10*time.Second))),
			Burst: rng.Int64N(50), MaxWait: time.Duration(rng.Int64N(int64(time.Second)))}
		if seed%2 == 1 {
			l.Algorithm, l.Burst, l.WarmUp = SmoothWarmingUp, 0, time.Microsecond+time.Duration(rng.Int64N(int64(5*time.Second)))
		}
		s := newSmooth(l, smoothUs(smoothT0))
		type event struct {
			at     int64
			stored float64
			hits   int64 // admitted
		}
		var log []event
		now, lastHits := nanos(smoothT0), int64(0)
		for i := 0; i < 300; i++ {
			now += rng.Int64N(int64(l.Period) / l.Limit * 3)
			c := *s
			c.resync(nsToMicros(now))
			hits := 1 + rng.Int64N(5)
			d, _ := s.Take(unix(now), hits)
			smoothCheck(t, s, &d)
			if !d.Allowed {
				hits = 0
			} else {
				lastHits = hits
			}
			log = append(log, event{now, c.stored, hits})
			sum := 0.0
			for j := len(log) - 1; j >= 0; j-- {
				sum += float64(log[j].hits)
				n := float64(len(log) - j)
				bound := (float64(now-log[j].at)/1e3+float64(l.MaxWait)/1e3+3*n)/s.stable + float64(lastHits)
				if l.Algorithm == SmoothBursty {
					bound += log[j].stored
				}
				if sum > bound*(1+1e-9)+1e-6 {
					t.Fatalf("seed %d %+v: %v admitted in [%d, %d], bound %v", seed, l, sum, log[j].at, now, bound)
				}
			}
		}
	}
}

// TestSmoothBurstyMatchesTokenBucket: with unit hits at multiples of the
// stable interval and MaxWait k intervals, SmoothBursty is a naive token
// bucket of capacity maxPermits+1 that may go k tokens into debt, starting
// with 1 token; its Wait is the debt's length.
func TestSmoothBurstyMatchesTokenBucket(t *testing.T) {
	const interval = 10 * smoothMs
	for seed := uint64(0); seed < 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		burst, k := rng.Int64N(8), rng.Int64N(4)
		l := Limit{Algorithm: SmoothBursty, Limit: 100, Period: time.Second, Burst: burst, MaxWait: time.Duration(k) * interval}
		if burst == 0 {
			burst = 100 // one second's worth
		}
		b, _ := New(l, smoothT0)
		tokens, tick := int64(1), int64(0)
		for i := 0; i < 500; i++ {
			step := rng.Int64N(3)
			tick += step
			tokens = min(tokens+step, burst+1)
			wantAllowed := tokens+k >= 1
			wantWait := time.Duration(max(0, 1-tokens)) * interval
			if !wantAllowed {
				wantWait = 0
			}
			d, _ := b.Take(smoothT0.Add(time.Duration(tick)*interval), 1)
			if d.Allowed != wantAllowed || d.Wait != wantWait {
				t.Fatalf("seed %d step %d: got %+v, want allowed %v wait %v (tokens %d)", seed, i, d, wantAllowed, wantWait, tokens)
			}
			if wantAllowed {
				tokens--
			}
		}
	}
}

func TestSmoothZeroAllocs(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: SmoothBursty, Limit: 100, Period: time.Second},
		{Algorithm: SmoothWarmingUp, Limit: 100, Period: time.Second, WarmUp: time.Second},
	} {
		b, _ := New(l, smoothT0)
		now := smoothT0
		if n := testing.AllocsPerRun(100, func() {
			now = now.Add(time.Millisecond)
			_, _ = b.Take(now, 1)
			_ = b.Drain(now, 1)
			_ = b.Refund(now, 1)
		}); n != 0 {
			t.Errorf("%v: %v allocations per Take+Drain+Refund, want 0", l.Algorithm, n)
		}
	}
}

func FuzzSmooth(f *testing.F) {
	f.Add(false, int64(5), int64(time.Second), int64(0), int64(0), int64(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(true, int64(MaxLimit), int64(1), int64(MaxLimit), int64(MaxPeriod), int64(MaxPeriod), []byte{255, 255, 255, 255, 255, 255, 255, 255, 127})
	f.Add(true, int64(1), int64(MaxPeriod), int64(0), int64(0), int64(1), []byte{1, 0, 0, 0, 0, 0, 0, 0, 128, 2, 255})
	f.Fuzz(func(t *testing.T, warm bool, limit, period, burst, maxWait, warmUp int64, script []byte) {
		pos := func(v, hi int64) int64 { return 1 + int64(uint64(v)%uint64(hi)) }
		l := Limit{Algorithm: SmoothBursty, Limit: pos(limit, MaxLimit), Period: time.Duration(pos(period, math.MaxInt64)),
			Burst: pos(burst, MaxLimit+1) - 1, MaxWait: time.Duration(pos(maxWait, math.MaxInt64) - 1)}
		if warm {
			l.Algorithm, l.WarmUp = SmoothWarmingUp, time.Duration(max(pos(warmUp, math.MaxInt64), 1000))
			l.ColdFactorMilli = uint16(1000 + uint64(burst)%(math.MaxUint16-999))
		} else if burst%3 == 0 {
			l.Burst, l.MaxBurstMillis = 0, uint32(1+uint64(burst)%math.MaxUint32)
		}
		if l.Validate() != nil {
			return // a Guava option out of range for this rate
		}
		s := newSmooth(l, smoothUs(smoothT0))
		now := nanos(smoothT0)
		for ; len(script) >= 9; script = script[9:] {
			v := int64(uint64(script[1]) | uint64(script[2])<<8 | uint64(script[3])<<16 | uint64(script[4])<<24 |
				uint64(script[5])<<32 | uint64(script[6])<<40 | uint64(script[7])<<48 | uint64(script[8])<<56)
			now = addSat(now, v>>(script[0]&63)) // any step, backwards too
			hits := (v & math.MaxInt64) >> (script[0] >> 2 & 63)
			var d *Decision
			switch script[0] % 6 {
			case 0, 1:
				c := *s
				c.resync(later(nsToMicros(now), s.last))
				got, _ := s.Take(unix(now), hits)
				d = &got
				if d.Allowed && c.next > addSat(s.last, int64(l.MaxWait/time.Microsecond)) {
					t.Fatalf("admitted with the ticket at %d beyond now %d + MaxWait", c.next, s.last)
				}
			case 2:
				_ = s.Drain(unix(now), hits)
			case 3:
				_ = s.Refund(unix(now), hits)
			case 4:
				m := l
				m.Limit = pos(hits, MaxLimit)
				_ = s.Reconfigure(unix(now), m)
			case 5:
				o := s.Clone()
				_ = o.Drain(unix(now), hits)
				_ = s.Merge(unix(now), o)
			}
			smoothCheck(t, s, d)
			enc, _ := s.AppendBinary(nil)
			if got, err := Decode(enc); err != nil || !reflect.DeepEqual(got, Bucket(s)) {
				t.Fatalf("round trip: %+v, %v; want %+v", got, err, s)
			}
		}
	})
}

func benchmarkSmoothTake(b *testing.B, l Limit) {
	bk, _ := New(l, smoothT0)
	now := smoothT0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		_, _ = bk.Take(now, 1)
	}
}

func BenchmarkTakeSmoothBursty(b *testing.B) {
	benchmarkSmoothTake(b, Limit{Algorithm: SmoothBursty, Limit: 1000, Period: time.Second, MaxWait: time.Second})
}

func BenchmarkTakeSmoothWarmingUp(b *testing.B) {
	benchmarkSmoothTake(b, Limit{Algorithm: SmoothWarmingUp, Limit: 1000, Period: time.Second, WarmUp: time.Second, MaxWait: time.Second})
}

// TestSmoothGuavaQuantum: the smallest case where the nanosecond limiter of
// earlier releases disagreed with Guava (issue 17). Guava's create(3) has a
// stable interval of 333333.33µs and truncates the first acquire's cost to
// 333333µs, so tryAcquire(1, 333333µs) right after is admitted.
func TestSmoothGuavaQuantum(t *testing.T) {
	l := Limit{Algorithm: SmoothBursty, Limit: 3, Period: time.Second, MaxWait: MaxPeriod}
	b, _ := New(l, smoothT0)
	if d, _ := b.Take(smoothT0, 1); !d.Allowed || d.Wait != 0 {
		t.Fatalf("acquire(): got %+v, want admitted at once", d)
	}
	l.MaxWait = 333333 * time.Microsecond
	if err := b.Reconfigure(smoothT0, l); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Take(smoothT0, 1); !d.Allowed || d.Wait != 333333*time.Microsecond {
		t.Errorf("tryAcquire(1, 333333µs): got %+v, want admitted with a 333333µs wait", d)
	}
	// The clock is read in whole microseconds: 999ns later is the same
	// instant, 1µs later a microsecond less to wait.
	l.MaxWait = MaxPeriod
	if err := b.Reconfigure(smoothT0, l); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Take(smoothT0.Add(999), 0); d.Wait != 666666*time.Microsecond {
		t.Errorf("peek 999ns later: got wait %v, want 666666µs", d.Wait)
	}
	if d, _ := b.Take(smoothT0.Add(time.Microsecond), 0); d.Wait != 666665*time.Microsecond {
		t.Errorf("peek 1µs later: got wait %v, want 666665µs", d.Wait)
	}
}

// TestSmoothGuavaDefaults: zero MaxBurstSeconds and ColdFactor are Guava's
// create(rate) and create(rate, warmup): the same states as 1 and 3 spelled
// out, through a burst, a rate change and a warm-up.
func TestSmoothGuavaDefaults(t *testing.T) {
	for _, pair := range [][2]Limit{
		{{Algorithm: SmoothBursty, Limit: 7, Period: 2 * time.Second, MaxWait: time.Second},
			{Algorithm: SmoothBursty, Limit: 7, Period: 2 * time.Second, MaxWait: time.Second, MaxBurstMillis: 1000}},
		{{Algorithm: SmoothWarmingUp, Limit: 7, Period: 2 * time.Second, WarmUp: 3 * time.Second, MaxWait: time.Second},
			{Algorithm: SmoothWarmingUp, Limit: 7, Period: 2 * time.Second, WarmUp: 3 * time.Second, MaxWait: time.Second, ColdFactorMilli: 3000}},
	} {
		a, b := newSmooth(pair[0], smoothUs(smoothT0)), newSmooth(pair[1], smoothUs(smoothT0))
		for i, at := range []time.Duration{0, 0, 10 * smoothMs, 5 * time.Second, 5 * time.Second, 5100 * smoothMs} {
			if i == 4 {
				pair[0].Limit, pair[1].Limit = 11, 11
				_ = a.Reconfigure(smoothT0.Add(at), pair[0])
				_ = b.Reconfigure(smoothT0.Add(at), pair[1])
			}
			da, _ := a.Take(smoothT0.Add(at), int64(1+i%3))
			db, _ := b.Take(smoothT0.Add(at), int64(1+i%3))
			if da != db || a.stored != b.stored || a.next != b.next {
				t.Fatalf("%v step %d: default %+v / %+v, explicit %+v / %+v", pair[0].Algorithm, i, da, a, db, b)
			}
		}
	}
	// maxBurstSeconds 2.5 at 2 per second stores 5 permits.
	b, _ := New(Limit{Algorithm: SmoothBursty, Limit: 2, Period: time.Second, MaxBurstMillis: 2500}, smoothT0)
	if d, _ := b.Take(smoothT0.Add(time.Hour), 0); d.Remaining != 5 || d.Limit != 5 {
		t.Errorf("maxBurstSeconds 2.5 at 2/s after idling: got %+v, want 5 of 5 stored", d)
	}
}

// TestSmoothMaxWaitIsPerCall: a limit that differs in MaxWait only is a new
// tryAcquire timeout, not a setRate: the state is untouched (a setRate to
// the same rate would rescale the stored permits, x*max/max, which need not
// be x).
func TestSmoothMaxWaitIsPerCall(t *testing.T) {
	l := Limit{Algorithm: SmoothWarmingUp, Limit: 3, Period: time.Second, WarmUp: 7 * time.Second}
	b, _ := New(l, smoothT0)
	_, _ = b.Take(smoothT0.Add(time.Second), 2)
	before := *b.(*smoothLimiter)
	l.MaxWait = time.Minute
	if err := b.Reconfigure(smoothT0.Add(time.Hour), l); err != nil {
		t.Fatal(err)
	}
	after := *b.(*smoothLimiter)
	before.l, before.last = l, after.last
	if after != before {
		t.Errorf("Reconfigure(MaxWait only):\n got %+v\nwant %+v", after, before)
	}
}

// TestSmoothDecodesNanosecondStates: states written by the nanosecond
// limiter of earlier releases (same layout, instants not whole microseconds)
// decode to the microsecond they were in.
func TestSmoothDecodesNanosecondStates(t *testing.T) {
	l := Limit{Algorithm: SmoothBursty, Limit: 3, Period: time.Second}
	e := appendLimit(nil, l)
	e = appendVarint(appendVarint(e, nanos(smoothT0)+333_333_333), nanos(smoothT0)+1_999)
	e = appendFloat(e, 0.5)
	b, err := Decode(e)
	if err != nil {
		t.Fatal(err)
	}
	s := b.(*smoothLimiter)
	if want := smoothUs(smoothT0); s.next != want+333_333 || s.last != want+1 || s.stored != 0.5 {
		t.Errorf("got next %d last %d stored %v, want %d, %d, 0.5", s.next, s.last, s.stored, want+333_333, want+1)
	}
}

// TestSmoothStoredAboveMax: Guava's setRate rescales storedPermits without
// clamping (stored*max/oldMax may round an ulp above max), and the state
// keeps it until the next resync, as Guava's does. Found by FuzzSmooth: the
// Decision still reports at most Limit remaining, and the state encodes.
func TestSmoothStoredAboveMax(t *testing.T) {
	l := Limit{Algorithm: SmoothBursty, Limit: 1e17, Period: time.Second, MaxBurstMillis: 1300} // an ulp is 16 permits
	s := newSmooth(l, smoothUs(smoothT0))
	s.stored = math.Nextafter(s.maxPermits, math.Inf(1))
	d := s.tryAcquire(s.last, 0, 0)
	if d.Remaining > d.Limit {
		t.Errorf("Remaining %d > Limit %d", d.Remaining, d.Limit)
	}
	enc, _ := s.AppendBinary(nil)
	if got, err := Decode(enc); err != nil || !reflect.DeepEqual(got, Bucket(s)) {
		t.Errorf("Decode(AppendBinary()) = %+v, %v; want %+v", got, err, s)
	}
}

// TestSmoothMaxWaitOnlyLeavesTheClock: a Reconfigure that changes MaxWait
// only reads no clock, so a ticket in the past stays decodable (found by
// FuzzSmooth: recording the instant without resyncing left the ticket
// before the latest instant, which Decode rejects).
func TestSmoothMaxWaitOnlyLeavesTheClock(t *testing.T) {
	l := Limit{Algorithm: SmoothBursty, Limit: 10, Period: time.Second}
	b, _ := New(l, smoothT0)
	l.MaxWait = time.Second
	if err := b.Reconfigure(smoothT0.Add(time.Hour), l); err != nil {
		t.Fatal(err)
	}
	enc, _ := b.AppendBinary(nil)
	if _, err := Decode(enc); err != nil {
		t.Fatalf("Decode after a MaxWait-only Reconfigure: %v", err)
	}
	if d, _ := b.Take(smoothT0.Add(time.Hour), 0); d.Remaining != 10 {
		t.Errorf("an hour later: got %+v, want 10 stored", d)
	}
}

// TestSmoothBurstySlowDefault pins what docs/api.md and algorithms.md say of
// smooth_bursty's default burst: one second's worth (Guava's
// maxBurstSeconds = 1), so at 6 a minute it stores at most 0.1 permit and
// answers limit 0, while still admitting one request every 10s; burst 6
// makes it store up to 6 (limit 6).
func TestSmoothBurstySlowDefault(t *testing.T) {
	for _, tc := range []struct {
		burst, wantLimit int64
	}{{0, 0}, {6, 6}} {
		b, err := New(Limit{Algorithm: SmoothBursty, Limit: 6, Period: time.Minute, Burst: tc.burst}, smoothT0)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range []struct {
			at      time.Duration
			allowed bool
		}{{0, true}, {time.Second, false}, {10 * time.Second, true}, {15 * time.Second, false}, {20 * time.Second, true}} {
			got, err := b.Take(smoothT0.Add(st.at), 1)
			if err != nil || got.Allowed != st.allowed || got.Limit != tc.wantLimit {
				t.Errorf("burst %d, step %d (t0+%v): allowed %v limit %d (%v); want allowed %v limit %d",
					tc.burst, i, st.at, got.Allowed, got.Limit, err, st.allowed, tc.wantLimit)
			}
		}
	}
}
