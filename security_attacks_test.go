package ringlimit

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/peer"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// The attacks of issue 16, tried on the default configuration (testConfig:
// a shared secret, the peer service on a port of its own). Each leaves a
// spent key spent.

// attackScene starts the three nodes of the peer attack tests and spends
// a key n1 owns (limit 5 an hour, owner mode, of the limit "atk") through
// n1. It returns n1, n2, the key's full name, n2's incarnation and a
// function counting how many of 20 more checks of the key are admitted.
func attackScene(t *testing.T) (n1, n2 *Node, key string, inc2 uint64, more func() int) {
	nodes := startCluster(t, 3, nil)
	n1, n2 = nodes[0], nodes[1]
	k := keysOwnedBy(t, n1, "atk", "n1", 1)[0]
	more = spendOwnerMode(t, n1, "atk", k)
	return n1, n2, api.Key("atk", k), n2.cfg.Sync.Incarnation, more
}

// spendOwnerMode spends key (limit 5 an hour, owner mode) through n and
// returns a function counting how many of 20 more checks are admitted.
func spendOwnerMode(t *testing.T, n *Node, name, key string) func() int {
	t.Helper()
	it := item1(name, key, 5, ringlimitv1.Mode_MODE_OWNER)
	call := func() *ringlimitv1.CheckResult {
		resp, err := n.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Items[0]
	}
	for i := range 5 {
		if r := call(); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
			t.Fatalf("spending: check %d of 5: %v", i+1, r)
		}
	}
	return func() int {
		admitted := 0
		for range 20 {
			if call().Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				admitted++
			}
		}
		return admitted
	}
}

// deliverAs sends envs to n's peer port (or addr, when set) with creds and
// returns the call's error.
func deliverAs(t *testing.T, addr, authority string, creds credentials.TransportCredentials, envs ...*peerv1.Envelope) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority(authority))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = peerv1.NewPeerClient(cc).Deliver(ctx, &peerv1.DeliverRequest{Envelopes: envs})
	return err
}

// member returns the client credentials of a node holding secret that
// names itself name: what a member of the cluster (or whoever stole the
// secret) can present.
func member(t *testing.T, name string, secret []byte) credentials.TransportCredentials {
	t.Helper()
	m, err := peer.SecretTLS(name, [][]byte{secret}, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return m.ClientCredentials()
}

// forgedReturn is issue 16's forged flush: it gives back 100 lease tokens
// of key, which its sender was never granted.
func forgedReturn(from, to string, inc uint64, key string) *peerv1.Envelope {
	return &peerv1.Envelope{From: from, To: to, Incarnation: inc, Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{
		Seq: 1 << 40, Items: []*peerv1.FlushItem{{Key: key, LeaseReturn: 100,
			Limit: &peerv1.Limit{Algorithm: uint32(bucket.TokenBucket), Limit: 5, PeriodNs: int64(time.Hour)}}}}}}
}

