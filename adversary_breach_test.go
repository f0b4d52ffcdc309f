//go:build adversary

package ringlimit

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// TestAdversaryFloodFreesConcurrencyPermits: a concurrency limit of 5
// permits (lease timeout an hour) held by five holders; a stranger floods
// the node with 5 calls of 1000 fresh keys past its MaxKeys of 512, which
// evicts the key; five new holders then acquire 5 more permits: 10 held at
// once for a limit of 5, and 5 more per flood. security.md lists
// Concurrency keys as restarting fresh after an eviction (not marked), so
// this is the documented cost, measured.
//
//	go test -tags adversary -count=1 -run TestAdversaryFloodFreesConcurrencyPermits -v .
func TestAdversaryFloodFreesConcurrencyPermits(t *testing.T) {
	for _, mode := range []ringlimitv1.Mode{ringlimitv1.Mode_MODE_OWNER, ringlimitv1.Mode_MODE_LOCAL} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes := startCluster(t, 1, func(c *Config) { c.Sync.MaxKeys = 512 })
			cl := dial(t, nodes[0])
			acquire := func(holder string) bool {
				return checkOne(t, cl, &ringlimitv1.CheckItem{Name: "conns", UniqueKey: "alice", Hits: proto.Int64(1), Limit: 5,
					Period: durationpb.New(time.Hour), Algorithm: ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, Lease: holder, Mode: mode}).Status == ringlimitv1.Status_STATUS_UNDER_LIMIT
			}
			held := 0
			for i := range 6 {
				if acquire(fmt.Sprintf("a%d", i)) {
					held++
				}
			}
			if held != 5 {
				t.Fatalf("before the flood: %d permits of 5 acquired by 6 holders", held)
			}
			for round := range 3 {
				for c := range 5 {
					req := &ringlimitv1.CheckRequest{}
					for k := range 1000 {
						req.Items = append(req.Items, &ringlimitv1.CheckItem{Name: "flood", UniqueKey: fmt.Sprintf("r%d-c%d-k%d", round, c, k),
							Hits: proto.Int64(1), Limit: 100, Period: durationpb.New(time.Hour), Mode: mode})
					}
					if _, err := cl.Check(t.Context(), req); err != nil {
						t.Fatal(err)
					}
				}
				more := 0
				for i := range 5 {
					if acquire(fmt.Sprintf("r%d-%d", round, i)) {
						more++
					}
				}
				held += more
				t.Logf("flood %d: %d more permits acquired; %d held at once for a limit of 5", round, more, held)
			}
			if held > 5 {
				t.Errorf("%d permits held at once (none released, lease timeout an hour) for a concurrency limit of 5", held)
			}
		})
	}
}
