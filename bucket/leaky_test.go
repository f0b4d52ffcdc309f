package bucket

import (
	"bytes"
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// The meter's level rises by the hits admitted and drains at Limit per Period.
func TestLeakyMeterLevel(t *testing.T) {
	l := Limit{Algorithm: LeakyMeter, Limit: 2, Period: time.Second, Burst: 4}
	m := tbNew(t, l, tbT0).(*leakyMeter)
	steps := []struct {
		step  tbStep
		level float64 // after the step
	}{
		{tbStep{name: "empty", hits: 0, allowed: true, remaining: 4}, 0},
		{tbStep{name: "pour 3", hits: 3, allowed: true, remaining: 1, reset: 1500 * time.Millisecond}, 3},
		{tbStep{name: "500ms: 3 would overflow", at: 500 * time.Millisecond, hits: 3, remaining: 2, retry: 500 * time.Millisecond, reset: 1500 * time.Millisecond}, 2},
		{tbStep{name: "1s: 3 fit exactly", at: time.Second, hits: 3, allowed: true, reset: 3 * time.Second}, 4},
		{tbStep{name: "1.25s: half a hit drained", at: 1250 * time.Millisecond, hits: 0, allowed: true, reset: 3 * time.Second}, 3.5},
		{tbStep{name: "drain 10 past the top", at: 1250 * time.Millisecond, op: "drain", hits: 10}, 13.5},
		{tbStep{name: "over the top: wait to 3", at: 1250 * time.Millisecond, hits: 1, retry: 5250 * time.Millisecond, reset: 8 * time.Second}, 13.5},
		{tbStep{name: "refund 12", at: 1250 * time.Millisecond, op: "refund", hits: 12}, 1.5},
		{tbStep{name: "pour 2", at: 1250 * time.Millisecond, hits: 2, allowed: true, reset: 3 * time.Second}, 3.5},
		{tbStep{name: "long after: empty", at: time.Hour, hits: 4, allowed: true, reset: time.Hour + 2*time.Second}, 4},
	}
	for _, s := range steps {
		tbRun(t, m, []tbStep{s.step})
		if got := m.level(); got != s.level {
			t.Errorf("%s: level %v, want %v", s.step.name, got, s.level)
		}
	}
}

// lmRef is the meter's specification in exact integers: lv is level*Period,
// drained by Limit each nanosecond.
type lmRef struct {
	c, lim, per int64
	lv          *big.Int
	last        int64
}

func (r *lmRef) take(t, n int64) Decision {
	if t > r.last {
		r.lv.Sub(r.lv, tbMul(t-r.last, r.lim))
		if r.lv.Sign() < 0 {
			r.lv.SetInt64(0)
		}
		r.last = t
	}
	top := tbMul(r.c, r.per)
	after := new(big.Int).Add(r.lv, tbMul(n, r.per))
	d := Decision{Limit: r.c}
	switch {
	case n > r.c:
		d.RetryAfter = MaxRetry
	case after.Cmp(top) <= 0:
		d.Allowed = true
		r.lv = after
	default:
		d.RetryAfter = time.Duration(tbCeil(after.Sub(after, top), r.lim))
	}
	if room := new(big.Int).Sub(top, r.lv); room.Sign() > 0 {
		d.Remaining = room.Quo(room, big.NewInt(r.per)).Int64()
	}
	d.ResetAt = unix(addSat(r.last, tbCeil(r.lv, r.lim)))
	return d
}

func TestLeakyMeterMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1e))
		l := tbRandLimit(rng, LeakyMeter)
		now := nanos(tbT0)
		m := tbNew(t, l, unix(now))
		ref := &lmRef{c: l.Capacity(), lim: l.Limit, per: int64(l.Period), lv: new(big.Int), last: now}
		for i := range 300 {
			now += tbRandGap(rng, l)
			n := rng.Int64N(l.Capacity() + 2)
			got, _ := m.Take(unix(now), n)
			if want := ref.take(now, n); !tbSameDecision(got, want) {
				t.Fatalf("seed %d %+v step %d take %d: got %s, want %s", seed, l, i, n, tbFmt(got), tbFmt(want))
			}
		}
	}
}

