package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// serveTLS is serve with server credentials.
func serveTLS(t *testing.T, creds credentials.TransportCredentials, register func(grpc.ServiceRegistrar)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds))
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String()
}

// newMTLSNode returns a transport for name that speaks mutual TLS with id,
// both as a client and as the server of its own port; served, not started.
func newMTLSNode(t *testing.T, name string, id *MutualTLS) *tnode {
	t.Helper()
	cfg := DefaultTransportConfig()
	cfg.Self = name
	cfg.Clock = fixedClock{t0}
	cfg.Credentials = id.ClientCredentials()
	cfg.Authorize = AuthorizeCertificate
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return &tnode{Transport: tr, h: &recorder{}, addr: serveTLS(t, id.ServerCredentials(), tr.RegisterServer)}
}

// TestTransportsOverMutualTLS: two transports whose certificates name them
// exchange envelopes both ways; each dials the other by name.
func TestTransportsOverMutualTLS(t *testing.T) {
	ca := newTestCA(t, "peer CA")
	a := newMTLSNode(t, "a", ca.identity(t, ca.issue(t, "a", "a")))
	b := newMTLSNode(t, "b.cluster.internal", ca.identity(t, ca.issue(t, "b", "b.cluster.internal"))) // a DNS name
	ms := membersOf(a, b)
	a.SetPeers(ms)
	b.SetPeers(ms)
	a.start(t)
	b.start(t)
	a.Send("b.cluster.internal", env("a", "b.cluster.internal", 1))
	b.Send("a", env("b.cluster.internal", "a", 2))
	waitFor(t, 10*time.Second, "both envelopes delivered over mTLS", func() bool {
		return slices.Equal(b.h.got("a"), []uint64{1}) && slices.Equal(a.h.got("b.cluster.internal"), []uint64{2})
	})
	if a.h.unreachableOf("b.cluster.internal")+b.h.unreachableOf("a") != 0 {
		t.Errorf("a peer was reported unreachable")
	}
}

// TestMutualTLSRejects calls the Deliver of a node ("b") that requires
// mutual TLS, as the member "a", with every kind of credentials: only a
// certificate of the cluster's CA naming the sender gets its envelope
// through. A client also refuses a server whose certificate names another
// node.
func TestMutualTLSRejects(t *testing.T) {
	ca, rogue := newTestCA(t, "peer CA"), newTestCA(t, "rogue CA")
	b := newMTLSNode(t, "b", ca.identity(t, ca.issue(t, "b", "b")))
	b.SetPeers([]Member{{Name: "a", GRPCAddr: "127.0.0.1:1"}, {Name: "b", GRPCAddr: b.addr}})
	b.start(t)
	// A server of the right CA whose certificate names c, not b.
	impostor := newMTLSNode(t, "b", ca.identity(t, ca.issue(t, "c", "c")))
	impostor.SetPeers([]Member{{Name: "a", GRPCAddr: "127.0.0.1:1"}, {Name: "b", GRPCAddr: impostor.addr}})
	impostor.start(t)

	noCert := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool(), ServerName: "b"})
	tests := []struct {
		name     string
		creds    credentials.TransportCredentials
		addr     string
		wantCode codes.Code
		reason   string // with OK: "" accepted, else the rejection counted
	}{
		{"CA-signed, names a", ca.identity(t, ca.issue(t, "a", "a")).ClientCredentials(), b.addr, codes.OK, ""},
		{"CA-signed, common name a and no SAN", ca.identity(t, ca.issue(t, "a")).ClientCredentials(), b.addr, codes.OK, ""},
		{"CA-signed, names mallory, speaks as a", ca.identity(t, ca.issue(t, "mallory", "mallory")).ClientCredentials(), b.addr, codes.OK, rejectUnauthorized},
		{"CA-signed, SAN mallory and common name a", ca.identity(t, ca.issue(t, "a", "mallory")).ClientCredentials(), b.addr, codes.OK, rejectUnauthorized},
		{"signed by another CA", ca.identity(t, rogue.issue(t, "a", "a")).ClientCredentials(), b.addr, codes.Unavailable, ""},
		{"self-signed by another CA it trusts", rogue.identity(t, rogue.issue(t, "a", "a")).ClientCredentials(), b.addr, codes.Unavailable, ""},
		{"TLS without a client certificate", noCert, b.addr, codes.Unavailable, ""},
		{"plain text", insecure.NewCredentials(), b.addr, codes.Unavailable, ""},
		{"server's certificate names c, not b", ca.identity(t, ca.issue(t, "a", "a")).ClientCredentials(), impostor.addr, codes.Unavailable, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deliverAs(t, b, tt.addr, tt.creds, uint64(i+1), tt.wantCode, tt.reason)
		})
	}
	if impostor.h.count() != 0 {
		t.Errorf("the impostor received %d envelopes", impostor.h.count())
	}
}

