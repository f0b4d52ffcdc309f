package sim

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/cputime"
)

// BenchmarkSimulate measures simulated client requests per wall-clock
// second (the req/s metric) on 5 nodes and 100k keys, at 100k requests/s
// for 5 simulated seconds per iteration, for each mode and two key
// distributions: uniform (every request touches a cold key, the worst case
// for the coordination) and zipf (s = 1.1, a few hot keys). The simulator's
// own share is small; the rest is the real bucket and sync code it drives.
// req/cpu-s divides by the CPU time the process used instead (garbage
// collection included), which a busy shared machine distorts less. Each
// simulation runs its nodes on every CPU (Options.Workers); -test.cpu 1
// measures one.
func BenchmarkSimulate(b *testing.B) {
	for _, dist := range []string{"uniform", "zipf"} {
		sc := Scenario{Name: "bench", Nodes: 5, Duration: sec(5),
			Workload: Workload{Rate: 100_000, Keys: 100_000, Dist: dist}}.WithDefaults()
		for _, m := range Modes() {
			b.Run(dist+"/"+m.String(), func(b *testing.B) {
				b.ReportAllocs()
				var reqs int64
				start, cpu0 := time.Now(), cputime.Process()
				for i := 0; b.Loop(); i++ {
					r, err := Run(sc, Variant{Mode: m}, Options{Seed: uint64(i)})
					if err != nil {
						b.Fatal(err)
					}
					reqs += r.Phases[0].Requests
				}
				b.ReportMetric(float64(reqs)/time.Since(start).Seconds(), "req/s")
				if cpu := cputime.Process() - cpu0; cpu > 0 {
					b.ReportMetric(float64(reqs)/cpu.Seconds(), "req/cpu-s")
				}
			})
		}
	}
}

// BenchmarkCompare measures what a comparison of the four modes achieves
// (what `make sim` and cmd/sim run): the same 5-node, 100k-key scenarios as
// BenchmarkSimulate, one Compare of every mode per iteration, with one
// simulation per CPU at once (Options.Parallel). req/s is simulated
// requests, over all four runs, per wall-clock second.
func BenchmarkCompare(b *testing.B) {
	for _, dist := range []string{"uniform", "zipf"} {
		sc := Scenario{Name: "bench", Nodes: 5, Duration: sec(5),
			Workload: Workload{Rate: 100_000, Keys: 100_000, Dist: dist}}.WithDefaults()
		vs, _ := ParseVariants("", "")
		b.Run(dist, func(b *testing.B) {
			var reqs int64
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				rs, err := Compare([]Scenario{sc}, vs, Options{Seed: uint64(i)})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range rs {
					reqs += r.Phases[0].Requests
				}
			}
			b.ReportMetric(float64(reqs)/time.Since(start).Seconds(), "req/s")
		})
	}
}
