package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestLimitWireGuavaOptions: Guava's two options travel between peers, and
// a cold factor that does not fit bucket.Limit's field is malformed, not
// truncated.
func TestLimitWireGuavaOptions(t *testing.T) {
	for _, l := range []bucket.Limit{
		{Algorithm: bucket.SmoothBursty, Limit: 5, Period: time.Second, MaxBurstMillis: 2500},
		{Algorithm: bucket.SmoothWarmingUp, Limit: 5, Period: time.Second, WarmUp: 4 * time.Second, ColdFactorMilli: 10000},
	} {
		got, err := limitFromWire(limitToWire(l))
		if err != nil || got != l {
			t.Errorf("limitFromWire(limitToWire(%+v)) = %+v, %v", l, got, err)
		}
	}
	m := &peerv1.Limit{Algorithm: uint32(bucket.SmoothWarmingUp), Limit: 5, PeriodNs: int64(time.Second),
		WarmUpNs: int64(time.Second), ColdFactorMilli: 1<<16 + 3000}
	if l, err := limitFromWire(m); err == nil {
		t.Errorf("cold_factor_milli 2^16+3000: got %+v, want an error", l)
	}
}