// deliverAs calls Deliver at addr (b's, or an impostor's) with creds,
// carrying one envelope from "a" to "b" of sequence seq, and checks the
// call's code against wantCode and, when the call succeeds, that b took the
// envelope (reason "") or rejected it counted under reason.
func deliverAs(t *testing.T, b *tnode, addr string, creds credentials.TransportCredentials, seq uint64, wantCode codes.Code, reason string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	counter := b.metrics.received
	if reason != "" {
		counter = b.metrics.rejected.WithLabelValues(reason)
	}
	before, handled := counterValue(t, counter), b.h.count()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = peerv1.NewPeerClient(conn).Deliver(ctx, &peerv1.DeliverRequest{Envelopes: []*peerv1.Envelope{env("a", "b", seq)}})
	if got := status.Code(err); got != wantCode {
		t.Fatalf("Deliver: %v, want %v", err, wantCode)
	}
	wantHandled := handled
	if wantCode == codes.OK && reason == "" {
		wantHandled++
	}
	if got := b.h.count(); got != wantHandled {
		t.Errorf("b's Handler got %d envelopes, want %d", got, wantHandled)
	}
	if wantCode == codes.OK {
		if after := counterValue(t, counter); after != before+1 {
			t.Errorf("counter %s went %v -> %v, want +1", orAccepted(reason), before, after)
		}
	}
}

func TestAuthorizeCertificateWithoutTLS(t *testing.T) {
	if err := AuthorizeCertificate(context.Background(), "a"); !errors.Is(err, ErrNoPeerCertificate) {
		t.Errorf("AuthorizeCertificate with no peer = %v, want ErrNoPeerCertificate", err)
	}
}

func TestCertificateNames(t *testing.T) {
	ca := newTestCA(t, "CA")
	tests := []struct {
		name string
		cn   string
		dns  []string
		node string
		want bool
	}{
		{"DNS SAN", "x", []string{"n1", "n2"}, "n2", true},
		{"common name ignored when there are DNS SANs", "n1", []string{"n2"}, "n1", false},
		{"common name without DNS SAN", "n1", nil, "n1", true},
		{"other name", "n1", []string{"n1"}, "n3", false},
		{"case matters", "", []string{"N1"}, "n1", false},
		{"no wildcard", "", []string{"*.cluster"}, "n1.cluster", false},
		{"empty node name", "", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CertificateNames(ca.issue(t, tt.cn, tt.dns...).Leaf, tt.node); got != tt.want {
				t.Errorf("CertificateNames(CN %q, SAN %q, %q) = %v, want %v", tt.cn, tt.dns, tt.node, got, tt.want)
			}
		})
	}
	if CertificateNames(nil, "n1") {
		t.Errorf("CertificateNames(nil) = true")
	}
}

func TestValidTLSName(t *testing.T) {
	for name, want := range map[string]bool{
		"n1": true, "node-1": true, "n1.cluster.internal": true, "N1": true,
		"": false, "-n1": false, "n1-": false, "n1-.x": false, "a..b": false, ".a": false, "a.": false,
		"n 1": false, "n_1": false, "10.0.0.1": false, "::1": false, "n1:7101": false, "é": false,
		string(make([]byte, 254)): false,
	} {
		if got := ValidTLSName(name); got != want {
			t.Errorf("ValidTLSName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestLoadMutualTLS(t *testing.T) {
	ca := newTestCA(t, "CA")
	dir := t.TempDir()
	cert := ca.issue(t, "a", "a")
	write := func(name string, blocks ...*pem.Block) string {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile := write("a.pem", &pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	keyFile := write("a.key", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	caFile := write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
	junk := write("junk.pem", &pem.Block{Type: "NOTHING", Bytes: []byte("x")})
	if _, err := LoadMutualTLS(certFile, keyFile, caFile); err != nil {
		t.Fatalf("LoadMutualTLS: %v", err)
	}
	for _, tt := range []struct{ name, cert, key, ca string }{
		{"missing certificate", filepath.Join(dir, "none"), keyFile, caFile},
		{"key is not the certificate's", certFile, certFile, caFile},
		{"missing CA", certFile, keyFile, filepath.Join(dir, "none")},
		{"no certificate in the CA file", certFile, keyFile, junk},
	} {
		if _, err := LoadMutualTLS(tt.cert, tt.key, tt.ca); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: LoadMutualTLS = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
	if _, err := NewMutualTLS(tls.Certificate{}, ca.Pool()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewMutualTLS without a certificate = %v, want ErrInvalidConfig", err)
	}
}