// TestPeerAttacks: a stranger cannot reach the peer service (not on the
// public port, not in plain text, not with another cluster's secret); a
// member cannot speak for another, cannot refund tokens it was not granted,
// and cannot claim an incarnation gossip does not vouch for. After each
// attempt n1's spent key stays spent.
func TestPeerAttacks(t *testing.T) {
	n1, n2, key, inc2, more := attackScene(t)
	rejected := func(reason string) float64 {
		return metricValue(t, n1, `ringlimit_peer_envelopes_rejected_total{reason="`+reason+`"}`)
	}

	// A stranger.
	err := deliverAs(t, n1.GRPCAddr(), "n1", insecure.NewCredentials(), forgedReturn("n2", "n1", inc2, key))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("the peer service on the public gRPC port: %v, want Unimplemented", err)
	}
	if err := deliverAs(t, n1.PeerAddr(), "n1", insecure.NewCredentials(), forgedReturn("n2", "n1", inc2, key)); status.Code(err) != codes.Unavailable {
		t.Errorf("plain text to the peer port: %v, want Unavailable (no TLS handshake)", err)
	}
	other := []byte("another cluster's secret, 32 b..")
	if err := deliverAs(t, n1.PeerAddr(), "n1", member(t, "n2", other), forgedReturn("n2", "n1", inc2, key)); status.Code(err) != codes.Unavailable {
		t.Errorf("another secret's certificate: %v, want Unavailable", err)
	}

	// A member (n2's certificate) speaking for another.
	before := rejected("unauthorized")
	if err := deliverAs(t, n1.PeerAddr(), "n1", member(t, "n2", testPeerSecret), forgedReturn("n3", "n1", inc2, key)); err != nil {
		t.Errorf("Deliver as n3 with n2's certificate: %v, want the batch taken and the envelope rejected", err)
	}
	if got := rejected("unauthorized") - before; got != 1 {
		t.Errorf("envelopes rejected as unauthorized: +%v, want +1", got)
	}

	// A member returning a lease it never had.
	refused := metricValue(t, n1, "ringlimit_lease_tokens_refused_total")
	if err := deliverAs(t, n1.PeerAddr(), "n1", member(t, "n2", testPeerSecret), forgedReturn("n2", "n1", inc2, key)); err != nil {
		t.Errorf("Deliver of a forged lease return: %v", err)
	}
	waitFor(t, 5*time.Second, "the forged return counted refused", func() bool {
		return metricValue(t, n1, "ringlimit_lease_tokens_refused_total")-refused == 100
	})

	// A member claiming another incarnation: refused, and n2's real
	// traffic is still served afterwards.
	before = rejected("incarnation")
	restarts := n1.core.Metrics().PeerRestarts.Load()
	env := forgedReturn("n2", "n1", math.MaxUint64, key)
	if err := deliverAs(t, n1.PeerAddr(), "n1", member(t, "n2", testPeerSecret), env); err != nil {
		t.Errorf("Deliver with incarnation 2^64-1: %v", err)
	}
	if got := rejected("incarnation") - before; got != 1 {
		t.Errorf("envelopes rejected for their incarnation: +%v, want +1", got)
	}
	if got := n1.core.Metrics().PeerRestarts.Load() - restarts; got != 0 {
		t.Errorf("n1 took n2 for restarted %d times, want 0", got)
	}
	decidedByN1(t, n1, n2, "forgery")

	if got := more(); got != 0 {
		t.Errorf("after the attacks, %d of 20 checks of the spent key admitted, want 0", got)
	}
}

// checkJSON posts one item to n's /v1/check and returns its answer.
func checkJSON(t *testing.T, n *Node, body string) api.JSONResult {
	t.Helper()
	code, b := post(t, n, "application/json", []byte(`{"items":[`+body+`]}`))
	if code != http.StatusOK {
		t.Fatalf("POST /v1/check %s: %d %s", body, code, b)
	}
	var resp api.JSONCheckResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Items[0]
}

