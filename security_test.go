package ringlimit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// grpcCheck makes one local-mode check through a client of addr with creds.
func grpcCheck(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := ringlimitv1.NewRateLimiterClient(cc).Check(ctx, &ringlimitv1.CheckRequest{
		Items: []*ringlimitv1.CheckItem{item1("tls", "k", 10, ringlimitv1.Mode_MODE_LOCAL)}})
	if err == nil && resp.Items[0].Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Fatalf("check over TLS: %v", resp.Items[0])
	}
	return err
}

// httpsGet gets path from addr with an HTTPS client of config tc (nil: plain
// HTTP) and returns the status code.
func httpsGet(t *testing.T, addr, path string, tc *tls.Config) (int, error) {
	t.Helper()
	scheme := "http://"
	tr := &http.Transport{}
	if tc != nil {
		scheme, tr.TLSClientConfig = "https://", tc
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, scheme+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestPublicTLS: with TLS on, a client that trusts the CA is served over
// gRPC and HTTPS; a plain-text client and a client that does not trust the
// CA are not.
func TestPublicTLS(t *testing.T) {
	ca, other := newTestCA(t, "public"), newTestCA(t, "other")
	srv := ca.issue(t, "node", "localhost")
	cfg := testConfig("solo")
	cfg.Peer.Addr = "127.0.0.1:0"
	cfg.API.TLS = TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
	n := startNode(t, cfg)
	waitMembers(t, []*Node{n}, []string{"solo"})

	trusting := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	distrusting := &tls.Config{RootCAs: other.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if err := grpcCheck(t, n.GRPCAddr(), credentials.NewTLS(trusting)); err != nil {
		t.Errorf("gRPC over TLS with a client trusting the CA: %v", err)
	}
	if err := grpcCheck(t, n.GRPCAddr(), insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Errorf("plain-text gRPC client: %v, want Unavailable", err)
	}
	if err := grpcCheck(t, n.GRPCAddr(), credentials.NewTLS(distrusting)); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC client trusting another CA: %v, want Unavailable", err)
	}
	if code, err := httpsGet(t, n.HTTPAddr(), "/readyz", trusting); err != nil || code != http.StatusOK {
		t.Errorf("HTTPS with a client trusting the CA: %d, %v", code, err)
	}
	if _, err := httpsGet(t, n.HTTPAddr(), "/readyz", distrusting); err == nil {
		t.Errorf("HTTPS client trusting another CA: no error")
	}
	// Go's TLS server answers a plain-text request with a 400 and no data.
	if code, err := httpsGet(t, n.HTTPAddr(), "/readyz", nil); err == nil && code != http.StatusBadRequest {
		t.Errorf("plain-text HTTP client to the TLS port: %d, want an error or 400", code)
	}
	// The public port does not serve the peer service.
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(trusting)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := peerv1.NewPeerClient(cc).Deliver(t.Context(), &peerv1.DeliverRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Deliver on the public port: %v, want Unimplemented", err)
	}
}

// TestPublicTLSClientCertificates: with a client CA, only clients with a
// certificate it signed are served.
func TestPublicTLSClientCertificates(t *testing.T) {
	ca, clients, other := newTestCA(t, "public"), newTestCA(t, "clients"), newTestCA(t, "other")
	srv := ca.issue(t, "node", "localhost")
	cfg := testConfig("solo")
	cfg.Peer.Addr = "127.0.0.1:0"
	cfg.API.TLS = TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: clients.File}
	n := startNode(t, cfg)
	waitMembers(t, []*Node{n}, []string{"solo"})

	client := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: certs, MinVersion: tls.VersionTLS12}
	}
	good, bad := client(clients.issue(t, "app").Certificate), client(other.issue(t, "app").Certificate)
	for _, tt := range []struct {
		name string
		tc   *tls.Config
		ok   bool
	}{
		{"certificate of the client CA", good, true},
		{"certificate of another CA", bad, false},
		{"no certificate", client(), false},
	} {
		err := grpcCheck(t, n.GRPCAddr(), credentials.NewTLS(tt.tc))
		if (err == nil) != tt.ok || (err != nil && status.Code(err) != codes.Unavailable) {
			t.Errorf("%s: gRPC %v, want ok %v", tt.name, err, tt.ok)
		}
		code, err := httpsGet(t, n.HTTPAddr(), "/healthz", tt.tc)
		if (err == nil && code == http.StatusOK) != tt.ok {
			t.Errorf("%s: HTTPS %d %v, want ok %v", tt.name, code, err, tt.ok)
		}
	}
}

