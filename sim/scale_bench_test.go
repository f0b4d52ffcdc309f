package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/cputime"
)

// scaleNodes returns the cluster sizes of BenchmarkScale: SCALE_NODES
// (comma-separated) if set, else 5, 20, 50, 100 and 200.
func scaleNodes(b *testing.B) []int {
	s := os.Getenv("SCALE_NODES")
	if s == "" {
		return []int{5, 20, 50, 100, 200}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("SCALE_NODES=%q: want positive counts, comma-separated", s)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkScale measures the cost of coordination against the number of
// nodes (docs/bench.md, "Scale"): the healthy scenario (zipf traffic,
// 10,000 requests/s over 100,000 keys, a token bucket of 500/s) for 10
// simulated seconds at each size, in cached and owner mode, on one worker.
// It reports messages and bytes per decision, the CPU time of the process
// per simulated request (the nodes' core, the simulated network and the
// ideal limiter), the accuracy (over-admission and false rejections against
// the ideal limiter, in percent) and the view changes. One iteration is one
// run: run it with -benchtime 1x. SCALE_NODES picks the sizes.
func BenchmarkScale(b *testing.B) {
	for _, nodes := range scaleNodes(b) {
		for _, m := range []check.Mode{check.ModeCached, check.ModeOwner} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, m), func(b *testing.B) {
				sc, err := Named("healthy")
				if err != nil {
					b.Fatal(err)
				}
				sc = sc.Scale(nodes, 10*time.Second)
				sc.Workload.Rate = 10_000
				sc.Workload.Keys = 100_000
				benchRun(b, sc, Variant{Mode: m})
			})
		}
	}
}

// BenchmarkScalePartition measures a partition-half run (the cluster splits
// in two halves at a third of the run and heals at two thirds) of 20
// simulated seconds at each size, in cached mode: the CPU time of the whole
// run is what the view changes of a partition cost.
func BenchmarkScalePartition(b *testing.B) {
	for _, nodes := range scaleNodes(b) {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			sc, err := Named("partition-half")
			if err != nil {
				b.Fatal(err)
			}
			sc = sc.Scale(nodes, 20*time.Second)
			sc.Workload.Rate = 10_000
			sc.Workload.Keys = 100_000
			benchRun(b, sc, Variant{Mode: check.ModeCached})
		})
	}
}

// benchRun runs sc under v once per iteration, on one worker, and reports
// the figures of BenchmarkScale.
func benchRun(b *testing.B, sc Scenario, v Variant) {
	var (
		r    *Result
		reqs int64
		cpu  time.Duration
	)
	for i := 0; b.Loop(); i++ {
		cpu0 := cputime.Process()
		var err error
		r, err = Run(sc, v, Options{Seed: uint64(i + 1), Workers: 1})
		if err != nil {
			b.Fatal(err)
		}
		cpu += cputime.Process() - cpu0
		reqs += r.Phases[0].Requests
	}
	all := r.Phase("all")
	b.ReportMetric(all.MessagesPerDecision, "msg/dec")
	b.ReportMetric(all.BytesPerDecision, "B/dec")
	if reqs > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(reqs), "cpu-µs/req")
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/run")
	b.ReportMetric(all.OverPct, "over%")
	b.ReportMetric(all.FalseRejectPct, "rej%")
	b.ReportMetric(float64(r.ViewChanges), "views")
}
