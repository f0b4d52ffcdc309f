package ringlimit

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// TestKeyFloodKeepsSpentKeySpent (issue 15), through one real node and
// the public API: a login key of 5 an hour is spent; a stranger sends 5
// calls of 1000 fresh keys, past the node's MaxKeys of 512, which evicts
// the login key; the login key's next 5 checks admit nothing (they
// admitted 5 of 5 again before the store remembered evicted keys' state,
// sync/evicted.go).
func TestKeyFloodKeepsSpentKeySpent(t *testing.T) {
	for _, mode := range []ringlimitv1.Mode{ringlimitv1.Mode_MODE_OWNER, ringlimitv1.Mode_MODE_LOCAL} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes := startCluster(t, 1, func(c *Config) { c.Sync.MaxKeys = 512 })
			cl := dial(t, nodes[0])
			login := &ringlimitv1.CheckItem{Name: "login", UniqueKey: "alice", Hits: proto.Int64(1), Limit: 5,
				Period: durationpb.New(time.Hour), Mode: mode}
			admitted := func() int {
				n := 0
				for range 5 {
					if checkOne(t, cl, login).Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
						n++
					}
				}
				return n
			}
			if got := admitted(); got != 5 {
				t.Fatalf("spending: admitted %d of 5", got)
			}
			for c := range 5 {
				req := &ringlimitv1.CheckRequest{}
				for k := range 1000 {
					req.Items = append(req.Items, &ringlimitv1.CheckItem{Name: "flood", UniqueKey: fmt.Sprintf("k%08d", c*1000+k),
						Hits: proto.Int64(1), Limit: 100, Period: durationpb.New(time.Hour), Mode: mode})
				}
				if _, err := cl.Check(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			}
			if got := admitted(); got != 0 {
				t.Errorf("after the flood: the spent login key admitted %d of 5, want 0", got)
			}
		})
	}
}
