package envoy

import (
	"context"
	"fmt"
	"github.com/ringlimit/ringlimit/internal/checkertest"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/rules"
)

func ExampleServer_ShouldRateLimit() {
	set, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The checker is the node in production; here, buckets in memory at a
	// fixed time.
	clock := checkertest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultConfig()
	cfg.Clock = clock
	srv, err := New(newFakeChecker(clock), set, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	// srv.Register(grpcServer) serves it; Envoy's filter sends:
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 2 {
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(),
			st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
	}
	// Output:
	// OK 1 SECOND 0 1s
	// OVER_LIMIT 1 SECOND 0 1s
}
