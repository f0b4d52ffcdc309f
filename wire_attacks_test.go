package ringlimit

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestPeerWireFieldAttacks: a member (n2's certificate) sends n1, over its
// peer port, hostile values of the peer wire fields of the lease grants and
// the join hold: a flush giving back 100 tokens of grants "settled" up to
// the largest id, and one settling a negative id; a hand-off of grants of
// a key of n1 holding more than its capacity, with no key, none at all,
// and one naming n1 itself; a backup asking about 2,000 names. Each
// malformed one is counted (ringlimit_malformed_total: +5), the forged
// return refused (+100), nothing panics, the spent key stays spent, and
// n2's real checks are still served by n1. The sync-level tests of each
// field are in sync/wirereview_test.go.
func TestPeerWireFieldAttacks(t *testing.T) {
	n1, n2, key, inc2, more := attackScene(t)
	lim := &peerv1.Limit{Algorithm: uint32(bucket.TokenBucket), Limit: 5, PeriodNs: int64(time.Hour)}
	env := func(body func(*peerv1.Envelope)) *peerv1.Envelope {
		e := &peerv1.Envelope{From: "n2", To: "n1", Incarnation: inc2}
		body(e)
		return e
	}
	asks := make([]string, 2000)
	for i := range asks {
		asks[i] = fmt.Sprintf("m%d", i)
	}
	malformed := metricValue(t, n1, "ringlimit_malformed_total")
	refused := metricValue(t, n1, "ringlimit_lease_tokens_refused_total")
	id := time.Now().Add(500 * time.Millisecond).UnixNano() // within n1's LeaseTTL (1s)
	err := deliverAs(t, n1.PeerAddr(), "n1", member(t, "n2", testPeerSecret),
		env(func(e *peerv1.Envelope) {
			e.Body = &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1 << 41, Items: []*peerv1.FlushItem{
				{Key: key, Limit: lim, LeaseReturn: 100, LeaseSettled: math.MaxInt64},
				{Key: key, Limit: lim, LeaseSettled: -1},
			}}}
		}),
		env(func(e *peerv1.Envelope) {
			e.Body = &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 1 << 41, Grants: []*peerv1.LeaseGrant{
				{Key: key, To: "n3", Id: id, Held: math.MaxInt64},
				{Key: key, To: "n1", Id: id + 1, Held: 1},
				{To: "n3", Id: id + 2, Held: 1},
				nil,
			}}}
		}),
		env(func(e *peerv1.Envelope) {
			e.Body = &peerv1.Envelope_Backup{Backup: &peerv1.Backup{Seq: 1 << 41, AskMembers: asks}}
		}),
	)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	waitForf(t, 5*time.Second, func() string {
		return fmt.Sprintf("malformed +%v (want +5), refused +%v (want +100)",
			metricValue(t, n1, "ringlimit_malformed_total")-malformed, metricValue(t, n1, "ringlimit_lease_tokens_refused_total")-refused)
	}, func() bool {
		return metricValue(t, n1, "ringlimit_malformed_total")-malformed == 5 &&
			metricValue(t, n1, "ringlimit_lease_tokens_refused_total")-refused == 100
	})
	decidedByN1(t, n1, n2, "attacks")
	if got := more(); got != 0 {
		t.Errorf("after the attacks, %d of 20 checks of the spent key admitted, want 0", got)
	}
}
