// Package checkertest provides an in-memory stand-in for a ringlimit node,
// for the tests and examples of packages that take a Checker (envoy,
// middleware): real buckets, one per key, on a manual clock.
package checkertest

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// Clock is a clock that only the test moves. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Checker decides requests on real buckets held in memory, as one node
// alone would, at the time of its clock. It records every batch.
type Checker struct {
	clock *Clock

	mu      sync.Mutex
	buckets map[string]bucket.Bucket // guarded by mu
	batches [][]check.Request        // guarded by mu
	err     error                    // batch error to return, guarded by mu
	itemErr map[string]error         // per-key errors to report, guarded by mu
}

// NewChecker returns a Checker reading clock.
func NewChecker(clock *Clock) *Checker {
	return &Checker{clock: clock, buckets: map[string]bucket.Bucket{}, itemErr: map[string]error{}}
}

// Check decides reqs on the in-memory buckets at the clock's time.
func (f *Checker) Check(_ context.Context, reqs []check.Request) ([]check.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, append([]check.Request(nil), reqs...))
	if f.err != nil {
		return nil, f.err
	}
	now := f.clock.Now()
	out := make([]check.Response, len(reqs))
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
		out[i] = check.Response{Decision: d, Owner: "fake", Mode: r.Mode, Err: err}
	}
	return out, nil
}

// TakeBatches returns the batches checked so far and forgets them.
func (f *Checker) TakeBatches() [][]check.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches
	f.batches = nil
	return b
}

// SetErr makes every later Check fail with err (nil clears it).
func (f *Checker) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// SetItemErr makes every later request for key answer err.
func (f *Checker) SetItemErr(key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.itemErr[key] = err
}
