package main

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// baselineServer serves ringlimit.v1.RateLimiter/Check without deciding
// anything: every item is answered under limit at once. Driven like a node
// (--baseline), it measures what the same calls cost over gRPC on this
// machine with no limiter behind them: the ceiling a node's figures are read
// against.
type baselineServer struct {
	ringlimitv1.UnimplementedRateLimiterServer
}

// Check answers every item under its limit, owned by "baseline".
func (baselineServer) Check(_ context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	resp := &ringlimitv1.CheckResponse{Node: "baseline", Items: make([]*ringlimitv1.CheckResult, len(req.GetItems()))}
	for i, it := range req.GetItems() {
		resp.Items[i] = &ringlimitv1.CheckResult{
			Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Limit: it.GetLimit(),
			Remaining: max(it.GetLimit()-it.GetHits(), 0), Owner: "baseline",
		}
	}
	return resp, nil
}

// startBaseline serves a baselineServer on an OS-chosen loopback port and
// returns its address and the function that stops it.
func startBaseline() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("baseline server: %w", err)
	}
	s := grpc.NewServer()
	ringlimitv1.RegisterRateLimiterServer(s, baselineServer{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	return ln.Addr().String(), func() { s.Stop(); <-done }, nil
}