// The synchronous leaky bucket of the seed notes: one request leaves every
// 100ms; a request waits interval*queued - (now - last departure); beyond
// Burst waiting, 503.
func TestLeakyQueueSeed(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name  string
		l     Limit
		steps []tbStep
	}{
		{"100ms interval, queue of 2", Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 2, MaxWait: time.Second}, []tbStep{
			{name: "fresh peek", hits: 0, allowed: true, remaining: 3},
			{name: "t0: idle, no wait", hits: 1, allowed: true, remaining: 2, reset: 100 * ms},
			{name: "30ms: waits 100-30", at: 30 * ms, hits: 1, allowed: true, wait: 70 * ms, remaining: 1, reset: 200 * ms},
			{name: "40ms: waits 2*100-40", at: 40 * ms, hits: 1, allowed: true, wait: 160 * ms, reset: 300 * ms},
			{name: "50ms: a third waiter is one too many", at: 50 * ms, hits: 1, retry: 50 * ms, reset: 300 * ms},
			{name: "100ms: first waiter left, room for one", at: 100 * ms, hits: 1, allowed: true, wait: 200 * ms, reset: 400 * ms},
			{name: "100ms: peek shows the wait", at: 100 * ms, hits: 0, allowed: true, wait: 300 * ms, reset: 400 * ms},
			{name: "400ms: last left 100ms ago, no wait", at: 400 * ms, hits: 1, allowed: true, remaining: 2, reset: 500 * ms},
			{name: "450ms: 50ms after, waits 50", at: 450 * ms, hits: 1, allowed: true, wait: 50 * ms, remaining: 1, reset: 600 * ms},
			{name: "450ms: 4 hits never fit", at: 450 * ms, hits: 4, remaining: 1, retry: MaxRetry, reset: 600 * ms},
			{name: "1s: 3 hits, one now and two queued", at: time.Second, hits: 3, allowed: true, reset: 1300 * ms},
		}},
		{"MaxWait 150ms caps the wait, not the queue", Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 10, MaxWait: 150 * ms}, []tbStep{
			{name: "t0: no wait", hits: 1, allowed: true, remaining: 1, reset: 100 * ms},
			{name: "t0: waits 100", hits: 1, allowed: true, wait: 100 * ms, reset: 200 * ms},
			{name: "t0: 200 > MaxWait", hits: 1, retry: 50 * ms, reset: 200 * ms},
			{name: "50ms: waits exactly MaxWait", at: 50 * ms, hits: 1, allowed: true, wait: 150 * ms, reset: 300 * ms},
			{name: "50ms: 3 hits wait too long", at: 50 * ms, hits: 3, retry: 100 * ms, reset: 300 * ms},
			{name: "150ms: 3 hits wait 150", at: 150 * ms, hits: 3, allowed: true, wait: 150 * ms, reset: 600 * ms},
		}},
		{"MaxWait 0: no waiting, one per interval", Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second}, []tbStep{
			{name: "t0", hits: 1, allowed: true, reset: 100 * ms},
			{name: "99ms: too early", at: 99 * ms, hits: 1, retry: ms, reset: 100 * ms},
			{name: "100ms", at: 100 * ms, hits: 1, allowed: true, reset: 200 * ms},
			{name: "200ms: 2 hits take 2 slots", at: 200 * ms, hits: 2, allowed: true, reset: 400 * ms},
			{name: "300ms: the second slot is taken", at: 300 * ms, hits: 1, retry: 100 * ms, reset: 400 * ms},
			{name: "400ms: idle", at: 400 * ms, hits: 0, allowed: true, remaining: 1, reset: 400 * ms},
			{name: "400ms: Limit+1 hits never fit", at: 400 * ms, hits: 12, remaining: 1, retry: MaxRetry, reset: 400 * ms},
			{name: "400ms: Limit+1 hits: one now, Burst=Limit queued", at: 400 * ms, hits: 11, allowed: true, reset: 1500 * ms},
		}},
		{"time goes backwards", Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 5, MaxWait: time.Second}, []tbStep{
			{name: "1s", at: time.Second, hits: 1, allowed: true, remaining: 5, reset: 1100 * ms},
			{name: "back to 0: as at 1s", hits: 1, allowed: true, wait: 100 * ms, remaining: 4, reset: 1200 * ms},
			{name: "1.2s", at: 1200 * ms, hits: 1, allowed: true, remaining: 5, reset: 1300 * ms},
		}},
		{"drain and refund", Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 5, MaxWait: time.Second}, []tbStep{
			{name: "drain 8 past the queue", op: "drain", hits: 8},
			{name: "full queue", hits: 1, retry: 300 * ms, reset: 800 * ms},
			{name: "refund 3", op: "refund", hits: 3},
			{name: "room again", hits: 1, allowed: true, wait: 500 * ms, reset: 600 * ms},
			{name: "refund all", op: "refund", hits: 100},
			{name: "idle", hits: 1, allowed: true, remaining: 5, reset: 100 * ms},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tbRun(t, tbNew(t, tt.l, tbT0), tt.steps) })
	}
}

