package ringlimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/internal/cputime"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// BenchmarkBatchPath measures what one call of 100 checks costs three real
// nodes on loopback, in one process, made as make compare makes them
// (compare/calls.go): each item a key drawn at random from 10,000, token
// bucket 1000 per second (never reached), calls round robin over the three
// nodes, c = 8 in flight. Unlike BenchmarkNodePath's 100-check calls (every
// call to n1, the same 40 sets of keys again and again), a node sees a key
// here about once a second, as in make compare, so the cached mode's views
// come and go.
//
// cpu-ns/op is the process's CPU time per call (client and nodes);
// flushes/op, pushes/op, fwd-batches/op and backups/op count the nodes'
// peer messages of those kinds per call. Run it with
//
//	go test -run '^$' -bench BenchmarkBatchPath -benchtime 4000x -benchmem .
func BenchmarkBatchPath(b *testing.B) {
	nodes := startBenchCluster(b, 3)
	ccs := dialAll(b, nodes)
	for _, m := range []struct {
		name string
		mode ringlimitv1.Mode
	}{{"owner", ringlimitv1.Mode_MODE_OWNER}, {"cached", ringlimitv1.Mode_MODE_CACHED}} {
		b.Run(fmt.Sprintf("%s/c=8", m.name), func(b *testing.B) {
			benchBatchCalls(b, nodes, ccs, "batch-"+m.name, m.mode, 100, 10000, 8)
		})
	}
}

// benchBatchCalls makes b.N calls of items checks each, keys drawn at
// random from keys, c at a time, round robin over ccs, and reports the
// process's CPU time and the nodes' peer messages per call.
func benchBatchCalls(b *testing.B, nodes []*Node, ccs []*grpc.ClientConn, name string, mode ringlimitv1.Mode, items, keys, c int) {
	clients := make([]ringlimitv1.RateLimiterClient, len(ccs))
	for i, cc := range ccs {
		clients[i] = ringlimitv1.NewRateLimiterClient(cc)
	}
	var (
		wg   sync.WaitGroup
		fail atomic.Pointer[error]
	)
	// worker makes the calls numbered by next, its keys drawn by a
	// generator seeded with w.
	worker := func(w int, next <-chan int) {
		rng := rand.New(rand.NewPCG(uint64(w), 1))
		req := &ringlimitv1.CheckRequest{Items: make([]*ringlimitv1.CheckItem, items)}
		for i := range req.Items {
			req.Items[i] = &ringlimitv1.CheckItem{Name: name, Hits: proto.Int64(1), Limit: 1000,
				Period: durationpb.New(time.Second), Mode: mode}
		}
		for i := range next {
			for _, it := range req.Items {
				it.UniqueKey = "k" + strconv.Itoa(rng.IntN(keys))
			}
			resp, err := clients[i%len(clients)].Check(context.Background(), req)
			if err == nil {
				for _, r := range resp.Items {
					if r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
						err = fmt.Errorf("answer %v", r)
					}
				}
			}
			if err != nil {
				fail.Store(&err)
			}
		}
	}
	// run makes the calls numbered by next, c workers, seeded from seed.
	run := func(seed int, next <-chan int) {
		for w := range c {
			wg.Go(func() { worker(seed+w, next) })
		}
	}
	// Warm up: connections, and 200 calls.
	warm := make(chan int, c)
	run(0, warm)
	for i := range 200 {
		warm <- i
	}
	close(warm)
	wg.Wait()
	next := make(chan int, c)
	b.ReportAllocs()
	msgs0 := peerMessages(nodes)
	b.ResetTimer()
	cpu0 := cputime.Process()
	run(100, next)
	cpu := feedCalls(b, next, &wg, cpu0)
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	reportPeerMessages(b, nodes, msgs0)
}
