package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testaddr"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newClient returns a client of addrs closed when the test ends.
func newClient(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addrs, opts...)
	if err != nil {
		t.Fatalf("New(%v): %v", addrs, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCheckSendsEveryField(t *testing.T) {
	f := &fakeNode{name: "n1"}
	c := newClient(t, []string{serveFake(t, f, nil)})
	items := []client.Item{
		{Name: "api", Key: "alice", Hits: 2, Limit: 10, Period: time.Minute},
		{Name: "q", Key: "k", Peek: true, Limit: 5, Period: time.Second, Burst: 7,
			Algorithm: bucket.LeakyQueue, Mode: check.ModeLeased, Policy: check.PolicyLocalShare,
			MaxWait: 300 * time.Millisecond},
		{Name: "log", Key: "k", Hits: 1, Limit: 3, Period: time.Hour, Algorithm: bucket.SlidingLog,
			MinGap: time.Second, CountRejected: true},
		{Name: "warm", Key: "k", Hits: 1, Limit: 3, Period: time.Second, Algorithm: bucket.SmoothWarmingUp,
			WarmUp: 10 * time.Second, ColdFactor: 10},
		{Name: "bursty", Key: "k", Hits: 1, Limit: 3, Period: time.Second, Algorithm: bucket.SmoothBursty,
			MaxBurstSeconds: 2.5},
		{Name: "conc", Key: "k", Hits: 1, Limit: 3, Period: time.Minute, Algorithm: bucket.Concurrency,
			Lease: "worker-1", Release: true},
	}
	if _, err := c.Check(t.Context(), items...); err != nil {
		t.Fatal(err)
	}
	want := &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{
		{Name: "api", UniqueKey: "alice", Hits: proto.Int64(2), Limit: 10, Period: durationpb.New(time.Minute)},
		{Name: "q", UniqueKey: "k", Hits: proto.Int64(0), Limit: 5, Period: durationpb.New(time.Second), Burst: 7,
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_LEAKY_QUEUE, Mode: ringlimitv1.Mode_MODE_LEASED,
			Policy: ringlimitv1.Policy_POLICY_LOCAL_SHARE, MaxWait: durationpb.New(300 * time.Millisecond)},
		{Name: "log", UniqueKey: "k", Hits: proto.Int64(1), Limit: 3, Period: durationpb.New(time.Hour),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SLIDING_LOG, MinGap: durationpb.New(time.Second), CountRejected: true},
		{Name: "warm", UniqueKey: "k", Hits: proto.Int64(1), Limit: 3, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, WarmUp: durationpb.New(10 * time.Second), ColdFactor: 10},
		{Name: "bursty", UniqueKey: "k", Hits: proto.Int64(1), Limit: 3, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_BURSTY, MaxBurstSeconds: 2.5},
		{Name: "conc", UniqueKey: "k", Hits: proto.Int64(1), Limit: 3, Period: durationpb.New(time.Minute),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, Lease: "worker-1", Release: true},
	}}
	got := f.requests()
	if len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("request sent:\n got %v\nwant %v", got, want)
	}
}

// TestItemHitsDefault: an Item without Hits takes one, as an item without
// hits does on the wire, and says so explicitly (so that a node that still
// reads unset as 0 takes one too); only Peek sends 0, and Peek with Hits is
// refused before anything is sent.
func TestItemHitsDefault(t *testing.T) {
	f := &fakeNode{name: "n1"}
	c := newClient(t, []string{serveFake(t, f, nil)})
	items := []client.Item{
		{Name: "a", Key: "k", Limit: 5, Period: time.Minute},
		{Name: "a", Key: "k", Peek: true, Limit: 5, Period: time.Minute},
		{Name: "a", Key: "k", Hits: 3, Limit: 5, Period: time.Minute},
	}
	if _, err := c.Check(t.Context(), items...); err != nil {
		t.Fatal(err)
	}
	got := f.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests sent; want 1", len(got))
	}
	for i, want := range []int64{1, 0, 3} {
		if h := got[0].Items[i].Hits; h == nil || *h != want {
			t.Errorf("item %d sent hits %v; want explicitly %d", i, h, want)
		}
	}
	_, err := c.Check(t.Context(), client.Item{Name: "a", Key: "k", Peek: true, Hits: 2, Limit: 5, Period: time.Minute})
	if !errors.Is(err, client.ErrPeekWithHits) {
		t.Errorf("Peek with Hits 2: err %v; want ErrPeekWithHits", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("Peek with Hits was sent: %d requests; want still 1", n)
	}
}

