package ringlimit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"

	"github.com/ringlimit/ringlimit/internal/cputime"
)

// benchRLSRules is the rules file of make compare's RLS runs
// (compare/systems.go): one rule per value of the descriptor key "user",
// 1000 per second (never reached), in cached mode (domain bench) and in
// owner mode (domain bench_owner).
const benchRLSRules = `domain: bench
mode: cached
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
---
domain: bench_owner
mode: owner
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// BenchmarkRLSPath measures what one Envoy ShouldRateLimit call costs real
// nodes on loopback, in one process, as make compare's RLS runs call them:
// one descriptor (user = one of 10,000 values), hits_addend 1, c calls in
// flight, round robin over the nodes of the cluster.
//
//   - baseline: a gRPC server in the same process answering every
//     descriptor OK without deciding: what the client and gRPC cost;
//   - 1-node: one node, cached mode (the rule's): every key owned;
//   - 3-nodes-cached: three nodes, cached mode: two calls in three on a
//     non-owner, decided from its view, the hits flushed to the owner;
//   - 3-nodes-owner: three nodes, owner mode: two calls in three forwarded;
//   - 3-nodes-check-cached: for reference, the same calls as single cached
//     checks of the public RateLimiter/Check API (token bucket, 1000 per
//     second), round robin over the three nodes, as make compare's single
//     checks are made.
//
// cpu-ns/op is the process's CPU time (client, nodes, gRPC, TLS, the
// collector) per call; subtract the baseline's for the nodes' share.
// flushes/op, pushes/op, fwd-batches/op and backups/op count the nodes'
// peer messages of those kinds per call. Run it with
//
//	go test -run '^$' -bench BenchmarkRLSPath -benchtime 20000x -benchmem .
func BenchmarkRLSPath(b *testing.B) {
	rulesPath := filepath.Join(b.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(benchRLSRules), 0o600); err != nil {
		b.Fatal(err)
	}
	withRules := func(c *Config) { c.Rules.Path = rulesPath }
	base := startRLSBaseline(b)
	one := startBenchClusterWith(b, 1, withRules)
	three := startBenchClusterWith(b, 3, withRules)
	paths := []struct {
		name   string
		nodes  []*Node
		ccs    []*grpc.ClientConn
		domain string
	}{
		{"baseline", nil, []*grpc.ClientConn{benchDial(b, base)}, "bench"},
		{"1-node", one, dialAll(b, one), "bench"},
		{"3-nodes-cached", three, dialAll(b, three), "bench"},
		{"3-nodes-owner", three, dialAll(b, three), "bench_owner"},
		{"3-nodes-check-cached", three, dialAll(b, three), ""},
	}
	for _, c := range []int{1, 32} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
				benchRLSCalls(b, p.nodes, p.ccs, p.domain, 10000, c)
			})
		}
	}
}

// benchRLSCalls makes b.N ShouldRateLimit calls of one descriptor (user =
// one of keys values), c at a time, round robin over ccs, and reports the
// process's CPU time per call and the peer messages of nodes per call. An
// empty domain makes each call a public Check call instead (checkCall).
func benchRLSCalls(b *testing.B, nodes []*Node, ccs []*grpc.ClientConn, domain string, keys, c int) {
	clients := make([]rlsv3.RateLimitServiceClient, len(ccs))
	for i, cc := range ccs {
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprint("u", i)}}}}}
	}
	call := func(i int) error {
		if domain == "" {
			return checkCall(ccs[i%len(ccs)], fmt.Sprint("u", (i*7919)%keys))
		}
		resp, err := clients[i%len(clients)].ShouldRateLimit(context.Background(), reqs[(i*7919)%len(reqs)])
		if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("answer %v", resp)
		}
		return err
	}
	// Warm up: every key once through each node, so that views and
	// connections exist.
	for i := range len(reqs) * len(clients) {
		if err := call(i); err != nil {
			b.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		fail atomic.Pointer[error]
		next = make(chan int, c)
	)
	b.ReportAllocs()
	msgs0 := peerMessages(nodes)
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range c {
		wg.Go(func() {
			for i := range next {
				if err := call(i); err != nil {
					fail.Store(&err)
				}
			}
		})
	}
	cpu := feedCalls(b, next, &wg, cpu0)
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if nodes != nil {
		reportPeerMessages(b, nodes, msgs0)
	}
}

// peerMessages returns the flushes, pushes, forward batches and backups
// sent by nodes so far.
func peerMessages(nodes []*Node) [4]int64 {
	var out [4]int64
	for _, n := range nodes {
		m := n.core.Metrics()
		out[0] += m.FlushesSent.Load()
		out[1] += m.PushesSent.Load()
		out[2] += m.ForwardBatches.Load()
		out[3] += m.BackupsSent.Load()
	}
	return out
}

// reportPeerMessages reports the flushes, pushes, forward batches and
// backups nodes sent per call since peerMessages returned msgs0.
func reportPeerMessages(b *testing.B, nodes []*Node, msgs0 [4]int64) {
	msgs := peerMessages(nodes)
	for i, name := range []string{"flushes/op", "pushes/op", "fwd-batches/op", "backups/op"} {
		b.ReportMetric(float64(msgs[i]-msgs0[i])/float64(b.N), name)
	}
}

// rlsBaselineServer answers every descriptor OK without deciding, as make
// compare's baseline does.
type rlsBaselineServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (rlsBaselineServer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// startRLSBaseline starts a baseline RLS server on loopback and returns its
// address.
func startRLSBaseline(b *testing.B) string {
	return startGRPCServer(b, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, rlsBaselineServer{}) })
}

// checkCall makes one public Check call of one cached check of key, token
// bucket 1000 per second, as make compare's single checks do.
func checkCall(cc *grpc.ClientConn, key string) error {
	resp, err := ringlimitv1.NewRateLimiterClient(cc).Check(context.Background(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{{
		Name: "bench", UniqueKey: key, Hits: proto.Int64(1), Limit: 1000, Period: durationpb.New(time.Second), Mode: ringlimitv1.Mode_MODE_CACHED}}})
	if err == nil && resp.Items[0].Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		err = fmt.Errorf("answer %v", resp.Items[0])
	}
	return err
}
