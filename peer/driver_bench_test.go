package peer

import (
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/cputime"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// BenchmarkDriverInputs: checks of one owned key from 8 producers through
// a Driver, as a node's gRPC handlers offer them; cpu-ns/op is the
// process's CPU time per check (the driver's loop, the producers' offers
// and wake-ups, the core's decision).
func BenchmarkDriverInputs(b *testing.B) {
	cfg := rlsync.DefaultConfig()
	cfg.Self = "a"
	core, err := rlsync.NewNode(cfg, nopSender{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDriver(core, DriverConfig{TickInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	d.Start(b.Context())
	defer d.Close()
	if err := d.Do(b.Context(), func(now time.Time) { core.SetMembers(now, []string{"a"}) }); err != nil {
		b.Fatal(err)
	}
	const producers = 8
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := cputime.Process()
	for p := range producers {
		wg.Go(func() {
			req := []check.Request{{Key: "k", Hits: 1, Mode: check.ModeOwner,
				Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1 << 40, Period: time.Second}}}
			resp := make([]check.Response, 1)
			done := make(chan struct{}, 1)
			signal := func() { done <- struct{}{} }
			for i := p; i < b.N; i += producers {
				if err := d.Check(req, resp, signal); err != nil {
					b.Error(err)
					return
				}
				<-done
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
