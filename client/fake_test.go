package client_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// fakeNode is a RateLimiter server whose answers a test scripts.
type fakeNode struct {
	ringlimitv1.UnimplementedRateLimiterServer
	name   string
	answer func(context.Context, *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error)

	mu struct {
		sync.Mutex
		reqs []*ringlimitv1.CheckRequest // every request received
	}
}

// Check implements ringlimitv1.RateLimiterServer.
func (f *fakeNode) Check(ctx context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	f.mu.Lock()
	f.mu.reqs = append(f.mu.reqs, req)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(ctx, req)
	}
	resp := &ringlimitv1.CheckResponse{Node: f.name}
	for range req.Items {
		resp.Items = append(resp.Items, &ringlimitv1.CheckResult{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Owner: f.name})
	}
	return resp, nil
}

func (f *fakeNode) requests() []*ringlimitv1.CheckRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*ringlimitv1.CheckRequest(nil), f.mu.reqs...)
}

// serveFake serves f on a loopback port (with TLS when creds is not nil)
// until the test ends, and returns its address.
func serveFake(t *testing.T, f *fakeNode, creds credentials.TransportCredentials) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	ringlimitv1.RegisterRateLimiterServer(s, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return ln.Addr().String()
}
