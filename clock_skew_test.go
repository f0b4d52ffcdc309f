package ringlimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/api"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Real nodes, in one process, with n3's clock offset by the test hook
// (OffsetClock): the faults of issue 15 item 5 were 499 of 499 admitted on
// a fixed window through the skewed node, 150 for 100 on a token bucket, a
// key handed from it locked out for the skew, a spent key whose backup it
// held refilled.

// startSkewed starts n1, n2 and n3, n3's clock skew ahead, and waits until
// every ring holds the three, n1 and n2 are ready and n3 reports its clock
// the one beyond the bound (it measured its peers), and n1 has measured
// both of its own (what the tests then read of n1's clock: before, they
// read it as soon as n3 had, and failed once in a clean-clone make test
// with n1's measure of one peer still to come).
func startSkewed(t *testing.T, skew time.Duration) []*Node {
	t.Helper()
	var nodes []*Node
	for i := range 3 {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].GossipAddr()}
		}
		cfg := testConfig(fmt.Sprintf("n%d", i+1), seeds...)
		if i == 2 {
			cfg.Clock = OffsetClock(skew)
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	want := names(nodes)
	waitForf(t, 20*time.Second, func() string {
		var s []string
		for _, n := range nodes {
			st := n.ClusterStatus()
			s = append(s, fmt.Sprintf("%s ready=%v %q members %v clock %+v", n.Name(), st.Ready, st.NotReady, n.Members(), st.Clock))
		}
		return "n1, n2 ready, n3 skewed: " + strings.Join(s, "; ")
	}, func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.Members(), want) {
				return false
			}
		}
		return nodes[0].Ready() && nodes[1].Ready() && nodes[2].ClusterStatus().Clock.Outlier &&
			nodes[0].ClusterStatus().Clock.MeasuredPeers == len(nodes)-1
	})
	return nodes
}

// batchOf returns a Check of count items of one hit of key.
func batchOf(key string, l *ringlimitv1.CheckItem, count int) *ringlimitv1.CheckRequest {
	req := &ringlimitv1.CheckRequest{}
	for range count {
		it := proto.Clone(l).(*ringlimitv1.CheckItem)
		it.UniqueKey = key
		req.Items = append(req.Items, it)
	}
	return req
}

