package peer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestDriverStepBoundedInBytes: a core that takes nothing (its loop not
// running, as when it is starved of CPU) is offered 600 flushes of 333 new
// keys each (8 MiB encoded). Steps wait once the envelopes queued would
// exceed MaxQueueBytes (default 4 MiB), not at the queue's 4096 inputs, and
// all go through once the loop runs. Before the bound all 600 were queued
// at once.
func TestDriverStepBoundedInBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := newTestDriver(t, &fixedClock{t: time.Unix(1_000_000, 0)})
		const sends = 600
		size := proto.Size(floodFlush("b", "a", 0, 333))
		fit := 4 << 20 / size
		var stepped atomic.Int64
		go func() {
			for i := range sends {
				d.Step(time.Time{}, floodFlush("b", "a", uint64(i), 333))
				stepped.Add(1)
			}
		}()
		synctest.Wait()
		if got := stepped.Load(); got > int64(fit)+1 {
			t.Errorf("the loop stopped: %d envelopes of %d bytes queued, want at most %d (4 MiB)", got, size, fit+1)
		}
		d.Start(t.Context())
		synctest.Wait()
		if got := stepped.Load(); got != sends {
			t.Errorf("the loop running: %d envelopes stepped, want all %d", got, sends)
		}
		d.Close()
	})
}

// TestDriverShedsChecksOverMaxQueueItems: a loop that takes nothing is
// offered calls of 1000 items: 32 are queued (32,000 items, under the
// default 32,768), the next are refused with ErrDriverBusy and counted,
// and once the loop has run the queue takes calls again. Before the bound
// every call was queued, up to 4096 of them, whose callers had long timed
// out (the flooded node's OOM kill, issue 16).
func TestDriverShedsChecksOverMaxQueueItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := newTestDriver(t, &fixedClock{t: time.Unix(1_000_000, 0)})
		reqs := make([]check.Request, 1000)
		for i := range reqs {
			reqs[i] = check.Request{Key: fmt.Sprintf("k%d", i), Hits: 1, Mode: check.ModeOwner,
				Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Hour}}
		}
		answered := 0
		offer := func() error {
			return d.Check(reqs, make([]check.Response, len(reqs)), func() { answered++ })
		}
		for i := range 32 {
			if err := offer(); err != nil {
				t.Fatalf("call %d: %v, want queued", i+1, err)
			}
		}
		for i := range 3 {
			if err := offer(); !errors.Is(err, ErrDriverBusy) {
				t.Errorf("call %d: %v, want ErrDriverBusy", 33+i, err)
			}
		}
		if got := d.ChecksShed(); got != 3 {
			t.Errorf("ChecksShed = %d, want 3", got)
		}
		d.Start(t.Context())
		synctest.Wait()
		if answered != 32 {
			t.Errorf("answered %d calls, want 32", answered)
		}
		if err := offer(); err != nil {
			t.Errorf("after the loop ran: %v, want queued", err)
		}
		d.Close()
	})
}

// TestDriverSkipsChecksWhoseCallerLeft: a check whose caller stopped
// waiting before the loop reached it is not decided: its answer is not
// written, its hit not counted (a later check of the same key, limit 1, is
// admitted), done still runs, and ChecksSkipped counts it.
func TestDriverSkipsChecksWhoseCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, core := newTestDriver(t, &fixedClock{t: time.Unix(1_000_000, 0)})
		d.Start(t.Context())
		defer d.Close()
		if err := d.Do(t.Context(), func(now time.Time) { core.SetMembers(now, []string{"a"}) }); err != nil {
			t.Fatal(err)
		}
		req := []check.Request{{Key: "k", Hits: 1, Mode: check.ModeOwner,
			Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1, Period: time.Hour}}}
		var gone atomic.Bool
		gone.Store(true)
		left, later := make([]check.Response, 1), make([]check.Response, 1)
		ran := 0
		if err := d.CheckUnless(&gone, req, left, func() { ran++ }); err != nil {
			t.Fatal(err)
		}
		if err := d.CheckUnless(new(atomic.Bool), req, later, func() { ran++ }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ran != 2 {
			t.Errorf("done ran %d times, want 2", ran)
		}
		if left[0] != (check.Response{}) {
			t.Errorf("the check whose caller left was answered: %+v", left[0])
		}
		if later[0].Status() != check.StatusUnderLimit {
			t.Errorf("the later check of the key (limit 1): %v, want admitted (the first not counted)", later[0].Status())
		}
		if got := d.ChecksSkipped(); got != 1 {
			t.Errorf("ChecksSkipped = %d, want 1", got)
		}
	})
}