// mtlsConfig edits a test node's config for mutual TLS between peers with
// certificates of ca, encrypted gossip with key, and a peer port.
func mtlsConfig(t *testing.T, ca *testCA, key []byte) func(*Config) {
	return func(c *Config) {
		cert := ca.issue(t, c.Name, c.Name)
		c.Peer.Addr = "127.0.0.1:0"
		c.Peer.TLS = PeerTLSFiles{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: ca.File}
		c.Gossip.Key = key
	}
}

// joinFailures is a slog.Handler that counts a node's failed attempts to
// join its seeds.
type joinFailures struct{ n atomic.Int32 }

func (h *joinFailures) Enabled(context.Context, slog.Level) bool { return true }
func (h *joinFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "could not join any seed; retrying" {
		h.n.Add(1)
	}
	return nil
}
func (h *joinFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *joinFailures) WithGroup(string) slog.Handler      { return h }

// TestClusterOverMutualTLS runs a cluster whose nodes speak mutual TLS on
// their peer ports and encrypt their gossip. Checks forwarded to another
// owner are answered (peer traffic flows); a caller without a certificate
// of the cluster's CA cannot deliver to a node, one whose certificate names
// another node has its envelopes rejected, and a node without the gossip
// key cannot join.
func TestClusterOverMutualTLS(t *testing.T) {
	ca, rogue := newTestCA(t, "peers"), newTestCA(t, "rogue")
	key := []byte("0123456789abcdef0123456789abcdef")
	nodes := startCluster(t, 3, mtlsConfig(t, ca, key))
	n1 := nodes[0]
	if n1.PeerAddr() == n1.GRPCAddr() {
		t.Fatalf("peer address %s is the gRPC address", n1.PeerAddr())
	}

	for _, owner := range []string{"n2", "n3"} {
		k := keysOwnedBy(t, n1, "mtls", owner, 1)[0]
		it := item1("mtls", k, 10, ringlimitv1.Mode_MODE_OWNER)
		resp, err := n1.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Items[0]; r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || r.Owner != owner || r.Degraded {
			t.Errorf("owner-mode check of a key of %s via n1: %v", owner, r)
		}
	}

	deliver := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(n1.PeerAddr(), grpc.WithTransportCredentials(creds), grpc.WithAuthority("n1"))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = peerv1.NewPeerClient(cc).Deliver(ctx, &peerv1.DeliverRequest{Envelopes: []*peerv1.Envelope{
			{From: "n2", To: "n1", Incarnation: 1, Body: &peerv1.Envelope_HandoffAck{HandoffAck: &peerv1.HandoffAck{Seq: 1}}}}})
		return err
	}
	asPeer := func(ca *testCA, cert issued) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "n1", Certificates: []tls.Certificate{cert.Certificate}, MinVersion: tls.VersionTLS12})
	}
	if err := deliver(asPeer(ca, ca.issue(t, "n2", "n2"))); err != nil {
		t.Errorf("Deliver with n2's certificate: %v", err)
	}
	if err := deliver(asPeer(ca, rogue.issue(t, "n2", "n2"))); status.Code(err) != codes.Unavailable {
		t.Errorf("Deliver with a certificate of another CA: %v, want Unavailable", err)
	}
	if err := deliver(insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Errorf("Deliver in plain text: %v, want Unavailable", err)
	}
	before := metricValue(t, n1, `ringlimit_peer_envelopes_rejected_total{reason="unauthorized"}`)
	if err := deliver(asPeer(ca, ca.issue(t, "n3", "n3"))); err != nil {
		t.Errorf("Deliver as n2 with n3's certificate: %v, want success and the envelope rejected", err)
	}
	if after := metricValue(t, n1, `ringlimit_peer_envelopes_rejected_total{reason="unauthorized"}`); after != before+1 {
		t.Errorf("unauthorized envelopes %v -> %v, want +1", before, after)
	}

	// A node with the right certificate but another gossip key.
	fails := &joinFailures{}
	cfg := testConfig("n4", n1.GossipAddr())
	mtlsConfig(t, ca, []byte("fedcba9876543210fedcba9876543210"))(&cfg)
	cfg.Logger = slog.New(fails)
	n4 := startNode(t, cfg)
	waitFor(t, 10*time.Second, "n4 fails to join three times", func() bool { return fails.n.Load() >= 3 })
	if n4.Ready() || !slices.Equal(n1.Members(), []string{"n1", "n2", "n3"}) || !slices.Equal(n4.Members(), []string{"n4"}) {
		t.Errorf("n4 ready %v, n1's members %v, n4's %v: want n4 kept out", n4.Ready(), n1.Members(), n4.Members())
	}
}