// TestParameterAttacks: peeks and checks naming another algorithm or
// period, and checks naming a rule's bucket, leave a spent key spent.
func TestParameterAttacks(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	c := dial(t, n)
	real := func(key string, hits int64) *ringlimitv1.CheckItem {
		return &ringlimitv1.CheckItem{Name: "api", UniqueKey: key, Hits: proto.Int64(hits), Limit: 5,
			Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_LOCAL}
	}
	spend := func(key string) {
		for i := range 5 {
			if r := checkOne(t, c, real(key, 1)); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
				t.Fatalf("spending %s: check %d of 5: %v", key, i+1, r)
			}
		}
	}
	admitted := func(key string) int {
		k := 0
		for range 20 {
			if checkOne(t, c, real(key, 1)).Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				k++
			}
		}
		return k
	}

	spend("alg")
	gcra := real("alg", 0)
	gcra.Algorithm = ringlimitv1.Algorithm_ALGORITHM_GCRA
	checkOne(t, c, gcra)
	gcra.Hits = proto.Int64(1)
	if r := checkOne(t, c, gcra); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Errorf("a GCRA check of the key: %v, want admitted by a bucket of its own", r)
	}
	if got := admitted("alg"); got != 0 {
		t.Errorf("algorithm flip: %d of 20 admitted afterwards, want 0", got)
	}

	spend("period")
	fast := real("period", 0)
	fast.Period = durationpb.New(time.Nanosecond)
	for range 2 {
		if r := checkOne(t, c, fast); r.Limit != 5 || r.Remaining != 0 {
			t.Errorf("peek with period 1ns: %v, want the bucket's own limit 5, nothing remaining", r)
		}
	}
	fast.Hits = proto.Int64(1)
	for range 2 {
		if r := checkOne(t, c, fast); r.Status != ringlimitv1.Status_STATUS_OVER_LIMIT {
			t.Errorf("check with period 1ns: %v, want over the limit", r)
		}
	}
	if got := admitted("period"); got != 0 {
		t.Errorf("period flips: %d of 20 admitted afterwards, want 0", got)
	}

	// A real change of limit on a key not spent is applied and reported.
	checkOne(t, c, real("raise", 1))
	raise := real("raise", 1)
	raise.Limit = 10
	if r := checkOne(t, c, raise); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || r.Limit != 10 || !r.Reconfigured || r.Remaining > 4 {
		t.Errorf("limit 5 -> 10 with 4 left: %v, want admitted under 10, reconfigured, at most 4 left", r)
	}
	if r := checkJSON(t, n, `{"name":"api","unique_key":"raise","hits":1,"limit":10,"period":"1h","mode":"local"}`); r.Reconfigured || r.Limit != 10 {
		t.Errorf("the same limit again: %+v, want not reconfigured", r)
	}

	// The nginx rule edge/remote_address allows 2 an hour.
	for range 2 {
		if resp, _ := nginxAuth(t, n, "X-Real-IP: 198.51.100.9", "X-Ringlimit-Rule: edge/remote_address"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("nginx spending: %s", resp.Status)
		}
	}
	hijack := `{"name":"edge/remote_address","unique_key":"198.51.100.9","hits":0,"limit":1000,"period":"1ns","algorithm":"token_bucket","mode":"local"}`
	if r := checkJSON(t, n, hijack); r.Limit != 2 || r.Remaining != 0 {
		t.Errorf("a check naming the rule's bucket: %+v, want the rule's limit 2, nothing remaining", r)
	}
	if r := checkJSON(t, n, `{"name":"edge/remote_address","unique_key":"198.51.100.9","hits":1,"limit":1000,"period":"1s","mode":"local"}`); r.Status != "over_limit" || r.Limit != 2 {
		t.Errorf("a check naming the rule's bucket with its own limit: %+v, want over the rule's limit 2", r)
	}
	if resp, _ := nginxAuth(t, n, "X-Real-IP: 198.51.100.9", "X-Ringlimit-Rule: edge/remote_address"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("nginx after the hijack attempts: %s, want 429", resp.Status)
	}
}

