package bucket

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// fzT0 is the first instant of the seed states.
var fzT0 = time.Unix(1_700_000_000, 0)

// fzLimits returns the limits the seed states are made under: the contract
// limit of a, and extremes (1e18 per nanosecond, 1 per 292 years, the
// largest options).
func fzLimits(a Algorithm) []Limit {
	ls := []Limit{
		ctLimit(a),
		{Algorithm: a, Limit: MaxLimit, Period: 1, Burst: MaxLimit, MaxWait: MaxPeriod},
		{Algorithm: a, Limit: 1, Period: MaxPeriod, MaxWait: MaxPeriod, MinGap: MaxPeriod},
		{Algorithm: a, Limit: 3, Period: 7, Burst: 2, MaxWait: 5, MinGap: 1, CountRejected: true},
	}
	for i := range ls {
		switch a {
		case SlidingLog:
			ls[i].Limit = min(ls[i].Limit, 64)
		case SmoothWarmingUp:
			if ls[i].WarmUp == 0 {
				ls[i].WarmUp = max(ls[i].Period, time.Microsecond)
			}
		}
	}
	switch a { // Guava's options
	case SmoothBursty:
		ls = append(ls, Limit{Algorithm: a, Limit: 3, Period: time.Second, MaxBurstMillis: 2500, MaxWait: time.Second})
	case SmoothWarmingUp:
		ls = append(ls, Limit{Algorithm: a, Limit: 3, Period: time.Second, ColdFactorMilli: 10000, WarmUp: time.Second})
	}
	return ls
}

// fzStates returns states of every algorithm, in various conditions: fresh,
// after takes, drained far past the limit, refunded, with named leases,
// with a full sliding log that dropped entries, reconfigured and merged.
func fzStates(t testing.TB) []Bucket {
	var out []Bucket
	for _, a := range Algorithms() {
		for _, l := range fzLimits(a) {
			b, err := New(l, fzT0)
			if err != nil {
				t.Fatalf("New(%+v): %v", l, err)
			}
			out = append(out, b.Clone()) // fresh
			now := fzT0
			for i := range 12 {
				now = fzT0.Add(time.Duration(i) * 37 * time.Millisecond)
				b.Take(now, int64(i%3))
				if s, ok := b.(Semaphore); ok {
					s.Acquire(now, "lease-"+strconv.Itoa(i%5), int64(1+i%2))
					if i%4 == 3 {
						s.Release(now, "lease-"+strconv.Itoa(i%5-1))
					}
				}
			}
			out = append(out, b.Clone()) // used
			d := b.Clone()
			for i := range 2*min(l.Limit, 64) + 3 { // a sliding log fills and drops
				d.Drain(now.Add(time.Duration(i)), 1)
			}
			d.Drain(now, MaxLimit)
			out = append(out, d) // drained far past the limit
			r := b.Clone()
			r.Refund(now.Add(time.Millisecond), 5)
			out = append(out, r) // refunded
			c := b.Clone()
			l2 := l
			l2.Limit = max(1, l.Limit/2)
			l2.Period = l.Period/3 + 1
			if err := c.Reconfigure(now.Add(time.Millisecond), l2); err != nil {
				t.Fatalf("Reconfigure(%+v): %v", l2, err)
			}
			out = append(out, c) // reconfigured
			m := b.Clone()
			if err := m.Merge(now.Add(2*time.Millisecond), d); err != nil {
				t.Fatalf("Merge: %v", err)
			}
			out = append(out, m) // merged with a drained copy
		}
	}
	return out
}

// fzSeeds returns the wire form of every state of fzStates.
func fzSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, b := range fzStates(t) {
		enc, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, enc)
	}
	return out
}

