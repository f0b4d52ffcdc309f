package bucket

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// tbT0 is the first instant of every table in tokenbucket, gcra and leaky tests.
var tbT0 = time.Unix(1_700_000_000, 0)

// tbEnd is the offset from tbT0 of the last instant in Unix nanoseconds, where
// a ResetAt saturates.
const tbEnd = MaxPeriod - 1_700_000_000*time.Second

// tbStep is one row of a step table: an operation at tbT0+at and, for a Take,
// the expected Decision.
type tbStep struct {
	name      string
	at        time.Duration // since tbT0
	op        string        // "" (Take), "drain" or "refund"
	hits      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration // ResetAt - tbT0
	wait      time.Duration
}

// tbRun plays steps on b, checking every Take against its row.
func tbRun(t *testing.T, b Bucket, steps []tbStep) {
	t.Helper()
	for _, s := range steps {
		now := tbT0.Add(s.at)
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
		got, err := b.Take(now, s.hits)
		if err != nil {
			t.Fatalf("%s: Take: %v", s.name, err)
		}
		want := Decision{Allowed: s.allowed, Limit: b.Config().Capacity(), Remaining: s.remaining,
			ResetAt: tbT0.Add(s.reset), RetryAfter: s.retry, Wait: s.wait}
		if !tbSameDecision(got, want) {
			t.Errorf("%s: got %s, want %s", s.name, tbFmt(got), tbFmt(want))
		}
	}
}

func tbSameDecision(a, b Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.ResetAt.Equal(b.ResetAt) && a.RetryAfter == b.RetryAfter && a.Wait == b.Wait
}

func tbFmt(d Decision) string {
	return "{allowed " + map[bool]string{true: "yes", false: "no"}[d.Allowed] +
		" limit " + big.NewInt(d.Limit).String() + " remaining " + big.NewInt(d.Remaining).String() +
		" reset +" + d.ResetAt.Sub(tbT0).String() + " retry " + d.RetryAfter.String() + " wait " + d.Wait.String() + "}"
}

func tbNew(t testing.TB, l Limit, now time.Time) Bucket {
	t.Helper()
	b, err := New(l, now)
	if err != nil {
		t.Fatalf("New(%+v): %v", l, err)
	}
	return b
}

// tbPolicers are the algorithms that give identical Decisions for the same
// Limit, Period and Burst.
var tbPolicers = []Algorithm{TokenBucket, LeakyMeter, GCRA}

// The seed example: bucket size 4, refilled with 4 tokens per minute.
func TestTokenBucketSeedExample(t *testing.T) {
	for _, alg := range tbPolicers {
		t.Run(alg.String(), func(t *testing.T) {
			tbRun(t, tbNew(t, Limit{Algorithm: alg, Limit: 4, Period: time.Minute}, tbT0), tbSeedSteps)
		})
	}
}

var tbSeedSteps = []tbStep{
	{name: "t0 peek full", hits: 0, allowed: true, remaining: 4},
	{name: "t0 take 1/4", hits: 1, allowed: true, remaining: 3, reset: 15 * time.Second},
	{name: "t0 take 2/4", hits: 1, allowed: true, remaining: 2, reset: 30 * time.Second},
	{name: "t0 take 3/4", hits: 1, allowed: true, remaining: 1, reset: 45 * time.Second},
	{name: "t0 take 4/4", hits: 1, allowed: true, remaining: 0, reset: time.Minute},
	{name: "t0 5th rejected", hits: 1, retry: 15 * time.Second, reset: time.Minute},
	{name: "t0+1s still empty", at: time.Second, hits: 1, retry: 14 * time.Second, reset: time.Minute},
	{name: "t0+15s one more", at: 15 * time.Second, hits: 1, allowed: true, reset: 75 * time.Second},
	{name: "t0+15s then empty", at: 15 * time.Second, hits: 1, retry: 15 * time.Second, reset: 75 * time.Second},
	{name: "t0+20s 2 hits wait 25s", at: 20 * time.Second, hits: 2, retry: 25 * time.Second, reset: 75 * time.Second},
	{name: "t0+45s two at once", at: 45 * time.Second, hits: 2, allowed: true, reset: 105 * time.Second},
	{name: "t0+45s peek empty", at: 45 * time.Second, hits: 0, allowed: true, reset: 105 * time.Second},
	{name: "t0+5m full again", at: 5 * time.Minute, hits: 0, allowed: true, remaining: 4, reset: 5 * time.Minute},
	{name: "t0+5m more than capacity", at: 5 * time.Minute, hits: 5, remaining: 4, retry: MaxRetry, reset: 5 * time.Minute},
	{name: "t0+5m whole capacity", at: 5 * time.Minute, hits: 4, allowed: true, reset: 6 * time.Minute},
}