// lqRef is the synchronous leaky bucket simulated naively: the departure
// slot of every hit admitted, at whole nanoseconds (the interval iv is one).
type lqRef struct {
	iv, burst, maxWait int64
	slots              []int64
	last               int64
}

func (r *lqRef) clone() *lqRef {
	c := *r
	c.slots = append([]int64(nil), r.slots...)
	return &c
}

// admit takes n hits at t if they fit and reports whether they did and the wait.
func (r *lqRef) admit(t, n int64, force bool) (bool, int64) {
	t = max(t, r.last)
	r.last = t
	s := t
	if len(r.slots) > 0 {
		s = max(t, r.slots[len(r.slots)-1]+r.iv)
	}
	waiting := int64(0)
	for _, x := range r.slots {
		if x > t {
			waiting++
		}
	}
	for k := range n {
		if s+k*r.iv > t {
			waiting++
		}
	}
	if !force && (s-t > r.maxWait || waiting > r.burst) {
		return false, 0
	}
	for k := range n {
		r.slots = append(r.slots, s+k*r.iv)
	}
	return true, s - t
}

func (r *lqRef) take(t, n int64) Decision {
	r.last = max(t, r.last)
	d := Decision{Limit: r.burst}
	if n-1 > r.burst {
		d.RetryAfter = MaxRetry
	} else if ok, wait := r.admit(t, n, false); ok {
		d.Allowed, d.Wait = true, time.Duration(wait)
	} else {
		for d.RetryAfter = 1; ; d.RetryAfter++ {
			if ok, _ := r.clone().admit(r.last+int64(d.RetryAfter), n, false); ok {
				break
			}
		}
	}
	for c := r.clone(); d.Remaining <= r.burst+1; d.Remaining++ {
		if ok, _ := c.admit(r.last, 1, false); !ok {
			break
		}
	}
	d.ResetAt = unix(r.last)
	if len(r.slots) > 0 {
		d.ResetAt = unix(max(r.last, r.slots[len(r.slots)-1]+r.iv))
	}
	return d
}

func TestLeakyQueueMatchesReference(t *testing.T) {
	var seen [2]int // rejected, admitted
	waited := 0
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1f))
		iv, lim := 1+rng.Int64N(40), 1+rng.Int64N(5)
		l := Limit{Algorithm: LeakyQueue, Limit: lim, Period: time.Duration(iv * lim), Burst: rng.Int64N(8),
			MaxWait: time.Duration(rng.Int64N(10 * iv))}
		now := nanos(tbT0)
		q := tbNew(t, l, unix(now))
		ref := &lqRef{iv: iv, burst: l.Capacity(), maxWait: int64(l.MaxWait), last: now}
		var proceed []int64 // when each admitted request proceeds, and its hits
		var sizes []int64
		for i := range 300 {
			now += tbRandGap(rng, l)
			n := rng.Int64N(l.Capacity() + 3)
			if rng.IntN(30) == 0 {
				q.Drain(unix(now), n)
				ref.admit(now, n, true)
				continue
			}
			got, _ := q.Take(unix(now), n)
			want := ref.take(now, n)
			if !tbSameDecision(got, want) {
				t.Fatalf("seed %d %+v step %d take %d at +%dns: got %s, want %s", seed, l, i, n, now-nanos(tbT0), tbFmt(got), tbFmt(want))
			}
			seen[tbB2i(got.Allowed)]++
			if got.Wait > 0 {
				waited++
			}
			if got.Allowed && n > 0 {
				proceed = append(proceed, ref.last+int64(got.Wait))
				sizes = append(sizes, n)
			}
		}
		// Callers proceed in order, each request n intervals after the one before.
		for k := 1; k < len(proceed); k++ {
			if proceed[k] < proceed[k-1]+sizes[k-1]*iv {
				t.Fatalf("seed %d: request %d proceeds at %d, %d after the previous (%d hits)", seed, k, proceed[k], proceed[k]-proceed[k-1], sizes[k-1])
			}
		}
	}
	if seen[0] < 5000 || seen[1] < 5000 || waited < 5000 {
		t.Errorf("rejected %d, admitted %d, waited %d: the sequences do not exercise all", seen[0], seen[1], waited)
	}
}

