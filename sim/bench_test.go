package sim

import (
	"testing"
	"time"

	rlsync "github.com/ringlimit/ringlimit/sync"
)

// BenchmarkSimulate measures simulated client requests per wall-clock
// second: 5 nodes, 100k keys, uniform keys at 100k requests/s, 5 simulated
// seconds per iteration, for each mode. Target: at least 1M requests/s.
func BenchmarkSimulate(b *testing.B) {
	sc := Scenario{Name: "bench", Nodes: 5, Duration: sec(5),
		Workload: Workload{Rate: 100_000, Keys: 100_000, Dist: "uniform"}}.WithDefaults()
	for _, m := range Modes() {
		b.Run(m.String(), func(b *testing.B) {
			b.ReportAllocs()
			var reqs int64
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				c, err := NewCluster(sc, Variant{Mode: m}, uint64(i))
				if err != nil {
					b.Fatal(err)
				}
				r, err := c.Run(nil)
				if err != nil {
					b.Fatal(err)
				}
				reqs += r.Phases[0].Requests
			}
			b.ReportMetric(float64(reqs)/time.Since(start).Seconds(), "req/s")
			b.ReportMetric(float64(reqs)/float64(b.N), "req/op")
		})
	}
	_ = rlsync.ModeCached
}