func TestTokenBucketEdges(t *testing.T) {
	tests := []struct {
		name  string
		l     Limit
		steps []tbStep
	}{
		{"fractions kept: 3 per second", Limit{Algorithm: TokenBucket, Limit: 3, Period: time.Second}, []tbStep{
			{name: "take 3", hits: 3, allowed: true, reset: time.Second},
			{name: "1ns before a token", at: 333333333, hits: 1, retry: 1, reset: time.Second},
			{name: "a token", at: 333333334, hits: 1, allowed: true, reset: 1333333334},
			{name: "exactly two more at 1s", at: time.Second, hits: 2, allowed: true, reset: 2 * time.Second},
		}},
		{"full bucket drops the excess: 3 per second, burst 1", Limit{Algorithm: TokenBucket, Limit: 3, Period: time.Second, Burst: 1}, []tbStep{
			{name: "take", hits: 1, allowed: true, reset: 333333334},
			{name: "1ns early", at: 333333333, hits: 1, retry: 1, reset: 333333334},
			{name: "on time", at: 333333334, hits: 1, allowed: true, reset: 666666668},
			{name: "a third later is 1ns early", at: 666666667, hits: 1, retry: 1, reset: 666666668},
			{name: "on time again", at: 666666668, hits: 1, allowed: true, reset: 1000000002},
		}},
		{"burst above limit", Limit{Algorithm: TokenBucket, Limit: 1, Period: time.Second, Burst: 3}, []tbStep{
			{name: "burst of 3", hits: 3, allowed: true, reset: 3 * time.Second},
			{name: "1.5s later", at: 1500 * time.Millisecond, hits: 2, remaining: 1, retry: 500 * time.Millisecond, reset: 3 * time.Second},
			{name: "2s later", at: 2 * time.Second, hits: 2, allowed: true, reset: 5 * time.Second},
		}},
		{"1ns period, limit 1", Limit{Algorithm: TokenBucket, Limit: 1, Period: 1}, []tbStep{
			{name: "take", hits: 1, allowed: true, reset: 1},
			{name: "again", hits: 1, retry: 1, reset: 1},
			{name: "1ns later", at: 1, hits: 1, allowed: true, reset: 2},
		}},
		{"max limit per 1ns", Limit{Algorithm: TokenBucket, Limit: MaxLimit, Period: 1}, []tbStep{
			{name: "take all", hits: MaxLimit, allowed: true, reset: 1},
			{name: "1ns later full", at: 1, hits: 0, allowed: true, remaining: MaxLimit, reset: 1},
		}},
		{"max limit per second", Limit{Algorithm: TokenBucket, Limit: MaxLimit, Period: time.Second}, []tbStep{
			{name: "take all", hits: MaxLimit, allowed: true, reset: time.Second},
			{name: "1ns later", at: 1, hits: 2_000_000_000, remaining: 1_000_000_000, retry: 1, reset: time.Second},
		}},
		{"max period", Limit{Algorithm: TokenBucket, Limit: 2, Period: MaxPeriod}, []tbStep{
			{name: "take", hits: 1, allowed: true, remaining: 1, reset: MaxPeriod/2 + 1},
			{name: "take last: reset saturates", hits: 1, allowed: true, reset: tbEnd},
			{name: "empty", at: time.Hour, hits: 1, retry: MaxPeriod/2 + 1 - time.Hour, reset: tbEnd},
		}},
		{"max limit, max period", Limit{Algorithm: TokenBucket, Limit: MaxLimit, Period: MaxPeriod}, []tbStep{
			{name: "half", hits: MaxLimit / 2, allowed: true, remaining: MaxLimit / 2, reset: MaxPeriod/2 + 1},
			{name: "half again", hits: MaxLimit / 2, allowed: true, reset: tbEnd},
			{name: "one more: 9.22ns a token", hits: 1, retry: 10, reset: tbEnd},
			{name: "huge hits", hits: math.MaxInt64, retry: MaxRetry, reset: tbEnd},
		}},
		{"time goes backwards", Limit{Algorithm: TokenBucket, Limit: 2, Period: time.Second}, []tbStep{
			{name: "at 10s take 2", at: 10 * time.Second, hits: 2, allowed: true, reset: 11 * time.Second},
			{name: "back at 9s: no refill", at: 9 * time.Second, hits: 1, retry: 500 * time.Millisecond, reset: 11 * time.Second},
			{name: "back at 0s: no refill", hits: 0, allowed: true, reset: 11 * time.Second},
			{name: "10.5s: one token", at: 10500 * time.Millisecond, hits: 1, allowed: true, reset: 11500 * time.Millisecond},
		}},
		{"drain past the limit", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}, []tbStep{
			{name: "drain 25", op: "drain", hits: 25},
			{name: "peek in debt", hits: 0, retry: 1500 * time.Millisecond, reset: 2500 * time.Millisecond},
			{name: "take 1 in debt", hits: 1, retry: 1600 * time.Millisecond, reset: 2500 * time.Millisecond},
			{name: "debt paid", at: 1600 * time.Millisecond, hits: 1, allowed: true, reset: 2600 * time.Millisecond},
			{name: "refund 100 caps at full", at: 1600 * time.Millisecond, op: "refund", hits: 100},
			{name: "full", at: 1600 * time.Millisecond, hits: 0, allowed: true, remaining: 10, reset: 1600 * time.Millisecond},
			{name: "drain max", at: 2 * time.Second, op: "drain", hits: math.MaxInt64},
			{name: "floor", at: 2 * time.Second, hits: 10, retry: MaxRetry, reset: tbEnd},
		}},
	}
	for _, alg := range tbPolicers {
		for _, tt := range tests {
			tt.l.Algorithm = alg
			t.Run(alg.String()+"/"+tt.name, func(t *testing.T) { tbRun(t, tbNew(t, tt.l, tbT0), tt.steps) })
		}
	}
}