// Reconfigure keeps the schedule: waiters keep their slots, later requests
// get the new interval.
func TestLeakyQueueReconfigure(t *testing.T) {
	const ms = time.Millisecond
	q := tbNew(t, Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 5, MaxWait: time.Second}, tbT0)
	q.Take(tbT0, 3) // slots at 0, 100, 200ms; next free at 300ms
	if err := q.Reconfigure(tbT0.Add(50*ms), Limit{Algorithm: LeakyQueue, Limit: 20, Period: time.Second, Burst: 2, MaxWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	tbRun(t, q, []tbStep{
		{name: "50ms: 250ms backlog is 5 slots of 50ms, over 2", at: 50 * ms, hits: 1, retry: 150 * ms, reset: 300 * ms},
		{name: "200ms: waits for the old slot", at: 200 * ms, hits: 1, allowed: true, wait: 100 * ms, reset: 350 * ms},
		{name: "200ms: a third waiter is one too many", at: 200 * ms, hits: 1, retry: 50 * ms, reset: 350 * ms},
		{name: "250ms: then 50ms apart", at: 250 * ms, hits: 1, allowed: true, wait: 100 * ms, reset: 400 * ms},
	})
	// A queue merged with another keeps the later schedule.
	a := tbNew(t, Limit{Algorithm: LeakyQueue, Limit: 10, Period: time.Second, Burst: 5, MaxWait: time.Second}, tbT0)
	b := a.Clone()
	a.Take(tbT0, 2)
	b.Take(tbT0, 4)
	if err := a.Merge(tbT0, b); err != nil {
		t.Fatal(err)
	}
	tbRun(t, a, []tbStep{{name: "merged: behind 4", hits: 1, allowed: true, wait: 400 * ms, remaining: 1, reset: 500 * ms}})
}

// Every call validates its arguments and a failed call changes nothing.
func TestTokenLeakyGCRAErrors(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyMeter, GCRA, LeakyQueue} {
		b := tbNew(t, Limit{Algorithm: alg, Limit: 5, Period: time.Second, MaxWait: time.Hour}, tbT0)
		if _, err := b.Take(tbT0, -1); !errors.Is(err, ErrNegativeHits) {
			t.Errorf("%v Take(-1): got %v, want ErrNegativeHits", alg, err)
		}
		if err := b.Drain(tbT0, -1); !errors.Is(err, ErrNegativeHits) {
			t.Errorf("%v Drain(-1): got %v, want ErrNegativeHits", alg, err)
		}
		if err := b.Refund(tbT0, -1); !errors.Is(err, ErrNegativeHits) {
			t.Errorf("%v Refund(-1): got %v, want ErrNegativeHits", alg, err)
		}
		var le *LimitError
		if err := b.Reconfigure(tbT0, Limit{Algorithm: alg, Period: time.Second}); !errors.As(err, &le) || le.Field != "limit" {
			t.Errorf("%v Reconfigure(invalid): got %v, want *LimitError on limit", alg, err)
		}
		if err := b.Reconfigure(tbT0, Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Second}); !errors.Is(err, ErrMismatch) {
			t.Errorf("%v Reconfigure(other algorithm): got %v, want ErrMismatch", alg, err)
		}
		for _, other := range []Algorithm{TokenBucket, LeakyMeter, GCRA, LeakyQueue} {
			o := tbNew(t, Limit{Algorithm: other, Limit: 5, Period: time.Second}, tbT0)
			if err := b.Merge(tbT0, o); (err != nil) != (other != alg) || (err != nil && !errors.Is(err, ErrMismatch)) {
				t.Errorf("%v Merge(%v): got %v", alg, other, err)
			}
		}
		fresh := int64(5)
		if alg == LeakyQueue {
			fresh = 6 // one proceeds, Burst queue
		}
		if d, _ := b.Take(tbT0, 0); d.Remaining != fresh || !d.Allowed {
			t.Errorf("%v: failed calls changed the state: %+v", alg, d)
		}
	}
}