// fzGarbage is input that is not a state.
var fzGarbage = [][]byte{
	nil,
	{},
	{0},
	{1},
	{1, 1},
	{1, 1, 0},
	{2, 1, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0}, // unknown version
	{1, 0, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0}, // algorithm 0
	{1, 11, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0},                                     // algorithm 11
	{1, 1, 8, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0},                                      // unknown flag
	{1, 1, 2, 10, 1, 0, 0, 0, 0, 5, 0, 0},                                         // max_burst_seconds on a token bucket
	{1, 9, 2, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                 // max_burst_seconds flagged but 0
	{1, 10, 4, 10, 1, 0, 0, 0, 1, 0x80, 0x80, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // cold factor above 65535
	{1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},                                       // limit 0
	{1, 1, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                      // period 0
	{1, 1, 0, 10, 1, 0, 0, 0, 0, 40, 0, 0},                                        // 20 tokens of 10 (zigzag varint 40)
	{1, 1, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0xff},                                   // a full token bucket and a trailing byte
	bytes.Repeat([]byte{0xff}, 64),
	bytes.Repeat([]byte{0x80}, 64),
	[]byte("token_bucket"),
	append([]byte{1, 1, 0}, bytes.Repeat([]byte{0xff}, 10)...),                     // a uvarint overflowing 64 bits
	append([]byte{1, 5, 0, 10, 1, 0, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f), // sliding log: 2^32 entries
	append([]byte{1, 8, 0, 10, 1, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f),    // concurrency: 2^32 runs
}

func FuzzDecode(f *testing.F) {
	for _, s := range fzSeeds(f) {
		f.Add(s)
	}
	for _, g := range fzGarbage {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, b []byte) { fzCheck(t, b) })
}

// fzCheck decodes b: an error must wrap ErrCorrupt; a state must survive the
// wire form and every call with extreme values.
func fzCheck(t *testing.T, b []byte) {
	in := bytes.Clone(b)
	bk, err := Decode(b)
	if !bytes.Equal(b, in) {
		t.Fatalf("Decode modified its input")
	}
	if err != nil {
		if bk != nil || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode(%x) = %v, %v; want nil and an error wrapping ErrCorrupt", b, bk, err)
		}
		return
	}
	enc := fzRoundTrip(t, "decoded", bk)
	if err := bk.Config().Validate(); err != nil {
		t.Fatalf("decoded an invalid limit %+v: %v", bk.Config(), err)
	}
	fzExercise(t, bk)
	// Decode keeps no reference to its input.
	b2 := bytes.Clone(b)
	bk2, _ := Decode(b2)
	clear(b2)
	if got, _ := bk2.AppendBinary(nil); !bytes.Equal(got, enc) {
		t.Fatalf("the decoded state shares memory with its input")
	}
}

// fzRoundTrip checks that b's wire form decodes to a state whose wire form is
// the same, and returns it.
func fzRoundTrip(t *testing.T, what string, b Bucket) []byte {
	t.Helper()
	enc, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatalf("%s: AppendBinary: %v", what, err)
	}
	dec, err := Decode(enc)
	if err != nil {
		t.Fatalf("%s: Decode(AppendBinary) of a %v state: %v\n%x", what, b.Config().Algorithm, err, enc)
	}
	if dec.Config() != b.Config() {
		t.Fatalf("%s: config %+v decoded as %+v", what, b.Config(), dec.Config())
	}
	again, _ := dec.AppendBinary(nil)
	if !bytes.Equal(again, enc) {
		t.Fatalf("%s: re-encoding differs:\n%x\n%x", what, enc, again)
	}
	return enc
}

// fzTimes are instants from the earliest to the latest representable.
var fzTimes = []time.Time{
	time.Unix(0, math.MinInt64), time.Unix(0, -1), {}, time.Unix(0, 0), fzT0,
	fzT0.Add(time.Nanosecond), fzT0.Add(time.Hour), time.Unix(0, math.MaxInt64-1), time.Unix(0, math.MaxInt64),
}

// fzHits are hit counts from none to the most.
var fzHits = []int64{0, 1, 2, MaxLimit - 1, MaxLimit, math.MaxInt64 - 1, math.MaxInt64}

// fzCheckDecision checks what every Decision must satisfy.
func fzCheckDecision(t *testing.T, what string, d Decision) {
	t.Helper()
	if d.Remaining < 0 || d.RetryAfter < 0 || d.Wait < 0 || (d.Allowed && d.RetryAfter != 0) || (!d.Allowed && d.RetryAfter == 0) || (!d.Allowed && d.Wait != 0) {
		t.Fatalf("%s: %s", what, ctFmt(d))
	}
}

// fzExercise makes every call on copies of b with extreme instants, hit
// counts and limits: no panic, no error, Remaining never negative, and the
// state still survives the wire form.
func fzExercise(t *testing.T, b Bucket) {
	l := b.Config()
	a := l.Algorithm
	for _, now := range fzTimes {
		c := b.Clone()
		for _, h := range fzHits {
			d, err := c.Take(now, h)
			if err != nil {
				t.Fatalf("Take(%d, %d): %v", nanos(now), h, err)
			}
			fzCheckDecision(t, "Take", d)
		}
		fzRoundTrip(t, "after takes", c)
		for _, h := range fzHits {
			if err := c.Drain(now, h); err != nil {
				t.Fatalf("Drain(%d): %v", h, err)
			}
			d, _ := c.Take(now, 0)
			fzCheckDecision(t, "peek after Drain", d)
			if err := c.Refund(now, h); err != nil {
				t.Fatalf("Refund(%d): %v", h, err)
			}
			d, _ = c.Take(now, 1)
			fzCheckDecision(t, "Take after Refund", d)
		}
		fzRoundTrip(t, "after drains and refunds", c)
		if s, ok := c.(Semaphore); ok {
			for i, h := range fzHits {
				d, err := s.Acquire(now, "fz"+strconv.Itoa(i%3), h)
				if err != nil {
					t.Fatalf("Acquire(%d): %v", h, err)
				}
				fzCheckDecision(t, "Acquire", d)
				if n := s.Release(now, "fz"+strconv.Itoa((i+1)%3)); n < 0 {
					t.Fatalf("Release = %d", n)
				}
			}
			fzRoundTrip(t, "after leases", c)
		}
		_ = c.Idle(now)
		if err := c.Merge(now, c); err != nil {
			t.Fatalf("Merge(itself): %v", err)
		}
		if err := c.Merge(now, b); err != nil {
			t.Fatalf("Merge(original): %v", err)
		}
		d, _ := c.Take(now, 1)
		fzCheckDecision(t, "Take after Merge", d)
		fzRoundTrip(t, "after merges", c)
		cl := c.Clone()
		fzRoundTrip(t, "clone", cl)
	}
	// Reconfigure to extreme limits of the same algorithm, then back.
	for _, to := range fzLimits(a) {
		for _, now := range []time.Time{time.Unix(0, math.MinInt64), fzT0, time.Unix(0, math.MaxInt64)} {
			c := b.Clone()
			if err := c.Reconfigure(now, to); err != nil {
				t.Fatalf("Reconfigure(%+v): %v", to, err)
			}
			if c.Config() != to {
				t.Fatalf("Reconfigure: config %+v, want %+v", c.Config(), to)
			}
			for _, h := range fzHits {
				d, _ := c.Take(now, h)
				fzCheckDecision(t, "Take after Reconfigure", d)
			}
			fzRoundTrip(t, "after Reconfigure to "+strconv.FormatInt(to.Limit, 10), c)
			if err := c.Merge(now, b); err != nil {
				t.Fatalf("Merge(another limit): %v", err)
			}
			fzRoundTrip(t, "after Merge of another limit", c)
			if err := c.Reconfigure(now, l); err != nil {
				t.Fatalf("Reconfigure back: %v", err)
			}
			d, _ := c.Take(now, 1)
			fzCheckDecision(t, "Take after Reconfigure back", d)
			fzRoundTrip(t, "after Reconfigure back", c)
		}
	}
}

// Every seed state and every piece of garbage passes the fuzz body (the
// seed corpus runs it too; this names the failing state).
func TestDecodeSeeds(t *testing.T) {
	for i, s := range fzSeeds(t) {
		if _, err := Decode(s); err != nil {
			t.Fatalf("seed %d: Decode: %v", i, err)
		}
	}
}

// Every prefix of every seed state decodes to an error wrapping ErrCorrupt or
// to a valid state, never a panic; so does every seed with one byte changed.
func TestDecodeTruncatedAndMutated(t *testing.T) {
	corrupt, valid := 0, 0
	check := func(what string, b []byte) {
		t.Helper()
		bk, err := Decode(b)
		switch {
		case err == nil:
			valid++
			fzRoundTrip(t, what, bk)
		case !errors.Is(err, ErrCorrupt) || bk != nil:
			t.Fatalf("%s: Decode(%x) = %v, %v; want an error wrapping ErrCorrupt", what, b, bk, err)
		default:
			corrupt++
		}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for i, s := range fzSeeds(t) {
		for n := range len(s) {
			check("seed "+strconv.Itoa(i)+" prefix "+strconv.Itoa(n), s[:n])
		}
		for range 32 {
			m := bytes.Clone(s)
			m[rng.IntN(len(m))] ^= byte(1 + rng.IntN(255))
			check("seed "+strconv.Itoa(i)+" mutated", m)
		}
		check("seed "+strconv.Itoa(i)+" with a trailing byte", append(bytes.Clone(s), 0))
	}
	t.Logf("%d inputs corrupt, %d valid", corrupt, valid)
	if corrupt == 0 {
		t.Error("no input was corrupt")
	}
}

// Random bytes are corrupt, and so are the garbage seeds.
func TestDecodeGarbage(t *testing.T) {
	for i, g := range fzGarbage {
		if bk, err := Decode(g); !errors.Is(err, ErrCorrupt) || bk != nil {
			t.Errorf("garbage %d (%x): Decode = %v, %v; want an error wrapping ErrCorrupt", i, g, bk, err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		g := make([]byte, rng.IntN(80))
		for j := range g {
			g[j] = byte(rng.Uint32())
		}
		if i%2 == 1 && len(g) > 3 {
			// A plausible header, so that the algorithms' decoders see garbage.
			g[0], g[1], g[2] = stateVersion, byte(1+rng.IntN(10)), 0
		}
		bk, err := Decode(g)
		if i%2 == 0 && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("random bytes %x: Decode = %v, %v; want an error wrapping ErrCorrupt", g, bk, err)
		}
		if err == nil {
			fzRoundTrip(t, "random state", bk)
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%x: Decode error %v does not wrap ErrCorrupt", g, err)
		}
	}
}

// A semaphore reconfigured to a smaller Limit keeps every named lease (it
// must: they hold permits), but Decode accepts at most min(Limit,
// MaxLogLimit) named leases (ccMaxRuns), so the reconfigured state's own
// wire form is rejected as corrupt, and a hand-off of the key fails. Merge
// folds the excess leases into anonymous runs; Reconfigure does not.
func TestConcurrencyReconfigureStaysDecodable(t *testing.T) {
	b, err := New(Limit{Algorithm: Concurrency, Limit: 10, Period: time.Second}, fzT0)
	if err != nil {
		t.Fatal(err)
	}
	s := b.(Semaphore)
	for _, id := range []string{"a", "b", "c"} {
		if d, _ := s.Acquire(fzT0, id, 1); !d.Allowed {
			t.Fatalf("Acquire(%s) rejected", id)
		}
	}
	if err := b.Reconfigure(fzT0, Limit{Algorithm: Concurrency, Limit: 2, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	enc, _ := b.AppendBinary(nil)
	if _, err := Decode(enc); err != nil {
		t.Errorf("3 leases under Limit 2: Decode(AppendBinary) = %v", err)
	}
}