// TestClockSkewRealNodes: n3 2 s or 30 min ahead says so (not ready, the
// reason and its offset in /v1/cluster, /readyz 503, ringlimit_clock_skewed
// 1), n1 does not; a fixed window of 1000 a minute checked 1200 times
// through n3 (calls of 10 items) admits at most 1000 per window (plus cached mode's drift), and
// a token bucket of 1000 a minute checked the same way at most its burst
// plus the refill.
func TestClockSkewRealNodes(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Second, 30 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			nodes := startSkewed(t, skew)
			st := nodes[2].ClusterStatus()
			t.Logf("n3's clock %+v: measured %v from the skew", st.Clock, time.Duration(st.Clock.OffsetMs*float64(time.Millisecond))-skew)
			if st.Ready || !strings.Contains(st.NotReady, "clock") || st.Clock.OffsetMs < float64(skew/time.Millisecond)-100 {
				t.Errorf("n3's status: ready %v (%q), clock %+v; want not ready for its clock, offset %v", st.Ready, st.NotReady, st.Clock, skew)
			}
			if s1 := nodes[0].ClusterStatus().Clock; s1.Skewed || s1.OffsetMs > 100 || s1.OffsetMs < -100 || s1.MeasuredPeers != 2 {
				t.Errorf("n1's clock %+v, want offset 0 with both peers measured", s1)
			}
			resp, err := http.Get("http://" + nodes[2].HTTPAddr() + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body["reason"], "clock") {
				t.Errorf("n3 /readyz: %d %v, want 503 naming the clock", resp.StatusCode, body)
			}
			if v := gatherValue(t, nodes[2], "ringlimit_clock_skewed"); v != 1 {
				t.Errorf("n3 ringlimit_clock_skewed %v, want 1", v)
			}

			clients := []ringlimitv1.RateLimiterClient{dial(t, nodes[0]), dial(t, nodes[1]), dial(t, nodes[2])}
			const limit, drift = 1000, 1000*2/100 + 3 // cached mode: f·C + N
			fw := &ringlimitv1.CheckItem{Name: "skew-fw", Hits: proto.Int64(1), Limit: limit,
				Period: durationpb.New(time.Minute), Algorithm: ringlimitv1.Algorithm_ALGORITHM_FIXED_WINDOW}
			key := keysOwnedBy(t, nodes[0], "skew-fw", nodes[0].Name(), 1)[0]
			perWindow := map[int64]int{}
			for range 120 {
				r, err := clients[2].Check(t.Context(), batchOf(key, fw, 10))
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range r.Items {
					if it.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
						perWindow[it.ResetTime.AsTime().Truncate(time.Minute).Unix()]++
					}
				}
			}
			t.Logf("fixed window through n3: admitted per window %v", perWindow)
			for w, n := range perWindow {
				if n > limit+drift {
					t.Errorf("window ending %v admitted %d, limit %d + drift %d", time.Unix(w, 0), n, limit, drift)
				}
			}

			tb := &ringlimitv1.CheckItem{Name: "skew-tb", Hits: proto.Int64(1), Limit: limit, Period: durationpb.New(time.Minute)}
			key = keysOwnedBy(t, nodes[0], "skew-tb", nodes[0].Name(), 1)[0]
			start, admitted := time.Now(), 0
			for range 120 {
				r, err := clients[2].Check(t.Context(), batchOf(key, tb, 10))
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range r.Items {
					if it.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
						admitted++
					}
				}
			}
			refill := int(time.Since(start)*limit/time.Minute) + 1
			t.Logf("token bucket through n3: admitted %d of 1200 (burst %d + refill %d)", admitted, limit, refill)
			if admitted > limit+refill+drift {
				t.Errorf("token bucket admitted %d, burst %d + refill %d + drift %d", admitted, limit, refill, drift)
			}
		})
	}
}

// TestClockSkewHandoffRealNodes: a spent key owned by n3, 30 minutes
// ahead, handed off when n3 stops, is neither refilled nor locked out at
// its new owner: a peek shows it spent, full again within one period (the
// fault: reset 30 minutes away, nothing admitted for the skew).
func TestClockSkewHandoffRealNodes(t *testing.T) {
	nodes := startSkewed(t, 30*time.Minute)
	const limit = 60
	it := &ringlimitv1.CheckItem{Name: "skew-ho", Hits: proto.Int64(1), Limit: limit,
		Period: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_OWNER}
	key := keysOwnedBy(t, nodes[0], "skew-ho", nodes[2].Name(), 1)[0]
	c := dial(t, nodes[0])
	r, err := c.Check(t.Context(), batchOf(key, it, limit))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range r.Items {
		if x.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
			t.Fatalf("spending on n3: item %d %v (%s)", i, x.Status, x.Error)
		}
	}
	if err := nodes[2].Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown(n3): %v", err)
	}
	waitMembers(t, nodes[:2], names(nodes[:2]))
	peek := proto.Clone(it).(*ringlimitv1.CheckItem)
	peek.UniqueKey, peek.Hits = key, proto.Int64(0)
	p := checkOne(t, c, peek)
	untilFull := time.Until(p.ResetTime.AsTime())
	t.Logf("after the hand-off: owner %s, remaining %d, full again in %v", p.Owner, p.Remaining, untilFull)
	// The new owner starts from n3's backup with the fence's reserve
	// drained (docs/consistency.md, "Fencing and charging": 10% of the
	// capacity, 6 of 60 here, 6 s of refill): full within a minute and
	// those 6 s, never locked out for the skew (30 min before).
	const reserveRefill = 6 * time.Second
	if p.Owner == nodes[2].Name() || p.Remaining > 15 || untilFull > time.Minute+reserveRefill+5*time.Second || untilFull < 30*time.Second {
		t.Errorf("after the hand-off: owner %s, remaining %d, full in %v; want a live owner, spent (the refill of the seconds since), full within a minute and the reserve's %v",
			p.Owner, p.Remaining, untilFull, reserveRefill)
	}
}