// metricValue returns the value of the series (name and labels as
// exposed) on n's /metrics, or 0 if absent.
func metricValue(t *testing.T, n *Node, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

func TestSecurityConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" for valid
	}{
		{"TLS with a peer port", func(c *Config) { c.API.TLS, c.Peer.Addr = TLSFiles{CertFile: "c", KeyFile: "k"}, ":0" }, ""},
		{"TLS without a peer port (one is made)", func(c *Config) { c.API.TLS = TLSFiles{CertFile: "c", KeyFile: "k"} }, ""},
		{"no peer authentication", func(c *Config) { c.Peer.Secret = nil }, "Peer.Secret"},
		{"peers authenticated by the gossip key", func(c *Config) { c.Peer.Secret, c.Gossip.Key = nil, make([]byte, 16) }, ""},
		{"insecure peers, explicitly", func(c *Config) { c.Peer.Secret, c.Peer.Insecure = nil, true }, ""},
		{"insecure peers with a secret", func(c *Config) { c.Peer.Insecure = true }, "Peer.Insecure"},
		{"short peer secret", func(c *Config) { c.Peer.Secret = make([]byte, 15) }, "Peer.Secret"},
		{"peer secret and a name that is not a DNS name", func(c *Config) { c.Name = "node_1" }, "DNS name"},
		{"TLS key without certificate", func(c *Config) { c.API.TLS, c.Peer.Addr = TLSFiles{KeyFile: "k"}, ":0" }, "CertFile and KeyFile"},
		{"client CA alone", func(c *Config) { c.API.TLS = TLSFiles{ClientCAFile: "ca"} }, "ClientCAFile"},
		{"peer TLS", func(c *Config) { c.Peer.TLS, c.Peer.Addr = PeerTLSFiles{"c", "k", "ca"}, ":0" }, ""},
		{"peer TLS without CA", func(c *Config) { c.Peer.TLS, c.Peer.Addr = PeerTLSFiles{CertFile: "c", KeyFile: "k"}, ":0" }, "CAFile"},
		{"peer TLS with an IP as name", func(c *Config) { c.Name, c.Peer.TLS, c.Peer.Addr = "10.0.0.1", PeerTLSFiles{"c", "k", "ca"}, ":0" }, "DNS name"},
		{"bad peer address", func(c *Config) { c.Peer.Addr = "7201" }, "Peer.Addr"},
		{"secondary gossip key without primary", func(c *Config) { c.Gossip.SecondaryKeys = [][]byte{make([]byte, 16)} }, "Gossip.SecondaryKeys"},
		{"secondary gossip key of a bad size", func(c *Config) {
			c.Gossip.Key, c.Gossip.SecondaryKeys = make([]byte, 16), [][]byte{make([]byte, 8)}
		}, "Gossip.SecondaryKeys"},
		{"sidecar on loopback", func(c *Config) { c.Sidecar = true }, ""},
		{"sidecar on every interface", func(c *Config) { c.Sidecar, c.API.HTTPAddr = true, ":8101" }, "HTTPAddr"},
		{"sidecar gossiping out without peer port", func(c *Config) { c.Sidecar, c.Gossip.Addr = true, "0.0.0.0:7946" }, "Peer.Addr"},
		{"zero header bytes", func(c *Config) { c.API.MaxHeaderBytes = 0 }, "MaxHeaderBytes"},
		{"zero connection age", func(c *Config) { c.API.MaxConnectionAge = 0 }, "MaxConnectionAge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Name = "n"
			c.Peer.Secret = testPeerSecret
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an ErrConfig naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestStartFailsOnBadCertificateFiles(t *testing.T) {
	ca := newTestCA(t, "ca")
	cert := ca.issue(t, "solo", "solo")
	for _, tt := range []struct {
		name string
		edit func(*Config)
	}{
		{"missing TLS certificate", func(c *Config) { c.API.TLS = TLSFiles{CertFile: cert.CertFile + ".none", KeyFile: cert.KeyFile} }},
		{"TLS key of another certificate", func(c *Config) {
			c.API.TLS = TLSFiles{CertFile: cert.CertFile, KeyFile: ca.issue(t, "x").KeyFile}
		}},
		{"client CA without a certificate", func(c *Config) {
			c.API.TLS = TLSFiles{CertFile: cert.CertFile, KeyFile: cert.KeyFile, ClientCAFile: cert.KeyFile}
		}},
		{"missing peer CA", func(c *Config) { c.Peer.TLS = PeerTLSFiles{cert.CertFile, cert.KeyFile, ca.File + ".none"} }},
	} {
		cfg := testConfig("solo")
		cfg.Peer.Addr = "127.0.0.1:0"
		tt.edit(&cfg)
		if n, err := Start(t.Context(), cfg); err == nil {
			n.Close()
			t.Errorf("%s: Start succeeded", tt.name)
		}
	}
}
