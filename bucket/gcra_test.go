package bucket

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// GCRA and TokenBucket, given the same Limit, Period and Burst, admit exactly
// the same requests with exactly the same Decisions, on random arrivals mixed
// with peeks, drains, refunds, clock jumps, merges and trips through the wire
// form, including emission intervals that are not whole nanoseconds.
func TestGCRAMatchesTokenBucket(t *testing.T) {
	var seen [2]int // rejected, admitted
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x6c7a))
		l := tbRandLimit(rng, GCRA)
		lt := l
		lt.Algorithm = TokenBucket
		now := nanos(tbT0)
		// Two replicas of one key, as two nodes hold them: g[0] and g[1] are
		// GCRA, b[0] and b[1] the token buckets fed the same calls.
		g := [2]Bucket{tbNew(t, l, unix(now)), tbNew(t, l, unix(now))}
		b := [2]Bucket{tbNew(t, lt, unix(now)), tbNew(t, lt, unix(now))}
		for i := range 400 {
			now += tbRandGap(rng, l)
			at := unix(now)
			k := rng.IntN(2)
			n := rng.Int64N(l.Capacity() + 2)
			switch rng.IntN(25) {
			case 0:
				g[k].Drain(at, n)
				b[k].Drain(at, n)
			case 1:
				g[k].Refund(at, n)
				b[k].Refund(at, n)
			case 2:
				if err := g[k].Merge(at, g[1-k]); err != nil {
					t.Fatal(err)
				}
				if err := b[k].Merge(at, b[1-k]); err != nil {
					t.Fatal(err)
				}
			case 3:
				for _, x := range []*Bucket{&g[k], &b[k]} {
					enc, _ := (*x).AppendBinary(nil)
					var err error
					if *x, err = Decode(enc); err != nil {
						t.Fatalf("seed %d step %d: Decode: %v", seed, i, err)
					}
				}
			}
			if gi, bi := g[k].Idle(at), b[k].Idle(at); gi != bi {
				t.Fatalf("seed %d %+v step %d: Idle: gcra %v, token bucket %v", seed, l, i, gi, bi)
			}
			dg, _ := g[k].Take(at, n)
			db, _ := b[k].Take(at, n)
			if !tbSameDecision(dg, db) {
				t.Fatalf("seed %d %+v step %d: take %d at +%dns: gcra %s, token bucket %s", seed, l, i, n, now-nanos(tbT0), tbFmt(dg), tbFmt(db))
			}
			seen[tbB2i(dg.Allowed)]++
		}
	}
	if seen[0] < 10000 || seen[1] < 10000 {
		t.Errorf("rejected %d, admitted %d: the sequences do not exercise both", seen[0], seen[1])
	}
}