// Reconfigure scales the stored tokens to the new capacity (Guava's setRate).
func TestTokenBucketReconfigure(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}
	tests := []struct {
		name      string
		take      int64
		to        Limit
		remaining int64
		reset     time.Duration
	}{
		{"double the capacity", 4, Limit{Algorithm: TokenBucket, Limit: 20, Period: time.Second}, 12, 400 * time.Millisecond},
		{"halve the capacity", 4, Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Second}, 3, 400 * time.Millisecond},
		{"same capacity, slower", 4, Limit{Algorithm: TokenBucket, Limit: 10, Period: 2 * time.Second}, 6, 800 * time.Millisecond},
		{"burst only", 10, Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 30}, 0, 3 * time.Second},
		{"full stays full", 0, Limit{Algorithm: TokenBucket, Limit: 3, Period: time.Second}, 3, 0},
	}
	for _, tt := range tests {
		for _, alg := range tbPolicers {
			l.Algorithm, tt.to.Algorithm = alg, alg
			t.Run(alg.String()+"/"+tt.name, func(t *testing.T) {
				b := tbNew(t, l, tbT0)
				if _, err := b.Take(tbT0, tt.take); err != nil {
					t.Fatal(err)
				}
				if err := b.Reconfigure(tbT0, tt.to); err != nil {
					t.Fatal(err)
				}
				if b.Config() != tt.to {
					t.Errorf("Config: got %+v, want %+v", b.Config(), tt.to)
				}
				d, _ := b.Take(tbT0, 0)
				if d.Remaining != tt.remaining || !d.ResetAt.Equal(tbT0.Add(tt.reset)) {
					t.Errorf("got remaining %d reset +%v, want %d +%v", d.Remaining, d.ResetAt.Sub(tbT0), tt.remaining, tt.reset)
				}
			})
		}
	}
}

