package ringlimit

import (
	"context"
	"fmt"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// TestFloodOfTimedOutCallsKeepsHeapBounded: three nodes in one process,
// budgets of 16 MiB each, and a call timeout (--check-timeout) of 20 ms
// that a call of 1000 new keys misses once the core falls behind: 8
// clients send 400 such calls through n1 back to back. The live heap beyond
// the keys' charge (the nodes' base, the queues, the clients' calls) stays
// under 32 MiB a node: 48 to 64 MiB in all were measured. Before, a call
// that timed out stayed in the driver's queue (up to 4096 calls) and was
// still decided: 142 MiB beyond the charge, and the test took 124 s
// instead of 2 to 5, its nodes' shutdown waiting for the core to decide
// every call queued (issue 16: the flooded node of TestKeyFlood was
// OOM-killed).
func TestFloodOfTimedOutCallsKeepsHeapBounded(t *testing.T) {
	nodes := startCluster(t, 3, func(c *Config) {
		c.Sync.MaxKeyBytes = 16 << 20
		c.API.CheckTimeout = 20 * time.Millisecond
		c.Sync.RequestTimeout = 10 * time.Millisecond
	})
	cl := dial(t, nodes[0])
	const calls, items = 400, 1000
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				c := next.Add(1) - 1
				if c >= calls {
					return
				}
				req := &ringlimitv1.CheckRequest{}
				for k := range items {
					req.Items = append(req.Items, &ringlimitv1.CheckItem{Name: "flood", UniqueKey: fmt.Sprintf("k%08d", int(c)*items+k),
						Hits: proto.Int64(1), Limit: 100, Period: durationpb.New(time.Hour)})
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				if _, err := cl.Check(ctx, req); err != nil {
					failed.Add(1)
				}
				cancel()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var beyond int64 // the most live heap seen beyond the keys' charge
	start := time.Now()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(100 * time.Millisecond):
		}
		rtmetrics.Read(s)
		charged := int64(0)
		for _, n := range nodes {
			charged += n.KeyBytes()
		}
		beyond = max(beyond, int64(s[0].Value.Uint64())-charged)
	}
	t.Logf("%d calls of %d new keys in %v, %d failed; live heap beyond the keys' charge at most %.1f MiB",
		calls, items, time.Since(start).Round(time.Millisecond), failed.Load(), float64(beyond)/(1<<20))
	if beyond > 3*32<<20 {
		t.Errorf("live heap beyond the keys' charge reached %.1f MiB, want at most 96 MiB (32 a node)", float64(beyond)/(1<<20))
	}
}