// TestRulesOnlyListeners: with HTTPRulesOnly and GRPCRulesOnly, a check
// that chooses its limit is refused on the listeners; one naming a rule is
// served, and so is the embedding API.
func TestRulesOnlyListeners(t *testing.T) {
	cfg := testConfig("solo")
	cfg.Clock = fixedClock{}
	cfg.Rules.Path = writeRules(t, t.TempDir(), testRulesYAML)
	cfg.Rules.PollInterval = 0
	cfg.API.HTTPRulesOnly, cfg.API.GRPCRulesOnly = true, true
	n := startNode(t, cfg)
	waitMembers(t, []*Node{n}, []string{"solo"})
	c := dial(t, n)
	own := &ringlimitv1.CheckItem{Name: "api", UniqueKey: "u", Hits: proto.Int64(1), Limit: 5, Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_LOCAL}
	if r := checkOne(t, c, own); r.Status != ringlimitv1.Status_STATUS_ERROR || r.Error == "" {
		t.Errorf("gRPC, a limit of its own: %v, want an error", r)
	}
	if r := checkOne(t, c, ruleItem("api/per_user", "u")); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Errorf("gRPC, naming a rule: %v, want admitted", r)
	}
	if r := checkJSON(t, n, `{"name":"api","unique_key":"u","hits":1,"limit":5,"period":"1h"}`); r.Status != "error" {
		t.Errorf("HTTP, a limit of its own: %+v, want an error", r)
	}
	if r := checkJSON(t, n, `{"rule":"api/per_user","unique_key":"u","hits":1}`); r.Status != "under_limit" {
		t.Errorf("HTTP, naming a rule: %+v, want admitted", r)
	}
	resp, err := n.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{own}})
	if err != nil || resp.Items[0].Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Errorf("embedding API, a limit of its own: %v %v, want admitted", resp, err)
	}
}

// TestFrontEndBadKeys: keys that cannot be formed are denied by default at
// the nginx endpoint (403) and at Envoy's service (OVER_LIMIT for the
// descriptor), counted in ringlimit_bad_keys_total; invalid UTF-8 from Envoy
// is InvalidArgument; lone surrogates in JSON keys are refused.
func TestFrontEndBadKeys(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	long := "X-Real-IP: " + strings.Repeat("a", 2000)
	for _, h := range [][]string{{"X-Ringlimit-Rule: edge/remote_address"}, {long, "X-Ringlimit-Rule: edge/remote_address"}} {
		for range 10 {
			if resp, _ := nginxAuth(t, n, h...); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("nginx, headers %.40q: %s, want 403", h, resp.Status)
			}
		}
	}
	if got := gatherValue(t, n, "ringlimit_bad_keys_total", "front", "nginx"); got != 20 {
		t.Errorf("nginx bad keys counted %v, want 20", got)
	}

	e := dialEnvoy(t, n)
	resp, err := e.ShouldRateLimit(t.Context(), envoyRequest("edge", "remote_address", strings.Repeat("a", 2000)))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("Envoy, a value of 2000 bytes: %v %v, want OVER_LIMIT", resp, err)
	}
	if got := gatherValue(t, n, "ringlimit_bad_keys_total", "front", "envoy"); got != 1 {
		t.Errorf("Envoy bad keys counted %v, want 1", got)
	}
	// A value that is not UTF-8, as raw protobuf: domain "edge", one
	// descriptor with the entry remote_address = "\xff".
	raw := []byte("\x0a\x04edge\x12\x15\x0a\x13\x0a\x0eremote_address\x12\x01\xff")
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out []byte
	err = cc.Invoke(t.Context(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &raw, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("Envoy, a value that is not UTF-8: %v, want InvalidArgument saying so", err)
	}

	for _, key := range []string{`\udc00`, `\udc01`} {
		code, b := post(t, n, "application/json", []byte(`{"items":[{"name":"api","unique_key":"`+key+`","hits":1,"limit":5,"period":"1h"}]}`))
		if code != http.StatusBadRequest {
			t.Errorf("JSON key %s: %d %s, want 400", key, code, b)
		}
	}
}

// decidedByN1 checks from n2, in owner mode, a key of 5 an hour that n1
// owns (of the limit "real"), and fails the test unless n1 decided it,
// admitted and not degraded: after the peer attacks (after names them),
// n2's real traffic is still served.
func decidedByN1(t *testing.T, n1, n2 *Node, after string) {
	t.Helper()
	k2 := keysOwnedBy(t, n1, "real", "n1", 1)[0]
	resp, err := n2.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item1("real", k2, 5, ringlimitv1.Mode_MODE_OWNER)}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Items[0]; r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || r.Owner != "n1" || r.Degraded {
		t.Errorf("n2's owner-mode check of a key of n1 after the %s: %v, want decided by n1", after, r)
	}
}
