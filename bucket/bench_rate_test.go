package bucket

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// rateWorkloads are the side-by-side workloads of TokenBucket and
// golang.org/x/time/rate: a limit per second, a burst, one call every step.
var rateWorkloads = []struct {
	name  string
	limit int64
	burst int64
	step  time.Duration
}{
	{"half", 500, 50, time.Millisecond},     // about half admitted
	{"allowed", 2000, 50, time.Millisecond}, // every call admitted
	{"rejected", 100, 10, time.Millisecond}, // nine in ten rejected
}

// TokenBucket.Take and rate.Limiter.AllowN, both starting full and fed the
// same instants, admit the same calls, so the benchmark compares equal work.
func TestTokenBucketAgreesWithXTimeRate(t *testing.T) {
	for _, w := range rateWorkloads {
		b := tbNew(t, Limit{Algorithm: TokenBucket, Limit: w.limit, Period: time.Second, Burst: w.burst}, tbT0)
		lim := rate.NewLimiter(rate.Limit(w.limit), int(w.burst))
		admitted := 0
		for i := range 20000 {
			now := tbT0.Add(time.Duration(i) * w.step)
			d, _ := b.Take(now, 1)
			if ok := lim.AllowN(now, 1); ok != d.Allowed {
				t.Fatalf("%s step %d: Take %v, AllowN %v", w.name, i, d.Allowed, ok)
			}
			if d.Allowed {
				admitted++
			}
		}
		t.Logf("%s: %d of 20000 admitted", w.name, admitted)
	}
}

// BenchmarkRate runs TokenBucket.Take and x/time/rate's Limiter.AllowN on the
// same workloads, side by side. AllowN gets the time as an argument, so
// neither reads the clock; AllowN also takes the Limiter's mutex, which a
// Bucket leaves to its caller.
func BenchmarkRate(b *testing.B) {
	for _, w := range rateWorkloads {
		b.Run(w.name+"/xtime_AllowN", func(b *testing.B) {
			lim := rate.NewLimiter(rate.Limit(w.limit), int(w.burst))
			b.ReportAllocs()
			now, admitted := tbT0, 0
			for b.Loop() {
				now = now.Add(w.step)
				if lim.AllowN(now, 1) {
					admitted++
				}
			}
			tbSink = admitted
		})
		b.Run(w.name+"/TokenBucket_Take", func(b *testing.B) {
			bk, err := New(Limit{Algorithm: TokenBucket, Limit: w.limit, Period: time.Second, Burst: w.burst}, tbT0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			now, admitted := tbT0, 0
			for b.Loop() {
				now = now.Add(w.step)
				if d, _ := bk.Take(now, 1); d.Allowed {
					admitted++
				}
			}
			tbSink = admitted
		})
	}
}
