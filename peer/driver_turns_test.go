package peer

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestDriverSmallChecksPassQueuedEnvelopes: a loop that takes nothing (as
// behind a flood) is offered flushes of 1000 new keys each (about 41 KB
// encoded, milliseconds of the core's work each), then client checks; once
// it runs, each check records how many of the envelopes had been applied
// when it was decided. A bystander's calls of one item go before all of
// the envelopes; a flood's call of 1000 items keeps its place behind them;
// and calls of one item that outnumber PassItems (100) let one envelope
// through per 100 of them, so the envelopes are not starved either. With
// one queue in the order offered (before issue 16's bystander fix) every
// call was decided after all the envelopes queued before it.
func TestDriverSmallChecksPassQueuedEnvelopes(t *testing.T) {
	tests := []struct {
		name                   string
		envelopes, calls, size int
		want                   func(call int) int // envelopes applied before the call
	}{
		{"bystander", 10, 10, 1, func(int) int { return 0 }},
		{"flood's call", 10, 1, 1000, func(int) int { return 10 }},
		{"more calls than PassItems", 5, 250, 1, func(call int) int { return call / 100 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newTestDriver(t, &fixedClock{t: time.Unix(1_000_000, 0)})
			size := int64(proto.Size(floodFlush("b", "a", 0, 1000)))
			for i := range tt.envelopes {
				d.Step(time.Time{}, floodFlush("b", "a", uint64(i), 1000))
			}
			reqs := make([]check.Request, tt.size)
			for i := range reqs {
				reqs[i] = check.Request{Key: fmt.Sprintf("k%d", i), Hits: 1, Mode: check.ModeCached,
					Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}}
			}
			var applied []int
			for range tt.calls {
				err := d.Check(reqs, make([]check.Response, len(reqs)), func() {
					applied = append(applied, tt.envelopes-int(d.queuedBytes())/int(size))
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			d.Start(t.Context())
			d.Close() // applies what is queued, then returns
			if len(applied) != tt.calls {
				t.Fatalf("%d calls decided, want %d", len(applied), tt.calls)
			}
			for i, got := range applied {
				if want := tt.want(i); got != want {
					t.Errorf("call %d decided after %d of the %d envelopes queued before it, want %d", i, got, tt.envelopes, want)
				}
			}
		})
	}
}