// Idle, Clone, AppendBinary and Decode, for the four algorithms.
func TestTokenLeakyGCRAIdleCloneEncode(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: TokenBucket, Limit: 7, Period: 3 * time.Second, Burst: 9},
		{Algorithm: LeakyMeter, Limit: 7, Period: 3 * time.Second},
		{Algorithm: GCRA, Limit: 7, Period: 3 * time.Second, Burst: 2},
		{Algorithm: LeakyQueue, Limit: 7, Period: 3 * time.Second, Burst: 3, MaxWait: time.Minute},
	} {
		b := tbNew(t, l, tbT0)
		if !b.Idle(tbT0) {
			t.Errorf("%v: fresh bucket not idle", l.Algorithm)
		}
		b.Take(tbT0, 2)
		if b.Idle(tbT0.Add(800 * time.Millisecond)) {
			t.Errorf("%v: idle 800ms after taking 2", l.Algorithm)
		}
		if !b.Idle(tbT0.Add(time.Hour)) {
			t.Errorf("%v: not idle at +1h", l.Algorithm)
		}
		c := b.Clone()
		enc, err := b.AppendBinary([]byte("prefix"))
		if err != nil || !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatalf("%v: AppendBinary: %v", l.Algorithm, err)
		}
		dec, err := Decode(enc[len("prefix"):])
		if err != nil {
			t.Fatalf("%v: Decode: %v", l.Algorithm, err)
		}
		if dec.Config() != l {
			t.Errorf("%v: decoded config %+v", l.Algorithm, dec.Config())
		}
		b.Take(tbT0.Add(time.Second), 1) // must not affect the clone nor the decoded copy
		for name, x := range map[string]Bucket{"clone": c, "decoded": dec} {
			for _, at := range []time.Duration{0, time.Second, 2 * time.Second, time.Hour} {
				want := tbNew(t, l, tbT0)
				want.Take(tbT0, 2)
				dw, _ := want.Take(tbT0.Add(at), 1)
				dg, _ := x.Clone().Take(tbT0.Add(at), 1)
				if !tbSameDecision(dg, dw) {
					t.Errorf("%v %s at +%v: got %s, want %s", l.Algorithm, name, at, tbFmt(dg), tbFmt(dw))
				}
			}
		}
		// Truncations and out-of-range states are corrupt.
		for i := len(enc) - 1; i > len("prefix"); i-- {
			if _, err := Decode(enc[len("prefix"):i]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v: Decode of %d bytes: got %v, want ErrCorrupt", l.Algorithm, i-len("prefix"), err)
			}
		}
	}
	bad := appendVarint(appendLimit(nil, Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Second}), 6)
	bad = appendVarint(appendUvarint(bad, 0), 0)
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("token bucket above capacity: got %v, want ErrCorrupt", err)
	}
	bad = appendVarint(appendLimit(nil, Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Second}), 1)
	bad = appendVarint(appendUvarint(bad, uint64(time.Second)), 0)
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("token fraction of a whole token: got %v, want ErrCorrupt", err)
	}
}

func FuzzLeaky(f *testing.F) {
	tbFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, lim, per, burst, maxWait, start, gap, h1, h2 int64) {
		tbFuzzCheck(t, LeakyMeter, lim, per, burst, maxWait, start, gap, h1, h2)
		tbFuzzCheck(t, LeakyQueue, lim, per, burst, maxWait, start, gap, h1, h2)
	})
}

func BenchmarkTakeLeakyMeter(b *testing.B) { tbBenchTake(b, LeakyMeter) }

func BenchmarkTakeLeakyQueue(b *testing.B) { tbBenchTake(b, LeakyQueue) }