// TestClockSkewBackupRealNodes: a key spent at n1, whose backup n3 (30
// minutes ahead) holds, stays spent when n1 dies and n3 takes it over:
// nothing admitted through n3 or by n3 as owner, and through n2, which
// holds no state of the key, at most the fresh local-share the docs allow.
func TestClockSkewBackupRealNodes(t *testing.T) {
	nodes := startSkewed(t, 30*time.Minute)
	const limit = 40
	it := &ringlimitv1.CheckItem{Name: "skew-bk", Hits: proto.Int64(1), Limit: limit,
		Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_OWNER}
	after, err := ring.New(DefaultConfig().Sync.Ring, nodes[1].Name(), nodes[2].Name())
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, k := range keysOwnedBy(t, nodes[0], "skew-bk", nodes[0].Name(), 50) {
		if o, _ := after.Owner(api.Key("skew-bk", k)); o == nodes[2].Name() {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key of n1 that n3 takes over")
	}
	c2 := dial(t, nodes[1])
	r, err := c2.Check(t.Context(), batchOf(key, it, limit))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range r.Items {
		if x.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
			t.Fatalf("spending on n1: item %d %v (%s)", i, x.Status, x.Error)
		}
	}
	waitFor(t, 5*time.Second, "n3 holds n1's backup", func() bool { return gatherValue(t, nodes[2], "ringlimit_backups_received_total") > 0 })
	if err := nodes[0].Close(); err != nil {
		t.Fatalf("Close(n1): %v", err)
	}
	waitForf(t, 20*time.Second, func() string { return fmt.Sprintf("n2 %v, n3 %v", nodes[1].Members(), nodes[2].Members()) }, func() bool {
		return slices.Equal(nodes[1].Members(), names(nodes[1:])) && slices.Equal(nodes[2].Members(), names(nodes[1:]))
	})
	// What may be admitted now (docs/consistency.md, "Charging" and "What
	// each mode guarantees, by policy"): until n3's takeover is confirmed
	// (confirm.go) it answers n2's forwards not-owner, and both go by the
	// policy, local-share, which starts from the key's last known state,
	// else from a fresh share of limit / members, one per node and
	// episode, charged afterwards. n3 starts from the backup it holds, its
	// reserve drained: spent. n2 keeps no view of an owner-mode key; it
	// starts from n3's backup of the key to it if that has come, or from
	// the state n3's not-owner answer carries (sync's waitState): spent.
	// Before that answer carried it, n2 started a fresh share in about 1
	// run in 16 to 50 on loaded cores (n3's backup came after n2's first
	// check of the wait; n2 admitted the 4 checks it saw);
	// TestTakeoverWaitAnswerCarriesState forces that interleaving: 4 -> 0.
	// A forward n3 leaves unanswered for RequestTimeout still starts a
	// fresh share, which the docs allow, and which a loaded machine can
	// produce. Once confirmed, n3 decides as owner: nothing. So nothing
	// through n3, nothing decided by the owner, and through n2 at most its
	// share.
	shareOfN2 := limit / len(nodes[1:])
	clients := []ringlimitv1.RateLimiterClient{c2, dial(t, nodes[2])}
	var viaN2, viaN3, byOwner int
	for i := range limit {
		x := checkOne(t, clients[i%2], func() *ringlimitv1.CheckItem {
			y := proto.Clone(it).(*ringlimitv1.CheckItem)
			y.UniqueKey = key
			return y
		}())
		if x.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
			continue
		}
		switch {
		case !x.Degraded:
			byOwner++
		case i%2 == 0:
			viaN2++
		default:
			viaN3++
		}
	}
	t.Logf("after n1 died: admitted by the owner %d, by the policy through n2 %d (its share %d), through n3 %d", byOwner, viaN2, shareOfN2, viaN3)
	if byOwner != 0 || viaN3 != 0 || viaN2 > shareOfN2 {
		t.Errorf("spent key after its owner died (its backup on the skewed n3): admitted by the owner %d, by the policy through n3 %d, want 0; through n2 %d, want at most its fresh share %d",
			byOwner, viaN3, viaN2, shareOfN2)
	}
}
