package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// baselineServer answers ringlimit.v1.RateLimiter/Check and Envoy's
// RateLimitService/ShouldRateLimit without deciding anything: every item is
// under its limit. Served by processes like the limiters' nodes (same
// GOMAXPROCS, same round robin), it is what the same calls cost over gRPC
// on this machine with no limiter behind them: the ceiling every figure is
// read against.
type baselineServer struct {
	ringlimitv1.UnimplementedRateLimiterServer
	rlsv3.UnimplementedRateLimitServiceServer
}

// Check answers every item under its limit.
func (baselineServer) Check(_ context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	items := req.GetItems()
	resp := &ringlimitv1.CheckResponse{Node: "baseline", Items: make([]*ringlimitv1.CheckResult, len(items))}
	for i, it := range items {
		resp.Items[i] = &ringlimitv1.CheckResult{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Limit: it.GetLimit(),
			Remaining: max(it.GetLimit()-it.GetHits(), 0), Owner: "baseline"}
	}
	return resp, nil
}

// ShouldRateLimit answers OK for every descriptor.
func (baselineServer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// newBaselineGRPC returns a gRPC server with both services of
// baselineServer registered.
func newBaselineGRPC() *grpc.Server {
	s := grpc.NewServer()
	ringlimitv1.RegisterRateLimiterServer(s, baselineServer{})
	rlsv3.RegisterRateLimitServiceServer(s, baselineServer{})
	return s
}

// serveBaseline serves the baseline on addr until SIGTERM or SIGINT. It is
// the tool's own subcommand (compare -serve-baseline ADDR), run as a
// process of its own for each baseline node.
func serveBaseline(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: baseline:", err)
		return 1
	}
	s := newBaselineGRPC()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		s.Stop()
	}()
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "compare: baseline:", err)
		return 1
	}
	return 0
}