func TestCheckConvertsResults(t *testing.T) {
	reset := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	f := &fakeNode{answer: func(context.Context, *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
		return &ringlimitv1.CheckResponse{Node: "n2", Items: []*ringlimitv1.CheckResult{
			{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Limit: 10, Remaining: 7, ResetTime: timestamppb.New(reset),
				Wait: durationpb.New(20 * time.Millisecond), Owner: "n1", Mode: ringlimitv1.Mode_MODE_CACHED},
			{Status: ringlimitv1.Status_STATUS_OVER_LIMIT, Limit: 10, RetryAfter: durationpb.New(3 * time.Second),
				Owner: "n3", Mode: ringlimitv1.Mode_MODE_OWNER, Degraded: true},
			{Status: ringlimitv1.Status_STATUS_ERROR, Error: "limit: must be positive, got 0", Mode: ringlimitv1.Mode_MODE_CACHED},
			{}, // never filled in: must not read as a success
			{Status: 42},
		}}, nil
	}}
	c := newClient(t, []string{serveFake(t, f, nil)})
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 10, Period: time.Second}
	got, err := c.Check(t.Context(), it, it, it, it, it)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Result{
		{Status: check.StatusUnderLimit, Limit: 10, Remaining: 7, ResetAt: reset, Wait: 20 * time.Millisecond,
			Owner: "n1", Node: "n2", Mode: check.ModeCached},
		{Status: check.StatusOverLimit, Limit: 10, RetryAfter: 3 * time.Second, Owner: "n3", Node: "n2",
			Mode: check.ModeOwner, Degraded: true},
		{Status: check.StatusError, Node: "n2", Mode: check.ModeCached,
			Err: &client.ItemError{Index: 2, Message: "limit: must be positive, got 0"}},
		{Status: check.StatusError, Node: "n2",
			Err: &client.ItemError{Index: 3, Message: "unknown status unspecified in the answer"}},
		{Status: check.StatusError, Node: "n2",
			Err: &client.ItemError{Index: 4, Message: "unknown status status(42) in the answer"}},
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Err != nil || w.Err != nil {
			var ie *client.ItemError
			if !errors.As(g.Err, &ie) || *ie != *w.Err.(*client.ItemError) {
				t.Errorf("result %d: Err = %#v, want %#v", i, g.Err, w.Err)
			}
			g.Err, w.Err = nil, nil
		}
		if g != w {
			t.Errorf("result %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if got[0].Allowed() != true || got[1].Allowed() || got[2].Allowed() || got[3].Allowed() {
		t.Errorf("Allowed() = %v %v %v %v, want true false false false",
			got[0].Allowed(), got[1].Allowed(), got[2].Allowed(), got[3].Allowed())
	}
}

func TestCheckRejectsAMalformedResponse(t *testing.T) {
	f := &fakeNode{answer: func(context.Context, *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
		return &ringlimitv1.CheckResponse{Items: []*ringlimitv1.CheckResult{{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT}}}, nil
	}}
	c := newClient(t, []string{serveFake(t, f, nil)})
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second}
	if _, err := c.Check(t.Context(), it, it); !errors.Is(err, client.ErrBadResponse) {
		t.Errorf("2 items, 1 result: err = %v, want ErrBadResponse", err)
	}
}

func TestCallErrors(t *testing.T) {
	f := &fakeNode{answer: func(context.Context, *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "too many items")
	}}
	addr := serveFake(t, f, nil)
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second}

	c := newClient(t, []string{addr})
	if _, err := c.Check(t.Context()); !errors.Is(err, client.ErrNoItems) {
		t.Errorf("no items: err = %v, want ErrNoItems", err)
	}
	_, err := c.Check(t.Context(), it)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "too many items") {
		t.Errorf("refused call: err = %v (code %v), want InvalidArgument", err, status.Code(err))
	}
	if ok, err := c.Allow(t.Context(), "unregistered", "k"); ok || !errors.Is(err, client.ErrNoLimit) {
		t.Errorf("Allow of an unregistered name = %v, %v; want false, ErrNoLimit", ok, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := c.Check(t.Context(), it); !errors.Is(err, client.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewRejectsBadAddresses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
		want  error // nil: any error
	}{
		{"none", nil, client.ErrNoAddress},
		{"blank", []string{" ", ""}, client.ErrNoAddress},
		{"scheme among others", []string{"dns:///a:1", "b:2"}, nil},
	} {
		c, err := client.New(tc.addrs)
		if err == nil {
			c.Close()
			t.Errorf("%s: New(%q) succeeded, want an error", tc.name, tc.addrs)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: New(%q) = %v, want %v", tc.name, tc.addrs, err, tc.want)
		}
	}
}

func TestAllowUsesTheRegisteredLimit(t *testing.T) {
	f := &fakeNode{answer: func(_ context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
		st := ringlimitv1.Status_STATUS_UNDER_LIMIT
		if req.Items[0].UniqueKey == "mallory" {
			st = ringlimitv1.Status_STATUS_OVER_LIMIT
		}
		if req.Items[0].UniqueKey == "bad" {
			st = ringlimitv1.Status_STATUS_ERROR
		}
		return &ringlimitv1.CheckResponse{Items: []*ringlimitv1.CheckResult{{Status: st, Error: "no"}}}, nil
	}}
	c := newClient(t, []string{serveFake(t, f, nil)},
		client.WithLimit(client.Item{Name: "api", Limit: 1, Period: time.Second}), // replaced below
		client.WithLimit(client.Item{Name: "api", Limit: 10, Period: time.Minute, Mode: check.ModeOwner}),
		client.WithLimit(client.Item{Name: "bytes", Hits: 512, Limit: 1 << 20, Period: time.Hour}))

	for _, tc := range []struct {
		name, key string
		want      bool
		wantErr   bool
	}{
		{"api", "alice", true, false},
		{"api", "mallory", false, false},
		{"api", "bad", false, true},
		{"bytes", "alice", true, false},
	} {
		ok, err := c.Allow(t.Context(), tc.name, tc.key)
		var ie *client.ItemError
		if ok != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.As(err, &ie)) {
			t.Errorf("Allow(%s, %s) = %v, %v; want %v, error %v", tc.name, tc.key, ok, err, tc.want, tc.wantErr)
		}
	}
	reqs := f.requests()
	wantItems := []*ringlimitv1.CheckItem{
		{Name: "api", UniqueKey: "alice", Hits: proto.Int64(1), Limit: 10, Period: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_OWNER},
		{Name: "api", UniqueKey: "mallory", Hits: proto.Int64(1), Limit: 10, Period: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_OWNER},
		{Name: "api", UniqueKey: "bad", Hits: proto.Int64(1), Limit: 10, Period: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_OWNER},
		{Name: "bytes", UniqueKey: "alice", Hits: proto.Int64(512), Limit: 1 << 20, Period: durationpb.New(time.Hour)},
	}
	if len(reqs) != len(wantItems) {
		t.Fatalf("%d requests, want %d", len(reqs), len(wantItems))
	}
	for i, w := range wantItems {
		if len(reqs[i].Items) != 1 || !proto.Equal(reqs[i].Items[0], w) {
			t.Errorf("request %d: got %v, want %v", i, reqs[i].Items, w)
		}
	}
}