// Merge keeps the most consumed view, whichever side holds it, and a state of
// another limit is first scaled to this one.
func TestTokenBucketMerge(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}
	for _, alg := range []Algorithm{TokenBucket, LeakyMeter, GCRA} {
		l.Algorithm = alg
		a, b := tbNew(t, l, tbT0), tbNew(t, l, tbT0)
		a.Take(tbT0, 3)
		b.Take(tbT0.Add(100*time.Millisecond), 6) // 4 left at +100ms vs 8 for a
		if err := a.Merge(tbT0.Add(100*time.Millisecond), b); err != nil {
			t.Fatal(err)
		}
		if d, _ := a.Take(tbT0.Add(100*time.Millisecond), 0); d.Remaining != 4 {
			t.Errorf("%v: merge into the less consumed: remaining %d, want 4", alg, d.Remaining)
		}
		c := tbNew(t, l, tbT0)
		if err := a.Merge(tbT0.Add(100*time.Millisecond), c); err != nil {
			t.Fatal(err)
		}
		if d, _ := a.Take(tbT0.Add(100*time.Millisecond), 0); d.Remaining != 4 {
			t.Errorf("%v: merge of a fresh state: remaining %d, want 4", alg, d.Remaining)
		}
		if d, _ := b.Take(tbT0.Add(100*time.Millisecond), 0); d.Remaining != 4 {
			t.Errorf("%v: merge changed other: remaining %d, want 4", alg, d.Remaining)
		}
		// other under twice the capacity, half consumed: 10 of 20 left -> 5 of 10.
		l2 := l
		l2.Limit = 20
		d2 := tbNew(t, l2, tbT0)
		d2.Take(tbT0, 10)
		e := tbNew(t, l, tbT0)
		if err := e.Merge(tbT0, d2); err != nil {
			t.Fatal(err)
		}
		if d, _ := e.Take(tbT0, 0); d.Remaining != 5 || e.Config() != l {
			t.Errorf("%v: merge of another limit: remaining %d config %+v, want 5 %+v", alg, d.Remaining, e.Config(), l)
		}
	}
}

// tbRef is the token bucket's specification in exact integers: num is
// tokens*Period (so a nanosecond adds Limit), between floor*Period and c*Period.
type tbRef struct {
	c, lim, per int64
	num         *big.Int
	last        int64
}

func newTBRef(l Limit, now int64) *tbRef {
	return &tbRef{c: l.Capacity(), lim: l.Limit, per: int64(l.Period), num: tbMul(l.Capacity(), int64(l.Period)), last: now}
}

func tbMul(a, b int64) *big.Int { return new(big.Int).Mul(big.NewInt(a), big.NewInt(b)) }

// tbCeil returns ceil(x/d) for x >= 0, saturated at MaxInt64.
func tbCeil(x *big.Int, d int64) int64 {
	q := new(big.Int).Add(x, big.NewInt(d-1))
	q.Quo(q, big.NewInt(d))
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

func (r *tbRef) advance(t int64) {
	if t <= r.last {
		return
	}
	r.num.Add(r.num, tbMul(t-r.last, r.lim))
	if full := tbMul(r.c, r.per); r.num.Cmp(full) > 0 {
		r.num = full
	}
	r.last = t
}

func (r *tbRef) take(t, n int64) Decision {
	r.advance(t)
	d := Decision{Limit: r.c}
	need := tbMul(n, r.per)
	switch {
	case n > r.c:
		d.RetryAfter = MaxRetry
	case r.num.Cmp(need) >= 0:
		d.Allowed = true
		r.num.Sub(r.num, need)
	default:
		d.RetryAfter = time.Duration(tbCeil(new(big.Int).Sub(need, r.num), r.lim))
	}
	if r.num.Sign() > 0 {
		d.Remaining = new(big.Int).Quo(r.num, big.NewInt(r.per)).Int64()
	}
	d.ResetAt = unix(addSat(r.last, tbCeil(new(big.Int).Sub(tbMul(r.c, r.per), r.num), r.lim)))
	return d
}

func (r *tbRef) drain(t, n int64) {
	r.advance(t)
	r.num.Sub(r.num, tbMul(n, r.per))
	if floor := tbMul(tokenFloor, r.per); r.num.Cmp(floor) < 0 {
		r.num = floor
	}
}

func (r *tbRef) refund(t, n int64) {
	r.advance(t)
	r.num.Add(r.num, tbMul(n, r.per))
	if full := tbMul(r.c, r.per); r.num.Cmp(full) > 0 {
		r.num = full
	}
}

// tbRandLimit draws a limit: small, fractional intervals (Limit not dividing
// Period), or Limit above Period in nanoseconds.
func tbRandLimit(rng *rand.Rand, alg Algorithm) Limit {
	l := Limit{Algorithm: alg, Limit: 1 + rng.Int64N(20), Period: time.Duration(1 + rng.Int64N(2000))}
	switch rng.IntN(4) {
	case 0:
		l.Period *= time.Millisecond
	case 1:
		l.Limit *= 1000
	}
	if rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(30)
	}
	return l
}

