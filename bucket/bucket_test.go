package bucket

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// This file holds the contract every algorithm keeps, tested as one table
// over Algorithms(): peeks consume nothing, a clock going backwards is no
// time elapsed, clones are independent, a fresh bucket is idle, Take does not
// allocate, Drain counts past the limit, and Merge keeps the most consumed
// view.

// ctT0 is the first instant of every contract test.
var ctT0 = time.Unix(1_700_000_000, 0)

// ctStep is the time between two calls of the contract workload: 20 calls a
// second against 10 per second, so about half are admitted.
const ctStep = 50 * time.Millisecond

// ctLimit returns a sensible limit of a: 10 per second, with each
// algorithm's options set. An algorithm without a case gets the zero Limit,
// so that New fails and the tests say which one was forgotten.
func ctLimit(a Algorithm) Limit {
	l := Limit{Algorithm: a, Limit: 10, Period: time.Second}
	switch a {
	case TokenBucket, LeakyMeter, GCRA:
		l.Burst = 5
	case LeakyQueue:
		l.Burst, l.MaxWait = 3, 300*time.Millisecond
	case FixedWindow, SlidingCounter, Concurrency:
	case SlidingLog:
		l.MinGap = 10 * time.Millisecond
	case SmoothBursty:
		l.Burst, l.MaxWait = 5, 50*time.Millisecond
	case SmoothWarmingUp:
		l.WarmUp, l.MaxWait = 2*time.Second, 500*time.Millisecond
	default:
		return Limit{}
	}
	return l
}

func ctNew(t testing.TB, a Algorithm, now time.Time) Bucket {
	t.Helper()
	b, err := New(ctLimit(a), now)
	if err != nil {
		t.Fatalf("%v: New: %v", a, err)
	}
	return b
}

// ctEncode returns b's wire form.
func ctEncode(t testing.TB, b Bucket) []byte {
	t.Helper()
	enc, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary: %v", err)
	}
	return enc
}

// ctTake takes hits and fails the test on an error.
func ctTake(t testing.TB, b Bucket, now time.Time, hits int64) Decision {
	t.Helper()
	d, err := b.Take(now, hits)
	if err != nil {
		t.Fatalf("Take(%v, %d): %v", now.Sub(ctT0), hits, err)
	}
	return d
}

// ctDrive plays n calls of the contract workload on b from start: one or two
// hits every ctStep (and, on a semaphore, named leases acquired and
// released), and returns the instant of the last call.
func ctDrive(t testing.TB, b Bucket, start time.Time, n int) time.Time {
	t.Helper()
	now := start
	for i := range n {
		now = start.Add(time.Duration(i) * ctStep)
		ctTake(t, b, now, int64(1+i%3/2))
		if s, ok := b.(Semaphore); ok && i%4 == 0 {
			if _, err := s.Acquire(now, "lease-"+strconv.Itoa(i%3), 1); err != nil {
				t.Fatal(err)
			}
			s.Release(now, "lease-"+strconv.Itoa((i+1)%3))
		}
	}
	return now
}

func ctSame(a, b Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.ResetAt.Equal(b.ResetAt) && a.RetryAfter == b.RetryAfter && a.Wait == b.Wait
}

func ctFmt(d Decision) string {
	return fmt.Sprintf("{allowed %v limit %d remaining %d reset %+v retry %v wait %v}",
		d.Allowed, d.Limit, d.Remaining, d.ResetAt.Sub(ctT0), d.RetryAfter, d.Wait)
}

func TestContractTableCoversEveryAlgorithm(t *testing.T) {
	for _, a := range Algorithms() {
		b := ctNew(t, a, ctT0)
		if b.Config() != ctLimit(a) {
			t.Errorf("%v: Config() = %+v, want %+v", a, b.Config(), ctLimit(a))
		}
		_, isSem := b.(Semaphore)
		if isSem != (a == Concurrency) {
			t.Errorf("%v: implements Semaphore: %v", a, isSem)
		}
		d := ctTake(t, b, ctT0, 0)
		if !d.Allowed || d.RetryAfter != 0 || d.Wait != 0 || d.Remaining < 0 {
			t.Errorf("%v: a fresh peek: %s", a, ctFmt(d))
		}
	}
}