// An emission interval below a nanosecond (Limit above Period in ns) and one
// with a fraction (Period/Limit = 333333333.3ns) are kept exactly.
func TestGCRAFractionalInterval(t *testing.T) {
	tests := []struct {
		name  string
		l     Limit
		steps []tbStep
	}{
		{"T = 1/3 ns", Limit{Algorithm: GCRA, Limit: 3_000_000_000, Period: time.Second, Burst: 10}, []tbStep{
			{name: "burst of 10", hits: 10, allowed: true, reset: 4},
			{name: "1ns: 3 back", at: 1, hits: 4, remaining: 3, retry: 1, reset: 4},
			{name: "1ns: take 3", at: 1, hits: 3, allowed: true, reset: 5},
			{name: "2ns: 3 more", at: 2, hits: 3, allowed: true, reset: 6},
			{name: "4ns: 6 back", at: 4, hits: 7, remaining: 6, retry: 1, reset: 6},
		}},
		{"T = 333333333.3ns, 3 per second", Limit{Algorithm: GCRA, Limit: 3, Period: time.Second}, []tbStep{
			{name: "3 at once", hits: 3, allowed: true, reset: time.Second},
			{name: "at 333333333ns, 1/3 ns short", at: 333333333, hits: 1, retry: 1, reset: time.Second},
			{name: "at 333333334ns", at: 333333334, hits: 1, allowed: true, reset: 1333333334},
			{name: "at 1s exactly two more", at: time.Second, hits: 2, allowed: true, reset: 2 * time.Second},
			{name: "at 1s none", at: time.Second, hits: 1, retry: 333333334, reset: 2 * time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tbRun(t, tbNew(t, tt.l, tbT0), tt.steps) })
	}
}

func TestGCRADecodeCorrupt(t *testing.T) {
	l := Limit{Algorithm: GCRA, Limit: 10, Period: time.Second, Burst: 5}
	g := newGCRAState(l, nanos(tbT0))
	g.Drain(tbT0, math.MaxInt64) // the largest backlog there is
	enc, _ := g.AppendBinary(nil)
	if _, err := Decode(enc); err != nil {
		t.Fatalf("largest backlog: %v", err)
	}
	g.tat = g.tat.add(gcraU128{0, 1})
	enc, _ = g.AppendBinary(nil)
	if _, err := Decode(enc); !errors.Is(err, ErrCorrupt) {
		t.Errorf("backlog beyond bound: got %v, want ErrCorrupt", err)
	}
}

func TestGCRAU128(t *testing.T) {
	x := gcraMul(math.MaxUint64, math.MaxUint64) // 2^128 - 2^65 + 1
	if x.hi != math.MaxUint64-1 || x.lo != 1 {
		t.Fatalf("MaxUint64^2 = %#x:%#x", x.hi, x.lo)
	}
	if y := x.sub(gcraU128{0, 2}); y.hi != math.MaxUint64-2 || y.lo != math.MaxUint64 {
		t.Errorf("borrow: %#x:%#x", y.hi, y.lo)
	}
	if y := (gcraU128{0, math.MaxUint64}).add(gcraU128{0, 1}); y.hi != 1 || y.lo != 0 {
		t.Errorf("carry: %#x:%#x", y.hi, y.lo)
	}
	tests := []struct {
		x         gcraU128
		d         uint64
		div, ceil int64
	}{
		{gcraU128{0, 10}, 3, 3, 4},
		{gcraU128{0, 9}, 3, 3, 3},
		{gcraU128{0, 0}, 7, 0, 0},
		{gcraU128{1, 0}, 2, math.MaxInt64, math.MaxInt64}, // 2^63
		{gcraU128{0, math.MaxInt64}, 1, math.MaxInt64, math.MaxInt64},
		{gcraU128{0, math.MaxUint64}, 1, math.MaxInt64, math.MaxInt64},
		{gcraU128{5, 0}, 5, math.MaxInt64, math.MaxInt64},
		{gcraU128{4, 1}, 5, math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := tt.x.div(tt.d); got != tt.div {
			t.Errorf("%v/%d = %d, want %d", tt.x, tt.d, got, tt.div)
		}
		if got := tt.x.ceilDiv(tt.d); got != tt.ceil {
			t.Errorf("ceil %v/%d = %d, want %d", tt.x, tt.d, got, tt.ceil)
		}
	}
}

// tbFuzzCheck drives a bucket of algorithm alg with values straight from the
// fuzzer: no panic, sane Decisions, admissions within the bound, and a state
// that survives the wire form.
func tbFuzzCheck(t *testing.T, alg Algorithm, lim, per, burst, maxWait, start, gap, h1, h2 int64) {
	abs := func(v int64) int64 {
		if v < 0 {
			return -(v + 1)
		}
		return v
	}
	l := Limit{Algorithm: alg, Limit: 1 + abs(lim)%MaxLimit, Period: time.Duration(1 + abs(per)%math.MaxInt64),
		Burst: abs(burst) % (MaxLimit + 1), MaxWait: time.Duration(abs(maxWait))}
	h1, h2 = abs(h1), abs(h2)
	capN := l.Capacity()
	if alg == LeakyQueue {
		capN++
	}
	check := func(what string, n int64, d Decision) {
		t.Helper()
		switch {
		case d.Remaining < 0 || d.Remaining > capN:
			t.Fatalf("%s: remaining %d outside [0, %d]", what, d.Remaining, capN)
		case d.Allowed && (d.RetryAfter != 0 || n > capN):
			t.Fatalf("%s: allowed %d hits, retry %v, capacity %d", what, n, d.RetryAfter, capN)
		case !d.Allowed && d.RetryAfter <= 0:
			t.Fatalf("%s: rejected with retry %v", what, d.RetryAfter)
		case d.Wait < 0 || (d.Allowed && d.Wait > l.MaxWait && alg == LeakyQueue) || (alg != LeakyQueue && d.Wait != 0):
			t.Fatalf("%s: wait %v", what, d.Wait)
		case d.Limit != l.Capacity():
			t.Fatalf("%s: limit %d", what, d.Limit)
		}
	}
	t0 := unix(start)
	b, err := New(l, t0)
	if err != nil {
		t.Fatalf("New(%+v): %v", l, err)
	}
	d1, _ := b.Take(t0, h1)
	check("take 1", h1, d1)
	t1 := unix(addSat(start, abs(gap)))
	d2, _ := b.Take(t1, h2)
	check("take 2", h2, d2)
	admitted := big.NewInt(0)
	for _, x := range []struct {
		d Decision
		n int64
	}{{d1, h1}, {d2, h2}} {
		if x.d.Allowed {
			admitted.Add(admitted, big.NewInt(x.n))
		}
	}
	// admitted*Period <= capN*Period + elapsed*Limit
	lhs := new(big.Int).Mul(admitted, big.NewInt(int64(l.Period)))
	rhs := new(big.Int).Add(tbMul(capN, int64(l.Period)), tbMul(elapsed(start, nanos(t1)), l.Limit))
	if lhs.Cmp(rhs) > 0 {
		t.Fatalf("%+v: admitted %v hits in %dns", l, admitted, elapsed(start, nanos(t1)))
	}
	b.Drain(t1, h1)
	b.Refund(unix(addSat(start, -abs(gap))), h2)
	d3, _ := b.Take(unix(addSat(start, -abs(gap))), h1)
	check("take after drain", h1, d3)
	enc, _ := b.AppendBinary(nil)
	dec, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode(AppendBinary) of %+v: %v", l, err)
	}
	if re, _ := dec.AppendBinary(nil); !bytes.Equal(re, enc) {
		t.Fatalf("re-encoding differs")
	}
	l2 := l
	l2.Limit, l2.Period, l2.Burst = l.Capacity()/2+1, l.Period/3+1, 0
	if err := b.Reconfigure(t1, l2); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if err := b.Merge(t1, dec); err != nil {
		t.Fatalf("Merge: %v", err)
	}
	capN = l2.Capacity()
	if alg == LeakyQueue {
		capN++
	}
	l = l2
	d4, _ := b.Take(t1, h2)
	check("take after reconfigure", h2, d4)
	_ = b.Idle(t1)
}

func tbFuzzSeeds(f *testing.F) {
	f.Add(int64(4), int64(time.Minute), int64(0), int64(0), nanos(tbT0), int64(15*time.Second), int64(4), int64(1))
	f.Add(int64(MaxLimit), int64(1), int64(MaxLimit), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(MaxLimit))
	f.Add(int64(MaxLimit-1), int64(math.MaxInt64-1), int64(MaxLimit-1), int64(0), int64(math.MinInt64), int64(1), int64(MaxLimit), int64(MaxLimit))
	f.Add(int64(3), int64(1e9), int64(1), int64(1e9), int64(-1), int64(333333333), int64(1), int64(2))
	f.Add(int64(1), int64(math.MaxInt64-1), int64(0), int64(math.MaxInt64-1), int64(0), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
}

func FuzzGCRA(f *testing.F) {
	tbFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, lim, per, burst, maxWait, start, gap, h1, h2 int64) {
		tbFuzzCheck(t, GCRA, lim, per, burst, maxWait, start, gap, h1, h2)
	})
}

func BenchmarkTakeGCRA(b *testing.B) { tbBenchTake(b, GCRA) }
