package ringlimit

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
)

// BenchmarkCachedPath measures what one single cached check costs, as make
// compare's "1 check per call, c=32" workload makes them: a public
// RateLimiter/Check call of one key of 10,000 (token bucket, 1000 per
// second, never reached), c calls in flight, round robin over three
// servers on loopback, in one process.
//
//   - baseline: three gRPC servers answering every check under the limit
//     without deciding (make compare's no-limiter baseline: three of them,
//     round robin, as here);
//   - cached: three nodes, cached mode: two calls in three on a non-owner,
//     decided from its view, the hits flushed to the owner, which answers
//     with the key's state and backs it up.
//
// cpu-ns/op is the process's CPU time (client, servers, gRPC, the
// collector) per call; cached's minus baseline's is what the nodes add.
// flushes/op, pushes/op, fwd-batches/op and backups/op count the nodes'
// peer messages per call. Every key is checked once through each server
// before the calls measured (benchRLSCalls). Run it with
//
//	go test -run '^$' -bench BenchmarkCachedPath -benchtime 100000x -count 6 .
func BenchmarkCachedPath(b *testing.B) {
	var bases []*grpc.ClientConn
	for range 3 {
		bases = append(bases, benchDial(b, startBaseline(b)))
	}
	nodes := startBenchCluster(b, 3)
	const c = 32
	b.Run(fmt.Sprintf("baseline/c=%d", c), func(b *testing.B) {
		benchRLSCalls(b, nil, bases, "", 10000, c)
	})
	b.Run(fmt.Sprintf("cached/c=%d", c), func(b *testing.B) {
		benchRLSCalls(b, nodes, dialAll(b, nodes), "", 10000, c)
	})
}
