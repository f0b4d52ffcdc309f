package middleware_test

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// manualClock is a Clock the test sets.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// fakeChecker decides requests on real buckets held in memory, as one node
// alone would, at the time of its clock, and records every batch. It stands
// in for the node in the tests and examples; in production the Checker is an
// embedded node or a client of a cluster.
type fakeChecker struct {
	clock *manualClock

	mu      sync.Mutex
	buckets map[string]bucket.Bucket // guarded by mu
	batches [][]rlsync.Request       // guarded by mu
	err     error                    // batch error to return, guarded by mu
	itemErr map[string]error         // per-key errors to report, guarded by mu
}

func newFakeChecker(clock *manualClock) *fakeChecker {
	return &fakeChecker{clock: clock, buckets: map[string]bucket.Bucket{}, itemErr: map[string]error{}}
}

func (f *fakeChecker) Check(_ context.Context, reqs []rlsync.Request) ([]rlsync.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, append([]rlsync.Request(nil), reqs...))
	if f.err != nil {
		return nil, f.err
	}
	now := f.clock.Now()
	out := make([]rlsync.Response, len(reqs))
	for i, r := range reqs {
		if err := f.itemErr[r.Key]; err != nil {
			out[i].Err = err
			continue
		}
		b := f.buckets[r.Key]
		switch {
		case b == nil:
			var err error
			if b, err = bucket.New(r.Limit, now); err != nil {
				out[i].Err = err
				continue
			}
			f.buckets[r.Key] = b
		case b.Config() != r.Limit:
			if b.Reconfigure(now, r.Limit) != nil {
				b, _ = bucket.New(r.Limit, now)
				f.buckets[r.Key] = b
			}
		}
		d, err := b.Take(now, r.Hits)
		out[i] = rlsync.Response{Decision: d, Owner: "fake", Mode: r.Mode, Err: err}
	}
	return out, nil
}

// takeBatches returns the batches checked so far and forgets them.
func (f *fakeChecker) takeBatches() [][]rlsync.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches
	f.batches = nil
	return b
}

func (f *fakeChecker) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeChecker) setItemErr(key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.itemErr[key] = err
}
