package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestFloodKeepsEvictedKeySpent (issue 15): a stranger's flood of fresh
// keys past MaxKeys evicts a victim's spent key (a login key of 5 a
// minute, spent by a password guesser); the key's next checks within the
// minute must not admit its limit again. Owner, cached (the single node
// owns the key) and local mode; the victim's checks come 2 s after it was
// spent, when a token bucket of 5 a minute holds 1/6 of a token.
func TestFloodKeepsEvictedKeySpent(t *testing.T) {
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeCached, check.ModeLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			nw := newTestNet(t, func(c *Config) { c.MaxKeys = 64 * 8 }, "a")
			a := nw.nodes["a"]
			victim := check.Request{Key: "login:alice", Hits: 1, Limit: perMinute(5), Mode: mode}
			for i := range 6 {
				r := checkSync(t, a, t0, victim)
				if r.Allowed != (i < 5) {
					t.Fatalf("spending: check %d allowed %v", i, r.Allowed)
				}
			}
			// The flood: 5000 fresh keys in 1 s, each of one hit under
			// a limit of 1000 a minute (its mark, if any, lapses in 60 ms).
			for i := range 5000 {
				at := t0.Add(time.Duration(i) * 200 * time.Microsecond)
				checkSync(t, a, at, check.Request{Key: fmt.Sprintf("flood%d", i), Hits: 1, Limit: perMinute(1000), Mode: mode})
			}
			if a.Metrics().Evicted.Load() == 0 {
				t.Fatal("nothing evicted")
			}
			s := a.st.shardOf(victim.Key)
			if a.st.lookup(s, victim.Key) != nil || s.local[victim.Key] != nil {
				t.Fatal("the victim's key was not evicted")
			}
			at := t0.Add(2 * time.Second)
			admitted := 0
			for range 5 {
				if checkSync(t, a, at, victim).Allowed {
					admitted++
				}
			}
			if admitted > 0 {
				t.Errorf("t0+2s: the evicted victim admitted %d of 5, want 0 (spent at t0, 5 a minute)", admitted)
			}
			// It refills at its rate from its spent state: full a minute after it
			// was spent (the mark rounded up to 65.5 µs: at t0+61s).
			admitted = 0
			for range 6 {
				if checkSync(t, a, t0.Add(61*time.Second), victim).Allowed {
					admitted++
				}
			}
			if admitted != 5 {
				t.Errorf("t0+61s: the victim admitted %d, want 5 (refilled)", admitted)
			}
			// A key never seen, checked after the flood's marks lapsed,
			// starts full.
			fresh := check.Request{Key: "login:bob", Hits: 5, Limit: perMinute(5), Mode: mode}
			if !checkSync(t, a, t0.Add(2*time.Second), fresh).Allowed {
				t.Error("a fresh key did not admit its burst")
			}
		})
	}
}