// A peek (hits = 0) consumes nothing. At the latest instant seen it leaves
// the state byte for byte as it was. At a later instant every algorithm
// records the time, and some bring their state up to it: TokenBucket and
// LeakyMeter refill, FixedWindow and SlidingCounter roll their windows,
// SlidingLog and Concurrency expire old entries, the smooth limiters resync
// stored permits; GCRA and LeakyQueue only record the instant. None of that
// is consumption: a bucket that peeked and one that did not give the same
// decisions ever after and end in the same state.
func TestContractPeekConsumesNothing(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			last := ctDrive(t, b, ctT0, 7)
			before := ctEncode(t, b)
			for _, at := range []time.Time{last, last.Add(-time.Second), ctT0, time.Unix(0, 0)} {
				ctTake(t, b, at, 0)
				if s, ok := b.(Semaphore); ok {
					if _, err := s.Acquire(at, "never-held", 0); err != nil {
						t.Fatal(err)
					}
				}
				if after := ctEncode(t, b); !bytes.Equal(after, before) {
					t.Fatalf("a peek at %v (latest seen %v) changed the state:\n%x\n%x", at.Sub(ctT0), last.Sub(ctT0), before, after)
				}
			}
			for _, gap := range []time.Duration{1, ctStep / 3, 2 * time.Second, time.Hour} {
				peeked, plain := b.Clone(), b.Clone()
				ctTake(t, peeked, last.Add(gap), 0)
				now := last.Add(gap)
				for i := range 20 {
					now = now.Add(ctStep / 2)
					hits := int64(1 + i%2)
					dp, dn := ctTake(t, peeked, now, hits), ctTake(t, plain, now, hits)
					if !ctSame(dp, dn) {
						t.Fatalf("gap %v call %d: after a peek %s, without %s", gap, i, ctFmt(dp), ctFmt(dn))
					}
				}
				if ep, en := ctEncode(t, peeked), ctEncode(t, plain); !bytes.Equal(ep, en) {
					t.Errorf("gap %v: states differ:\n%x\n%x", gap, ep, en)
				}
			}
		})
	}
}

// A clock going backwards is no time elapsed: every call at an earlier
// instant answers as at the latest instant seen, never panics, never gives
// more Remaining than at that instant, and never moves the bucket's time
// back.
func TestContractBackwardsClock(t *testing.T) {
	past := []time.Time{ctT0.Add(-time.Nanosecond), ctT0.Add(-time.Hour), time.Unix(0, 0), time.Unix(0, -1<<63)}
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			last := ctDrive(t, b, ctT0, 9)
			for _, at := range past {
				for _, hits := range []int64{0, 1, 3, 100} {
					ref := b.Clone()
					want := ctTake(t, ref, last, hits)
					got := ctTake(t, b, at, hits)
					if !ctSame(got, want) || got.Remaining > want.Remaining {
						t.Fatalf("Take(%v, %d) back from %v: got %s, want as at the latest instant %s",
							at.Sub(ctT0), hits, last.Sub(ctT0), ctFmt(got), ctFmt(want))
					}
					if got, want := ctEncode(t, b), ctEncode(t, ref); !bytes.Equal(got, want) {
						t.Fatalf("Take(%v, %d): state differs from a Take at the latest instant", at.Sub(ctT0), hits)
					}
				}
				// Every other call: no panic, no error, and the bucket still
				// answers as at its latest instant.
				if err := b.Drain(at, 1); err != nil {
					t.Fatal(err)
				}
				if err := b.Refund(at, 1); err != nil {
					t.Fatal(err)
				}
				if err := b.Reconfigure(at, b.Config()); err != nil {
					t.Fatal(err)
				}
				if err := b.Merge(at, b.Clone()); err != nil {
					t.Fatal(err)
				}
				_ = b.Idle(at)
				ref := b.Clone()
				if got, want := ctTake(t, b, at, 0), ctTake(t, ref, last, 0); !ctSame(got, want) {
					t.Fatalf("after calls at %v: peek %s, at the latest instant %s", at.Sub(ctT0), ctFmt(got), ctFmt(want))
				}
			}
		})
	}
}

// A Clone starts equal and then goes its own way: calls on either leave the
// other unchanged.
func TestContractCloneIndependence(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			last := ctDrive(t, b, ctT0, 6)
			c := b.Clone()
			orig := ctEncode(t, b)
			if got := ctEncode(t, c); !bytes.Equal(got, orig) {
				t.Fatalf("clone differs:\n%x\n%x", orig, got)
			}
			// Work the clone hard; the original must not move.
			mutate := func(x Bucket, now time.Time) {
				ctDrive(t, x, now, 12)
				x.Drain(now.Add(time.Second), 3)
				x.Refund(now.Add(time.Second), 1)
				l := x.Config()
				l.Limit *= 2
				if err := x.Reconfigure(now.Add(time.Second), l); err != nil {
					t.Fatal(err)
				}
				if s, ok := x.(Semaphore); ok {
					s.Acquire(now.Add(time.Second), "clone-only", 2)
				}
			}
			mutate(c, last.Add(ctStep))
			if got := ctEncode(t, b); !bytes.Equal(got, orig) {
				t.Fatalf("calls on the clone changed the original:\n%x\n%x", orig, got)
			}
			// And the other way round.
			cs := ctEncode(t, c)
			mutate(b, last.Add(ctStep))
			if got := ctEncode(t, c); !bytes.Equal(got, cs) {
				t.Fatalf("calls on the original changed the clone:\n%x\n%x", cs, got)
			}
			// A clone of a clone, merged into the clone, changes nothing else.
			cc := c.Clone()
			if err := c.Merge(last.Add(time.Minute), cc); err != nil {
				t.Fatal(err)
			}
			if got := ctEncode(t, cc); !bytes.Equal(got, cs) {
				t.Errorf("Merge changed its argument")
			}
		})
	}
}

