package peer

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"
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
