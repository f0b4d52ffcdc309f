package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// outcome is what one call decided: how many items were admitted, rejected,
// answered with an error (in the answer, not of the call), or decided by a
// partition policy (ringlimit's degraded answers).
type outcome struct {
	admitted, rejected, itemErrors, degraded int64
}

// caller makes one call. Each worker has its own (it may reuse its request).
type caller func(ctx context.Context) (outcome, error)

// loadSpec bounds one load run by count and by time, whichever comes first.
type loadSpec struct {
	concurrency int
	maxCalls    int64
	duration    time.Duration
	callTimeout time.Duration
}

// loadResult is the outcome of one load run.
type loadResult struct {
	Calls           int64   `json:"calls"`
	RPCErrors       int64   `json:"rpc_errors"`
	Admitted        int64   `json:"admitted"`
	Rejected        int64   `json:"rejected"`
	ItemErrors      int64   `json:"item_errors"`
	Degraded        int64   `json:"degraded"` // ringlimit items decided by the partition policy
	ElapsedSec      float64 `json:"elapsed_s"`
	CallsPerSec     float64 `json:"calls_per_s"`
	DecisionsPerSec float64 `json:"decisions_per_s"`
	P50ms           float64 `json:"p50_ms"`
	P90ms           float64 `json:"p90_ms"`
	P99ms           float64 `json:"p99_ms"`
	P999ms          float64 `json:"p999_ms"`
}

// runLoad runs spec.concurrency workers, each calling through its own
// caller from newCaller, until spec.maxCalls calls are made or
// spec.duration passes. A call still in flight when the time is up is not
// counted.
func runLoad(ctx context.Context, spec loadSpec, newCaller func(worker int) caller) loadResult {
	ctx, cancel := context.WithTimeout(ctx, spec.duration)
	defer cancel()
	var (
		budget atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex // guards the merged figures below
		res    loadResult
		lats   []time.Duration
	)
	budget.Store(spec.maxCalls)
	start := time.Now()
	end, _ := ctx.Deadline() // the calls' contexts share it
	for w := range spec.concurrency {
		call := newCaller(w)
		wg.Go(func() {
			var (
				mine  loadResult
				myLat []time.Duration
			)
			for ctx.Err() == nil && budget.Add(-1) >= 0 {
				cctx, ccancel := context.WithTimeout(ctx, spec.callTimeout)
				t0 := time.Now()
				o, err := call(cctx)
				lat := time.Since(t0)
				ccancel()
				if ctx.Err() != nil || (err != nil && !time.Now().Before(end)) {
					// The run ended during the call: not counted. (The
					// call's own context, which shares the run's deadline,
					// may report it an instant before the run's does.)
					break
				}
				mine.Calls++
				if err != nil {
					mine.RPCErrors++
					continue
				}
				myLat = append(myLat, lat)
				mine.Admitted += o.admitted
				mine.Rejected += o.rejected
				mine.ItemErrors += o.itemErrors
				mine.Degraded += o.degraded
			}
			mu.Lock()
			defer mu.Unlock()
			res.Calls += mine.Calls
			res.RPCErrors += mine.RPCErrors
			res.Admitted += mine.Admitted
			res.Rejected += mine.Rejected
			res.ItemErrors += mine.ItemErrors
			res.Degraded += mine.Degraded
			lats = append(lats, myLat...)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.ElapsedSec = elapsed.Seconds()
	ok := res.Calls - res.RPCErrors
	if elapsed > 0 {
		res.CallsPerSec = float64(ok) / elapsed.Seconds()
		res.DecisionsPerSec = float64(res.Admitted+res.Rejected) / elapsed.Seconds()
	}
	slices.Sort(lats)
	res.P50ms = ms(quantile(lats, 0.50))
	res.P90ms = ms(quantile(lats, 0.90))
	res.P99ms = ms(quantile(lats, 0.99))
	res.P999ms = ms(quantile(lats, 0.999))
	return res
}

// quantile returns the q-quantile of sorted (the value of rank ceil(q*n)),
// or 0 when it is empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	r := int(q * float64(n))
	if float64(r) < q*float64(n) {
		r++
	}
	r = min(max(r, 1), n)
	return sorted[r-1]
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
