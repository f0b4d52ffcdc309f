package ringlimit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/internal/testaddr"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// checkPolicies sends count owner-mode checks of key (limit 10 an hour) in
// each partition policy to n and returns, per policy, how many were
// admitted and how many answers were degraded.
func checkPolicies(t *testing.T, n *Node, key string, count int) (admitted, degraded map[ringlimitv1.Policy]int) {
	t.Helper()
	admitted, degraded = map[ringlimitv1.Policy]int{}, map[ringlimitv1.Policy]int{}
	for _, pol := range []ringlimitv1.Policy{ringlimitv1.Policy_POLICY_FAIL_OPEN, ringlimitv1.Policy_POLICY_FAIL_CLOSED, ringlimitv1.Policy_POLICY_LOCAL_SHARE} {
		for range count {
			it := item1("join", key+pol.String(), 10, ringlimitv1.Mode_MODE_OWNER)
			it.Policy = pol
			resp, err := n.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
			if err != nil {
				t.Fatal(err)
			}
			r := resp.Items[0]
			if r.Status == ringlimitv1.Status_STATUS_ERROR {
				t.Fatalf("%v: %s", pol, r.Error)
			}
			if r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				admitted[pol]++
			}
			if r.Degraded {
				degraded[pol]++
			}
		}
	}
	return admitted, degraded
}

// TestUnjoinedNodeDecidesByPolicy: a node whose seed never answers is not
// ready and decides by the partition policy, degraded: fail-open admits,
// fail-closed refuses, local-share admits a share (10 / (itself + one
// seed) = 5). Before, it answered as a cluster of one: 10 of 20 admitted in
// every policy, none degraded. Once another node joins it, it is ready,
// WaitReady returns, and it owns keys again.
func TestUnjoinedNodeDecidesByPolicy(t *testing.T) {
	lonely := startNode(t, testConfig("lonely", testaddr.Closed(t)))
	if lonely.Ready() {
		t.Fatal("a node whose seed never answered is ready")
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := lonely.WaitReady(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady before any join: %v; want the context's deadline", err)
	}
	admitted, degraded := checkPolicies(t, lonely, "unjoined", 20)
	want := map[ringlimitv1.Policy]int{ringlimitv1.Policy_POLICY_FAIL_OPEN: 20, ringlimitv1.Policy_POLICY_FAIL_CLOSED: 0, ringlimitv1.Policy_POLICY_LOCAL_SHARE: 5}
	for pol, w := range want {
		if admitted[pol] != w || degraded[pol] != 20 {
			t.Errorf("unjoined, %v: %d of 20 admitted, %d degraded; want %d, 20", pol, admitted[pol], degraded[pol], w)
		}
	}
	resp, err := http.Get("http://" + lonely.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz of the unjoined node: %d; want 503", resp.StatusCode)
	}

	friend := startNode(t, testConfig("friend", lonely.GossipAddr()))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, n := range []*Node{lonely, friend} {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatalf("%s: WaitReady: %v", n.Name(), err)
		}
	}
	waitMembers(t, []*Node{lonely, friend}, []string{"friend", "lonely"})
	admitted, degraded = checkPolicies(t, lonely, "joined", 20)
	for pol := range want {
		if admitted[pol] != 10 || degraded[pol] != 0 {
			t.Errorf("joined, %v: %d of 20 admitted, %d degraded; want 10, 0", pol, admitted[pol], degraded[pol])
		}
	}
}

// TestFirstNodeIsReadyAtOnce: a node without seeds is the first of its
// cluster: ready when Start returns, owning every key.
func TestFirstNodeIsReadyAtOnce(t *testing.T) {
	n := startNode(t, testConfig("first"))
	if err := n.WaitReady(t.Context()); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	admitted, degraded := checkPolicies(t, n, "first", 20)
	for pol, a := range admitted {
		if a != 10 || degraded[pol] != 0 {
			t.Errorf("%v: %d of 20 admitted, %d degraded; want 10, 0", pol, a, degraded[pol])
		}
	}
}

// TestDuplicateNameIsRefused: a node started with a live member's name is
// refused (WaitReady: ErrNameTaken), never ready, and decides by policy,
// so the name's keys have one owner: owner mode with limit 2 admits 2 in
// all, not 4 as before. The real member stays in the cluster.
func TestDuplicateNameIsRefused(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	dup := startNode(t, testConfig("n2", nodes[0].GossipAddr()))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := dup.WaitReady(ctx); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("the duplicate's WaitReady: %v; want ErrNameTaken", err)
	}
	if dup.Ready() {
		t.Error("the refused duplicate is ready")
	}
	key := "dup"
	for owner, err := nodes[0].Owner("join", key); owner != "n2"; owner, err = nodes[0].Owner("join", key) {
		if err != nil {
			t.Fatal(err)
		}
		key += "+"
	}
	admittedBy := map[string]int{}
	for _, n := range []*Node{nodes[0], nodes[1], dup, dup} {
		it := item1("join", key, 2, ringlimitv1.Mode_MODE_OWNER)
		it.Policy = ringlimitv1.Policy_POLICY_FAIL_CLOSED
		it.Hits = proto.Int64(1)
		resp, err := n.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Items[0].Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
			admittedBy[n.GossipAddr()]++
		}
	}
	if total := admittedBy[nodes[0].GossipAddr()] + admittedBy[nodes[1].GossipAddr()] + admittedBy[dup.GossipAddr()]; total != 2 || admittedBy[dup.GossipAddr()] != 0 {
		t.Errorf("owner mode, limit 2: admitted %v (by gossip address); want 2 in all, none by the duplicate", admittedBy)
	}
	waitMembers(t, nodes, []string{"n1", "n2"})
}
