package ringlimit

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// The limits people set (5 logins a minute, 1 OTP a minute) on keys seen
// for the first time, over real nodes, requests spread round robin: every
// mode admits exactly the limit, and no first request of a fresh key is
// rejected; in cached and owner mode none of the first limit requests is
// (leased mode may hold tokens in another node's lease for a while: it
// under-admits by design, never over). Before, in cached mode a non-owner seeing a key for the first
// time decided alone on a share of limit / nodes: with 3 nodes and a limit
// of 1 per minute, 2 first requests in 3 were rejected (issue #15).
func TestSmallLimitsOnFreshKeysRoundRobin(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			// Patient timeouts: what the modes admit on a healthy cluster, not
			// how fast. Under make race, beside the sim and sync packages on 2
			// cores, one leased check of the 5-node cluster once got no answer
			// within the default 2 s (a CI run of session 11; 10 of 10 runs
			// since passed, under the race detector and a loaded machine).
			nodes := startCluster(t, size, patientTimeouts)
			var clients []ringlimitv1.RateLimiterClient
			for _, n := range nodes {
				clients = append(clients, dial(t, n))
			}
			for _, mode := range []ringlimitv1.Mode{ringlimitv1.Mode_MODE_CACHED, ringlimitv1.Mode_MODE_OWNER, ringlimitv1.Mode_MODE_LEASED} {
				for _, limit := range []int64{1, 2, 3, 5, 10} {
					// Several fresh keys, each starting at another node.
					for k := range size {
						key := fmt.Sprintf("fresh-%d-%v-%d-%d", size, mode, limit, k)
						item := &ringlimitv1.CheckItem{Name: "small", UniqueKey: key, Hits: proto.Int64(1), Limit: limit,
							Period: durationpb.New(time.Minute), Mode: mode}
						admitted := 0
						for i := range 3 * int(limit) * size {
							via := (k + i) % size
							resp, err := clients[via].Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item}})
							if err != nil {
								t.Fatalf("%v limit %d key %s call %d via %s: %v", mode, limit, key, i, nodes[via].Name(), err)
							}
							r := resp.Items[0]
							if r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
								admitted++
							} else if i < int(limit) && (mode != ringlimitv1.Mode_MODE_LEASED || i == 0) {
								t.Errorf("%v limit %d/min key %s: request %d, via %s (owner %s), was %v while the key had tokens",
									mode, limit, key, i, nodes[via].Name(), r.Owner, r.Status)
							}
						}
						if admitted != int(limit) {
							t.Errorf("%v limit %d/min key %s: admitted %d of %d calls round robin over %d nodes, want exactly %d",
								mode, limit, key, admitted, 3*int(limit)*size, size, limit)
						}
					}
				}
			}
		})
	}
}