// A fresh bucket is Idle, a used one is not, and once it has had time to
// recover it is Idle again — except SmoothBursty, which is Idle only while
// it stores no permits: a fresh one stores none (Guava's initial state), and
// one that idled has saved up to maxPermits and would admit a burst that a
// fresh one would not (smooth.go). Idle never changes the state.
func TestContractIdle(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			if !b.Idle(ctT0) {
				t.Errorf("fresh: not idle at its creation")
			}
			if got, want := b.Idle(ctT0.Add(time.Hour)), a != SmoothBursty; got != want {
				t.Errorf("fresh, an hour later: idle %v, want %v", got, want)
			}
			ctTake(t, b, ctT0, 2)
			enc := ctEncode(t, b)
			if b.Idle(ctT0) {
				t.Errorf("idle right after a Take of 2")
			}
			if got, want := b.Idle(ctT0.Add(time.Hour)), a != SmoothBursty; got != want {
				t.Errorf("an hour after a Take: idle %v, want %v", got, want)
			}
			if got := ctEncode(t, b); !bytes.Equal(got, enc) {
				t.Errorf("Idle changed the state")
			}
		})
	}
}

// Take allocates nothing in steady state, for every algorithm (the sliding
// log and the semaphore grow their rings during warm-up, up to Limit runs).
func TestContractZeroAllocs(t *testing.T) {
	for _, a := range Algorithms() {
		b := ctNew(t, a, ctT0)
		now := ctT0
		allowed := 0
		take := func() {
			now = now.Add(ctStep)
			if d, _ := b.Take(now, 1); d.Allowed {
				allowed++
			}
		}
		for range 2000 {
			take()
		}
		if n := testing.AllocsPerRun(1000, take); n != 0 {
			t.Errorf("%v: %v allocs per Take, want 0", a, n)
		}
		if allowed == 0 || allowed == 2000+1001 {
			t.Errorf("%v: %d of 3001 admitted: the workload does not exercise both answers", a, allowed)
		}
	}
}

// Hits drained past the limit are counted: the next Take is rejected and
// Remaining is 0, until time pays the debt.
func TestContractDrainPastLimit(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			l := b.Config()
			if err := b.Drain(ctT0, 2*l.Limit+2); err != nil {
				t.Fatal(err)
			}
			for _, hits := range []int64{0, 1} {
				d := ctTake(t, b, ctT0, hits)
				if hits > 0 && d.Allowed || d.Remaining != 0 || (!d.Allowed && d.RetryAfter <= 0) {
					t.Errorf("Take(%d) after draining %d: %s", hits, 2*l.Limit+2, ctFmt(d))
				}
			}
			d := ctTake(t, b, ctT0, 1)
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter == MaxRetry {
				t.Fatalf("rejected with RetryAfter %v, want a finite positive wait", d.RetryAfter)
			}
			// The debt is paid by RetryAfter (plus MaxWait for the shaping
			// algorithms, which admit up to MaxWait early), not before a
			// Period has passed for the algorithms without debt.
			at := ctT0.Add(d.RetryAfter)
			if got := ctTake(t, b, at, 1); !got.Allowed {
				t.Errorf("at RetryAfter %v: still rejected %s", d.RetryAfter, ctFmt(got))
			}
			// Draining is not capped at the limit: twice as much takes longer.
			c := ctNew(t, a, ctT0)
			c.Drain(ctT0, 4*l.Limit+4)
			if dc := ctTake(t, c, ctT0, 1); dc.RetryAfter < d.RetryAfter {
				t.Errorf("drain %d: retry %v, drain %d: retry %v", 2*l.Limit+2, d.RetryAfter, 4*l.Limit+4, dc.RetryAfter)
			}
		})
	}
}

