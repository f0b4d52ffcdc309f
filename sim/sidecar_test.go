package sim

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestSidecarScaleSmallLimits: a sidecar beside each of 100 application
// instances, keys of 20 a second (fewer than the nodes) over 100,000 keys,
// each seen rarely: the default mode refuses at most 0.1% of the checks the
// ideal limiter admits. Before, a non-owner decided a key's first checks on
// a share of 20/100 of a request: at 21 nodes and burst 20 the simulator
// measured 75.9% refused (issue #15).
func TestSidecarScaleSmallLimits(t *testing.T) {
	t.Parallel()
	sc, err := Named("healthy")
	if err != nil {
		t.Fatal(err)
	}
	sc = sc.Scale(0, 5*time.Second)
	sc.Nodes = 100
	sc.Limit.Limit = 20
	sc.Workload.Rate = 2000
	sc.Workload.Keys = 100_000
	sc.Workload.Dist = "uniform"
	r, err := Run(sc, Variant{Mode: check.ModeCached}, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Phase("all")
	t.Logf("100 nodes, 20/s, 100k keys, cached: admitted %.2f%% of the ideal, over %.2f%%, false rejections %.3f%%",
		p.AdmittedPct, p.OverPct, p.FalseRejectPct)
	if p.FalseRejectPct > 0.1 || p.OverPct > 0.1 {
		t.Errorf("seed 1: false rejections %.3f%%, over-admission %.3f%%; want both at most 0.1%%", p.FalseRejectPct, p.OverPct)
	}
}