// TestMarkedStartNeverAdmitsMore: for every algorithm marked when evicted
// (evictMarkable: all but SmoothWarmingUp), a
// bucket spent in part or whole, evicted (marked) and started again from
// its mark admits, to a client that takes a hit every second for two
// minutes, never more in total than the evicted bucket itself would have:
// at each step, the cumulated admissions of the restarted bucket are at
// most the evicted one's. And a token bucket restarts with capacity −
// rate × (mark − now): 5 a minute spent at t0 and restarted at t0+30s
// holds 2.5 tokens (2 admitted at once).
func TestMarkedStartNeverAdmitsMore(t *testing.T) {
	algs := []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyMeter, bucket.LeakyQueue, bucket.FixedWindow,
		bucket.SlidingLog, bucket.SlidingCounter, bucket.GCRA, bucket.SmoothBursty, bucket.Concurrency}
	for _, alg := range algs {
		for _, spend := range []int64{1, 5, 10} {
			t.Run(fmt.Sprintf("%v/spend%d", alg, spend), func(t *testing.T) {
				st := newStore(1000, 0, 0, &Metrics{})
				l := bucket.Limit{Algorithm: alg, Limit: 10, Period: time.Minute}
				ref, err := bucket.New(l, t0)
				if err != nil {
					t.Fatal(err)
				}
				for range spend {
					_, _ = ref.Take(t0, 1)
				}
				const h = 0x1234_5678_9abc_def0
				evicted := t0.Add(3 * time.Second)
				st.markEvicted(h, ref.Clone(), evicted)
				restart := evicted.Add(time.Second)
				nb, err := bucket.New(l, restart)
				if err != nil {
					t.Fatal(err)
				}
				if at, ok := st.markedStart(h, l, restart); ok {
					nb, _ = bucket.New(l, at)
					_ = nb.Drain(at, nb.Config().Capacity())
				} else {
					t.Fatal("no mark")
				}
				var gotRef, gotNew int
				for s := range 120 {
					now := restart.Add(time.Duration(s) * time.Second)
					if d, _ := ref.Take(now, 1); d.Allowed {
						gotRef++
					}
					if d, _ := nb.Take(now, 1); d.Allowed {
						gotNew++
					}
					if gotNew > gotRef {
						t.Fatalf("restart+%ds: the restarted bucket admitted %d, the evicted one %d", s, gotNew, gotRef)
					}
				}
				t.Logf("over 2 min: restarted %d, evicted %d", gotNew, gotRef)
			})
		}
	}
	st := newStore(1000, 0, 0, &Metrics{})
	b, _ := bucket.New(perMinute(5), t0)
	_, _ = b.Take(t0, 5)
	st.markEvicted(1, b, t0.Add(time.Second))
	at, ok := st.markedStart(1, perMinute(5), t0.Add(30*time.Second))
	if !ok {
		t.Fatal("no mark")
	}
	nb, _ := bucket.New(perMinute(5), at)
	_ = nb.Drain(at, 5)
	if d, _ := nb.Take(t0.Add(30*time.Second), 0); d.Remaining != 2 {
		t.Errorf("token bucket restarted at t0+30s: remaining %d, want 2", d.Remaining)
	}
}

// TestMarks: the table of marks, step by step: an idle bucket is not
// marked; a mark lapses at its instant; a key of another fingerprint in
// the same slot is not bound by it; two live marks in a slot share it,
// the later one binding both keys.
func TestMarks(t *testing.T) {
	m := marks{size: 1024}
	const a, b = 0x0001_0000_0000_0005, 0x0002_0000_0000_0005 // one slot, two fingerprints
	st := &store{marks: m}
	fresh, _ := bucket.New(perMinute(5), t0)
	st.markEvicted(a, fresh, t0)
	if st.marks.slots != nil {
		t.Fatal("an idle bucket was marked")
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	st.marks.mark(a, t0, at(10))
	steps := []struct {
		name   string
		h      uint64
		now    time.Time
		wantOK bool
		want   time.Time
	}{
		{"a's own mark", a, at(1), true, at(10)},
		{"b, another fingerprint", b, at(1), false, time.Time{}},
		{"a's mark lapsed", a, at(11), false, time.Time{}},
	}
	for _, s := range steps {
		got, ok := st.marks.until(s.h, s.now)
		if ok != s.wantOK || ok && (got.Before(s.want) || got.Sub(s.want) >= 1<<markShift) {
			t.Errorf("%s: until = %v, %v; want %v, %v", s.name, got, ok, s.want, s.wantOK)
		}
	}
	st.marks.mark(b, at(1), at(5)) // a's mark (t0+10s) still live: shared
	for _, h := range []uint64{a, b, 0x0003_0000_0000_0005} {
		if got, ok := st.marks.until(h, at(2)); !ok || got.Before(at(10)) {
			t.Errorf("shared slot: until(%#x) = %v, %v; want t0+10s", h, got, ok)
		}
	}
}

// TestFloodMarksCostNewKeys measures what the marks cost keys never seen
// (evicted.go): 5,000 flood keys of 100 an hour, one hit each, through a
// node of MaxKeys 512 (1,024 slots) share almost every slot with a mark.
// A flood key that meets a shared mark starts as consumed as it says, takes
// its hit and, evicted, marks its slot later still: the marks reach up to
// a refill of the flood's limit (an hour here) beyond the flood. Until
// they lapse a new key whose slot holds one starts drained (its burst
// lost, refilling at its rate), and so does a new key whose slot a spent
// key evicted by the same churn marked since. Once the marks lapsed and
// the keys stored are idle (evicted unmarked), new keys start full. Run
// with -v for the figures.
func TestFloodMarksCostNewKeys(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.MaxKeys = 64 * 8 }, "a")
	a := nw.nodes["a"]
	hourly := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Hour}
	for i := range 5000 {
		checkSync(t, a, t0.Add(time.Duration(i)*200*time.Microsecond), check.Request{Key: fmt.Sprintf("flood%d", i), Hits: 1, Limit: hourly, Mode: check.ModeOwner})
	}
	burst := func(at time.Time, prefix string, n int) int {
		got := 0
		for i := range n {
			if checkSync(t, a, at, check.Request{Key: fmt.Sprintf("%s%d", prefix, i), Hits: 5, Limit: perMinute(5), Mode: check.ModeOwner}).Allowed {
				got++
			}
		}
		return got
	}
	during := burst(t0.Add(2*time.Second), "new", 1000)
	between := burst(t0.Add(40*time.Second), "next", 1000)
	later := burst(t0.Add(3*time.Minute), "later", 100)
	after := burst(t0.Add(2*time.Hour), "after", 100)
	t.Logf("new keys of 5 a minute admitting their burst of 5: %d of 1000 at t0+2s, %d of 1000 at t0+40s, %d of 100 at t0+3min, %d of 100 at t0+2h",
		during, between, later, after)
	if after != 100 {
		t.Errorf("t0+2h: %d of 100 new keys admitted their burst, want 100", after)
	}
}

