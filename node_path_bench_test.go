package ringlimit

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/internal/cputime"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// BenchmarkNodePath measures what one single-check call costs three real
// nodes on loopback, in one process, by the path the check takes. Every
// call goes to n1 over gRPC:
//
//   - owner-local: keys n1 owns (owner mode): decided by n1, no hop;
//   - forwarded: keys n2 or n3 owns, owner mode: n1 forwards each check to
//     the owner and back, batched per owner;
//   - cached-non-owner: keys n2 or n3 owns, cached mode: n1 decides from
//     its view and flushes the hits to the owner, which pushes back;
//   - baseline: a gRPC server in the same process answering every call
//     under the limit without deciding: what the client and gRPC cost.
//
// Then calls of 100 checks (100-checks/...), c = 8: of keys of every
// owner (owner and cached mode, a third of the keys n1's), and by path,
// every key of a call taking the same one (owner-local, forwarded,
// cached-non-owner).
//
// cpu-ns/op is the process's CPU time (user and system: the client, the
// three nodes, gRPC, the garbage collector) per call, the figure to read
// on a shared machine; subtract the baseline's for the nodes' share. c is
// the number of calls in flight. Run it with
//
//	go test -run '^$' -bench BenchmarkNodePath -benchtime 20000x -count 3 .
func BenchmarkNodePath(b *testing.B) {
	nodes := startBenchCluster(b, 3)
	n1 := nodes[0]
	cc := benchDial(b, n1.GRPCAddr())
	base := startBaseline(b)
	bcc := benchDial(b, base)
	owned := benchKeys(b, n1, func(owner string) bool { return owner == n1.Name() })
	other := benchKeys(b, n1, func(owner string) bool { return owner != n1.Name() })
	paths := []struct {
		name string
		cc   *grpc.ClientConn
		keys []string
		mode ringlimitv1.Mode
	}{
		{"baseline", bcc, owned, ringlimitv1.Mode_MODE_OWNER},
		{"owner-local", cc, owned, ringlimitv1.Mode_MODE_OWNER},
		{"forwarded", cc, other, ringlimitv1.Mode_MODE_OWNER},
		{"cached-non-owner", cc, other, ringlimitv1.Mode_MODE_CACHED},
	}
	for _, c := range []int{1, 32} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
				m := n1.core.Metrics()
				var fwd, batches int64
				benchCalls(b, ringlimitv1.NewRateLimiterClient(p.cc), p.keys, 1, p.mode, c, func() {
					fwd, batches = m.Forwarded.Load(), m.ForwardBatches.Load()
				})
				if k := m.ForwardBatches.Load() - batches; k > 0 && p.name == "forwarded" {
					b.ReportMetric(float64(m.Forwarded.Load()-fwd)/float64(k), "checks/batch")
				}
			})
		}
	}
	// 100 checks per call, keys of every owner (a third owned by n1), and
	// by path: every key of a call taking the same one.
	all := append(slices.Clip(owned), other...)
	for _, p := range []struct {
		name string
		cc   *grpc.ClientConn
		keys []string
		mode ringlimitv1.Mode
	}{
		{"baseline", bcc, all, ringlimitv1.Mode_MODE_OWNER},
		{"owner", cc, all, ringlimitv1.Mode_MODE_OWNER},
		{"cached", cc, all, ringlimitv1.Mode_MODE_CACHED},
		{"owner-local", cc, owned, ringlimitv1.Mode_MODE_OWNER},
		{"forwarded", cc, other, ringlimitv1.Mode_MODE_OWNER},
		{"cached-non-owner", cc, other, ringlimitv1.Mode_MODE_CACHED},
	} {
		b.Run(fmt.Sprintf("100-checks/%s/c=8", p.name), func(b *testing.B) {
			benchCalls(b, ringlimitv1.NewRateLimiterClient(p.cc), p.keys, 100, p.mode, 8, func() {})
		})
	}
}

