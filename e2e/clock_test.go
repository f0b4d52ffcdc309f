//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// TestClockSkew runs three node containers, n3's clock 30 minutes ahead
// through the node's test hook (RINGLIMIT_TEST_CLOCK_OFFSET: containers
// share the host's kernel clock). n3 says so (not ready, /v1/cluster's
// clock, n1 and n2 ready); a fixed window of 1000 a minute checked 1200
// times through n3 admits at most 1000 per window plus cached mode's
// drift; a token bucket checked over every node at most its burst plus the
// refill plus the drift; and a spent key owned by n3, handed off when n3
// stops (SIGTERM), is spent at its new owner and full again within one
// period, not locked out for the skew (docs/consistency.md, "Clocks").
func TestClockSkew(t *testing.T) {
	const skew = 30 * time.Minute
	c := startCluster(t, clusterSpec{nodes: 3, clockOffset: map[int]time.Duration{2: skew}})
	var s3 string
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.status(2)
		if err == nil && st.Clock.Skewed && !st.Ready {
			s3 = fmt.Sprintf("%+v (%s)", st.Clock, st.NotReady)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n3 not reporting its clock within 30s: %+v, %v", st.Clock, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("n3: %s", s3)
	for i := range 2 {
		st, err := c.status(i)
		if err != nil || !st.Ready || st.Clock.Skewed || st.Clock.OffsetMs > 50 || st.Clock.OffsetMs < -50 {
			t.Errorf("n%d: ready %v, clock %+v, err %v; want ready, offset 0", i+1, st.Ready, st.Clock, err)
		}
	}
	resp, err := httpClient.Get(fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(c.nodes[2].clientIP, httpPort)))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("n3 /readyz: %v, %v; want 503", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}

	const limit, drift = 1000, 1000*2/100 + 3 // cached mode: f·C + N
	batch := func(it *ringlimitv1.CheckItem, n int) *ringlimitv1.CheckRequest {
		req := &ringlimitv1.CheckRequest{}
		for range n {
			req.Items = append(req.Items, proto.Clone(it).(*ringlimitv1.CheckItem))
		}
		return req
	}
	fw := newItem("clock-fw", "", ringlimitv1.Mode_MODE_CACHED, polDefault, limit, time.Minute)
	fw.Algorithm = ringlimitv1.Algorithm_ALGORITHM_FIXED_WINDOW
	fw.UniqueKey = c.keysOwnedBy(fw, 0, 0, 1)[0]
	perWindow := map[int64]int{}
	for range 120 {
		r, err := c.call(2, batch(fw, 10))
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range r.Items {
			if it.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				perWindow[it.ResetTime.AsTime().Unix()]++
			}
		}
	}
	fwWorst := 0
	for w, n := range perWindow {
		fwWorst = max(fwWorst, n)
		if n > limit+drift {
			t.Errorf("fixed window ending %v: %d admitted through n3, limit %d + drift %d", time.Unix(w, 0), n, limit, drift)
		}
	}

	tb := newItem("clock-tb", "", ringlimitv1.Mode_MODE_CACHED, polDefault, limit, time.Minute)
	tb.UniqueKey = c.keysOwnedBy(tb, 0, 0, 1)[0]
	start, tbAdmitted := time.Now(), 0
	for i := range 120 {
		r, err := c.call(i%3, batch(tb, 10))
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range r.Items {
			if it.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				tbAdmitted++
			}
		}
	}
	refill := int(time.Since(start)*limit/time.Minute) + 1
	if tbAdmitted > limit+refill+drift {
		t.Errorf("token bucket: %d admitted over every node, burst %d + refill %d + drift %d", tbAdmitted, limit, refill, drift)
	}

	ho := newItem("clock-ho", "", ringlimitv1.Mode_MODE_OWNER, polDefault, 60, time.Minute)
	ho.UniqueKey = c.keysOwnedBy(ho, 2, 0, 1)[0]
	r, err := c.call(0, batch(ho, 60))
	if err != nil {
		t.Fatal(err)
	}
	for k, it := range r.Items {
		if it.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
			t.Fatalf("spending the key n3 owns: item %d %v", k, it.Status)
		}
	}
	c.stop(2, 10*time.Second)
	if _, err := c.waitMembers([]int{0, 1}, c.names([]int{0, 1}), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	peek := proto.Clone(ho).(*ringlimitv1.CheckItem)
	peek.Hits = proto.Int64(0)
	pr, err := c.call(0, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{peek}})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.Items[0]
	untilFull := time.Until(p.ResetTime.AsTime())
	// The new owner starts from n3's backup with the fence's reserve drained
	// (docs/consistency.md, "Fencing and charging": 10% of the capacity, 6
	// tokens here, 6 s of refill), so the key is full again within a minute
	// plus those 6 s, never locked out for the skew (30 min before).
	const reserveRefill = 6 * time.Second
	if p.Owner == c.nodes[2].name || p.Remaining > 20 || untilFull > time.Minute+reserveRefill+5*time.Second {
		t.Errorf("after the hand-off: owner %s, remaining %d, full again in %v; want a live owner, spent, full within a minute and the reserve's %v", p.Owner, p.Remaining, untilFull, reserveRefill)
	}
	t.Logf("n3 at +%v: fixed window worst %d per window of %d; token bucket %d (burst %d + refill %d); after n3's hand-off: owner %s, remaining %d, full in %v",
		skew, fwWorst, limit, tbAdmitted, limit, refill, p.Owner, p.Remaining, untilFull.Round(time.Millisecond))
	emit(t, "clock-skew", map[string]any{"skew_s": skew.Seconds(), "fixed_window_worst": fwWorst, "limit": limit,
		"token_bucket_admitted": tbAdmitted, "token_bucket_refill": refill, "handoff_remaining": p.Remaining, "handoff_full_in_s": untilFull.Seconds()})
}