// TestEvictedSemaphoreMarkedOnlyWhenHeld: a Concurrency key evicted while
// it holds permits is marked with the latest expiry of its permits, and a
// record started from the mark holds every permit until then (the cost of
// the mark, on the safe side: the evicted holders cannot release theirs),
// then frees them all; one evicted with no permit held is not marked.
func TestEvictedSemaphoreMarkedOnlyWhenHeld(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.Concurrency, Limit: 5, Period: time.Minute}
	st := newStore(1000, 0, 0, &Metrics{})
	sem, err := bucket.New(l, t0)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := sem.(bucket.Semaphore)
	if !ok {
		t.Fatal("a Concurrency bucket is not a Semaphore")
	}
	_, _ = s.Acquire(t0, "h1", 1)
	_, _ = s.Acquire(t0.Add(10*time.Second), "h2", 1) // the latest expiry: t0 + 70 s
	const held, idle = 0x1111, 0x2222
	evicted := t0.Add(20 * time.Second)
	st.markEvicted(held, sem.Clone(), evicted)
	s.Release(evicted, "h1")
	s.Release(evicted, "h2")
	st.markEvicted(idle, sem, evicted)
	if _, ok := st.markedStart(idle, l, evicted); ok {
		t.Error("a semaphore evicted with no permit held is marked")
	}
	at, ok := st.markedStart(held, l, evicted.Add(time.Second))
	if !ok {
		t.Fatal("a semaphore evicted with permits held is not marked")
	}
	b, ok := newDrained(l, at)
	if !ok {
		t.Fatal("no drained semaphore")
	}
	for _, tc := range []struct {
		at   time.Duration // after t0
		want bool
	}{{21 * time.Second, false}, {69 * time.Second, false}, {71 * time.Second, true}} {
		if d, _ := b.Take(t0.Add(tc.at), 5); d.Allowed != tc.want {
			t.Errorf("t0+%v: 5 permits allowed %v, want %v (every permit held until the latest expiry, t0+70s)", tc.at, d.Allowed, tc.want)
		}
	}
}