func TestTimeoutEndsTheCall(t *testing.T) {
	f := &fakeNode{answer: func(ctx context.Context, _ *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
		<-ctx.Done() // never answers
		return nil, ctx.Err()
	}}
	c := newClient(t, []string{serveFake(t, f, nil)}, client.WithTimeout(50*time.Millisecond))
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second}
	_, err := c.Check(context.Background(), it)
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v (code %v), want DeadlineExceeded, as a status and as the context's error", err, status.Code(err))
	}

	// The caller's own, earlier deadline wins over a longer WithTimeout.
	c = newClient(t, []string{serveFake(t, f, nil)}, client.WithTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Check(ctx, it); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline: err = %v, want DeadlineExceeded", err)
	}
}

func TestRoundRobinReachesEveryNode(t *testing.T) {
	var addrs []string
	for _, name := range []string{"n1", "n2", "n3"} {
		addrs = append(addrs, serveFake(t, &fakeNode{name: name}, nil))
	}
	c := newClient(t, addrs)
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second}
	seen := map[string]int{}
	// round_robin spreads calls over the connections that are ready; the
	// first calls may all go to the first node to connect.
	for i := 0; len(seen) < 3 && i < 10000; i++ {
		res, err := c.Check(t.Context(), it)
		if err != nil {
			t.Fatal(err)
		}
		seen[res[0].Node]++
	}
	if len(seen) != 3 {
		t.Errorf("calls reached %v, want all of n1, n2, n3", seen)
	}
}

func TestSchemeTargetIsPassedToGRPC(t *testing.T) {
	addr := serveFake(t, &fakeNode{name: "n1"}, nil)
	c := newClient(t, []string{"passthrough:///" + addr})
	res, err := c.Check(t.Context(), client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second})
	if err != nil || res[0].Node != "n1" {
		t.Errorf("Check via passthrough:///%s = %+v, %v; want an answer from n1", addr, res, err)
	}
}

func TestDial(t *testing.T) {
	addr := serveFake(t, &fakeNode{name: "n1"}, nil)
	c, err := client.Dial(t.Context(), []string{addr})
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	c.Close()

	// Nothing listens on a port just closed: Dial gives up when ctx ends.
	dead := testaddr.Closed(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if c, err := client.Dial(ctx, []string{dead}); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial(%s) with nothing listening: err = %v, want DeadlineExceeded", dead, err)
	}
}

func TestTLS(t *testing.T) {
	serverCert, roots := selfSigned(t)
	addr := serveFake(t, &fakeNode{name: "n1"}, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}}))
	it := client.Item{Name: "a", Key: "b", Hits: 1, Limit: 1, Period: time.Second}

	c := newClient(t, []string{addr}, client.WithTLS(&tls.Config{RootCAs: roots}))
	if res, err := c.Check(t.Context(), it); err != nil || res[0].Node != "n1" {
		t.Errorf("TLS with the right root: %+v, %v; want an answer from n1", res, err)
	}

	// Without the root, or in plaintext, the handshake fails: Unavailable.
	for name, opts := range map[string][]client.Option{
		"system roots": {client.WithTLS(nil)},
		"plaintext":    nil,
	} {
		c := newClient(t, []string{addr}, append(opts, client.WithTimeout(2*time.Second))...)
		if _, err := c.Check(t.Context(), it); status.Code(err) != codes.Unavailable {
			t.Errorf("%s against a TLS node: err = %v, want Unavailable", name, err)
		}
	}
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ringlimit test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}