// benchCalls makes b.N calls of items checks each, of keys in mode, c at
// a time, and reports the process's CPU time per call. start runs after
// the warm-up, before the calls measured.
func benchCalls(b *testing.B, cl ringlimitv1.RateLimiterClient, keys []string, items int, mode ringlimitv1.Mode, c int, start func()) {
	reqs := make([]*ringlimitv1.CheckRequest, len(keys)/items)
	for i := range reqs {
		reqs[i] = &ringlimitv1.CheckRequest{}
		for j := range items {
			// Spread a call's keys: key i+j*len(reqs), not i*items+j.
			reqs[i].Items = append(reqs[i].Items, &ringlimitv1.CheckItem{
				Name: "bench", UniqueKey: keys[i+j*len(reqs)], Hits: proto.Int64(1), Limit: 1 << 40,
				Period: durationpb.New(time.Second), Mode: mode,
			})
		}
	}
	// Warm up: every key once, so that cached views and connections exist.
	for _, r := range reqs {
		if _, err := cl.Check(b.Context(), r); err != nil {
			b.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		fail error
	)
	next := make(chan int, c)
	start()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for w := range c {
		wg.Go(func() {
			for i := range next {
				resp, err := cl.Check(context.Background(), reqs[(i*c+w)%len(reqs)])
				if err == nil {
					for _, r := range resp.Items {
						if r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
							err = fmt.Errorf("answer %v", r)
						}
					}
				}
				if err != nil {
					mu.Lock()
					fail = err
					mu.Unlock()
				}
			}
		})
	}
	cpu := feedCalls(b, next, &wg, cpu0)
	if fail != nil {
		b.Fatal(fail)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// feedCalls numbers b.N calls on next for the workers of wg, closes it,
// waits for the workers and stops the timer; it returns the process's CPU
// time since cpu0.
func feedCalls(b *testing.B, next chan<- int, wg *sync.WaitGroup, cpu0 time.Duration) time.Duration {
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	return cpu
}

// benchKeys returns 2000 keys whose owner, in n's ring, passes want.
func benchKeys(b *testing.B, n *Node, want func(owner string) bool) []string {
	var keys []string
	for i := 0; len(keys) < 2000; i++ {
		k := fmt.Sprint("key-", i)
		owner, err := n.Owner("bench", k)
		if err != nil {
			b.Fatal(err)
		}
		if want(owner) {
			keys = append(keys, k)
		}
	}
	return keys
}

// startBenchCluster starts size nodes, as startCluster does, for a
// benchmark.
func startBenchCluster(b *testing.B, size int) []*Node {
	return startBenchClusterWith(b, size, func(*Config) {})
}

// startBenchClusterWith starts size nodes, each configured by edit, for a
// benchmark.
func startBenchClusterWith(b *testing.B, size int, edit func(*Config)) []*Node {
	var nodes []*Node
	for i := range size {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].GossipAddr()}
		}
		cfg := testConfig(fmt.Sprintf("n%d", i+1), seeds...)
		edit(&cfg)
		n, err := Start(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		})
		nodes = append(nodes, n)
	}
	want := names(nodes)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		for _, n := range nodes {
			ok = ok && n.Ready() && slices.Equal(n.Members(), want)
		}
		if ok {
			return nodes
		}
		if time.Now().After(deadline) {
			b.Fatal("the cluster did not form within 60 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func benchDial(b *testing.B, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// baselineServer answers every check under the limit without deciding.
type baselineServer struct {
	ringlimitv1.UnimplementedRateLimiterServer
}

func (baselineServer) Check(_ context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	resp := &ringlimitv1.CheckResponse{Node: "baseline", Items: make([]*ringlimitv1.CheckResult, len(req.Items))}
	for i, it := range req.Items {
		resp.Items[i] = &ringlimitv1.CheckResult{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Limit: it.Limit,
			Remaining: it.Limit - 1, Owner: "baseline", Mode: it.Mode}
	}
	return resp, nil
}

// startBaseline starts a baseline gRPC server on loopback and returns its
// address.
func startBaseline(b *testing.B) string {
	return startGRPCServer(b, func(s *grpc.Server) { ringlimitv1.RegisterRateLimiterServer(s, baselineServer{}) })
}

// startGRPCServer starts a gRPC server on loopback with the services
// register registers, stopped at the benchmark's end, and returns its
// address.
func startGRPCServer(b *testing.B, register func(*grpc.Server)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	b.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

// dialAll dials each of nodes' gRPC address, in order.
func dialAll(b *testing.B, nodes []*Node) []*grpc.ClientConn {
	var ccs []*grpc.ClientConn
	for _, n := range nodes {
		ccs = append(ccs, benchDial(b, n.GRPCAddr()))
	}
	return ccs
}