// tbRandGap draws the time to the next call: mostly within a few refill
// intervals, sometimes none, sometimes backwards.
func tbRandGap(rng *rand.Rand, l Limit) int64 {
	iv := max(int64(l.Period)/l.Limit, 1)
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return -rng.Int64N(3 * iv)
	}
	return rng.Int64N(3*iv + 1)
}

// TokenBucket and LeakyMeter give exactly the Decisions of the reference on
// random sequences of takes, peeks, drains, refunds and clock jumps.
func TestTokenBucketMatchesReference(t *testing.T) {
	var seen [2]int // rejected, admitted
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x7b))
		alg := []Algorithm{TokenBucket, LeakyMeter}[seed%2]
		l := tbRandLimit(rng, alg)
		now := nanos(tbT0)
		b, ref := tbNew(t, l, unix(now)), newTBRef(l, now)
		for i := range 300 {
			now += tbRandGap(rng, l)
			n := rng.Int64N(l.Capacity() + 2)
			switch rng.IntN(20) {
			case 0:
				b.Drain(unix(now), n)
				ref.drain(now, n)
				continue
			case 1:
				b.Refund(unix(now), n)
				ref.refund(now, n)
				continue
			case 2: // round trip through the wire form
				enc, _ := b.AppendBinary(nil)
				var err error
				if b, err = Decode(enc); err != nil {
					t.Fatalf("seed %d step %d: Decode: %v", seed, i, err)
				}
			}
			got, _ := b.Take(unix(now), n)
			want := ref.take(now, n)
			if !tbSameDecision(got, want) {
				t.Fatalf("seed %d %+v step %d take %d at +%dns: got %s, want %s", seed, l, i, n, now-nanos(tbT0), tbFmt(got), tbFmt(want))
			}
			seen[tbB2i(got.Allowed)]++
		}
	}
	if seen[0] < 10000 || seen[1] < 10000 {
		t.Errorf("rejected %d, admitted %d: the sequences do not exercise both", seen[0], seen[1])
	}
}

func tbB2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Over any interval of length t, a token bucket admits at most
// capacity + Limit*t/Period hits.
func TestTokenBucketBound(t *testing.T) {
	type admit struct{ at, hits int64 }
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xb0))
		l := tbRandLimit(rng, TokenBucket)
		c, iv := l.Capacity(), max(int64(l.Period)/l.Limit, 1)
		b := tbNew(t, l, tbT0)
		now, total := nanos(tbT0), int64(0)
		var log []admit
		for range 400 {
			now += rng.Int64N(2*iv + 1)
			n := rng.Int64N(c/2 + 2)
			if d, _ := b.Take(unix(now), n); d.Allowed && n > 0 {
				log = append(log, admit{now, n})
				total += n
			}
		}
		for i := range log {
			sum := int64(0)
			for j := i; j < len(log); j++ {
				sum += log[j].hits
				// sum*Period <= c*Period + (t_j - t_i)*Limit
				lhs := tbMul(sum, int64(l.Period))
				rhs := new(big.Int).Add(tbMul(c, int64(l.Period)), tbMul(log[j].at-log[i].at, l.Limit))
				if lhs.Cmp(rhs) > 0 {
					t.Fatalf("seed %d %+v: %d hits admitted in [%d, %d]ns, bound %v/%d", seed, l, sum, log[i].at, log[j].at, rhs, l.Period)
				}
			}
		}
		if total == 0 {
			t.Fatalf("seed %d: nothing admitted", seed)
		}
	}
}

func FuzzTokenBucket(f *testing.F) {
	tbFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, lim, per, burst, maxWait, start, gap, h1, h2 int64) {
		tbFuzzCheck(t, TokenBucket, lim, per, burst, maxWait, start, gap, h1, h2)
		tbFuzzCheck(t, LeakyMeter, lim, per, burst, maxWait, start, gap, h1, h2)
	})
}

// tbBenchTake times Take on the side-by-side workload: 500 per second, burst
// 50, one call every millisecond (about half admitted).
func tbBenchTake(b *testing.B, alg Algorithm) {
	bk, err := New(Limit{Algorithm: alg, Limit: 500, Period: time.Second, Burst: 50, MaxWait: 50 * time.Millisecond}, tbT0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	allowed := 0
	now := tbT0
	for b.Loop() {
		now = now.Add(time.Millisecond)
		d, _ := bk.Take(now, 1)
		if d.Allowed {
			allowed++
		}
	}
	tbSink = allowed
}

var tbSink int

func BenchmarkTakeTokenBucket(b *testing.B) { tbBenchTake(b, TokenBucket) }