// Merge keeps the most consumed view: merging a state that took more never
// raises Remaining above either side's, merging a fresh state or the bucket
// itself changes no decision, and merging another algorithm is ErrMismatch.
func TestContractMerge(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b := ctNew(t, a, ctT0)
			last := ctDrive(t, b, ctT0, 3)
			o := b.Clone()
			ctTake(t, o, last.Add(ctStep), 3)
			o.Drain(last.Add(ctStep), 2)
			at := last.Add(2 * ctStep)
			rb := ctTake(t, b.Clone(), at, 0).Remaining
			ro := ctTake(t, o.Clone(), at, 0).Remaining
			if err := b.Merge(at, o); err != nil {
				t.Fatal(err)
			}
			if r := ctTake(t, b.Clone(), at, 0).Remaining; r > min(rb, ro) {
				t.Errorf("merged a more consumed state: remaining %d, before %d and %d", r, rb, ro)
			}
			// Merging the less consumed side into the more consumed one changes
			// nothing either.
			for name, x := range map[string]Bucket{"itself": b, "a clone": b.Clone(), "a fresh state": ctNew(t, a, ctT0)} {
				ref := b.Clone()
				if err := b.Merge(at, x); err != nil {
					t.Fatalf("Merge(%s): %v", name, err)
				}
				for i, dt := range []time.Duration{0, ctStep, time.Second, time.Hour} {
					got, want := ctTake(t, b.Clone(), at.Add(dt), 1), ctTake(t, ref.Clone(), at.Add(dt), 1)
					if !ctSame(got, want) {
						t.Errorf("Merge(%s): take %d at +%v: got %s, want %s", name, i, dt, ctFmt(got), ctFmt(want))
					}
				}
			}
			for _, other := range Algorithms() {
				if other == a {
					continue
				}
				before := ctEncode(t, b)
				if err := b.Merge(at, ctNew(t, other, ctT0)); !errors.Is(err, ErrMismatch) {
					t.Errorf("Merge(%v) = %v, want ErrMismatch", other, err)
				}
				if !bytes.Equal(ctEncode(t, b), before) {
					t.Errorf("a failed Merge(%v) changed the state", other)
				}
			}
		})
	}
}

// ctBenchLimit is the side-by-side workload of BenchmarkRate for every
// algorithm: 500 per second, burst 50 where there is one, MaxWait 50ms for
// the shaping algorithms, a warm-up of a second; one call every millisecond.
func ctBenchLimit(a Algorithm) Limit {
	l := Limit{Algorithm: a, Limit: 500, Period: time.Second}
	switch a {
	case TokenBucket, LeakyMeter, GCRA:
		l.Burst = 50
	case LeakyQueue, SmoothBursty:
		l.Burst, l.MaxWait = 50, 50*time.Millisecond
	case SmoothWarmingUp:
		l.WarmUp, l.MaxWait = time.Second, 50*time.Millisecond
	}
	return l
}

// BenchmarkTakeAll times Take, one call every millisecond, for every
// algorithm in one table.
func BenchmarkTakeAll(b *testing.B) {
	for _, a := range Algorithms() {
		b.Run(a.String(), func(b *testing.B) {
			bk, err := New(ctBenchLimit(a), ctT0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			now, allowed := ctT0, 0
			for b.Loop() {
				now = now.Add(time.Millisecond)
				if d, _ := bk.Take(now, 1); d.Allowed {
					allowed++
				}
			}
			ctSink = allowed
		})
	}
}

var ctSink int

// TestStateSizes logs, for docs/algorithms.md, the memory of each state (the
// struct, without what it points to) and the length of a fresh state's wire
// form under the contract limit; and checks that the wire form stays
// compact.
func TestStateSizes(t *testing.T) {
	structs := map[Algorithm]uintptr{
		TokenBucket:     unsafe.Sizeof(tokenBucket{}),
		LeakyMeter:      unsafe.Sizeof(leakyMeter{}),
		LeakyQueue:      unsafe.Sizeof(leakyQueue{}),
		FixedWindow:     unsafe.Sizeof(fixedWindow{}),
		SlidingLog:      unsafe.Sizeof(slidingLog{}),
		SlidingCounter:  unsafe.Sizeof(slidingCounter{}),
		GCRA:            unsafe.Sizeof(gcra{}),
		Concurrency:     unsafe.Sizeof(concurrency{}),
		SmoothBursty:    unsafe.Sizeof(smoothLimiter{}),
		SmoothWarmingUp: unsafe.Sizeof(smoothLimiter{}),
	}
	t.Logf("| algorithm | struct bytes | fresh wire bytes | used wire bytes |")
	for _, a := range Algorithms() {
		b := ctNew(t, a, ctT0)
		fresh := len(ctEncode(t, b))
		ctDrive(t, b, ctT0, 10)
		used := len(ctEncode(t, b))
		t.Logf("| %v | %d | %d (header %d) | %d |", a, structs[a], fresh, len(appendLimit(nil, b.Config())), used)
		if fresh > 64 {
			t.Errorf("%v: a fresh state takes %d bytes on the wire", a, fresh)
		}
	}
	t.Logf("per sliding-log entry: %d bytes in memory", unsafe.Sizeof(slEntry{}))
	t.Logf("per named lease: %d bytes + id + map entry", unsafe.Sizeof(ccLease{}))
}
