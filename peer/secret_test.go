package peer

import (
	"context"
	"crypto/rand"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

var (
	testSecret  = []byte("0123456789abcdef0123456789abcdef")
	otherSecret = []byte("fedcba9876543210fedcba9876543210")
)

// secretIdentity is SecretTLS or the test's end.
func secretIdentity(t *testing.T, name string, secrets ...[]byte) *MutualTLS {
	t.Helper()
	m, err := SecretTLS(name, secrets, t0, rand.Reader)
	if err != nil {
		t.Fatalf("SecretTLS(%s): %v", name, err)
	}
	return m
}

// TestSecretTLS: two transports holding the same secret exchange envelopes,
// in the middle of a rotation too: a signs with the new secret and still
// trusts the old; b signs with the old and already trusts the new.
func TestSecretTLS(t *testing.T) {
	a := newMTLSNode(t, "a", secretIdentity(t, "a", otherSecret, testSecret)) // rotating
	b := newMTLSNode(t, "b", secretIdentity(t, "b", testSecret, otherSecret))
	ms := membersOf(a, b)
	a.SetPeers(ms)
	b.SetPeers(ms)
	a.start(t)
	b.start(t)
	a.Send("b", env("a", "b", 1))
	b.Send("a", env("b", "a", 2))
	waitFor(t, 10*time.Second, "both envelopes delivered over secret-derived mTLS", func() bool {
		return slices.Equal(b.h.got("a"), []uint64{1}) && slices.Equal(a.h.got("b"), []uint64{2})
	})
}

// TestSecretTLSRejects calls b, which holds the cluster secret, as "a" with
// every kind of credentials a stranger or a member could bring: only a
// certificate of the secret's CA naming the sender gets its envelope
// through.
func TestSecretTLSRejects(t *testing.T) {
	b := newMTLSNode(t, "b", secretIdentity(t, "b", testSecret))
	b.SetPeers([]Member{{Name: "a", GRPCAddr: "127.0.0.1:1"}, {Name: "c", GRPCAddr: "127.0.0.1:1"}, {Name: "b", GRPCAddr: b.addr}})
	b.start(t)
	ca := newTestCA(t, "someone's CA")
	tests := []struct {
		name     string
		creds    credentials.TransportCredentials
		wantCode codes.Code
		reason   string
	}{
		{"the secret's certificate for a", secretIdentity(t, "a", testSecret).ClientCredentials(), codes.OK, ""},
		{"member c speaking as a", secretIdentity(t, "c", testSecret).ClientCredentials(), codes.OK, rejectUnauthorized},
		{"another secret's certificate for a", secretIdentity(t, "a", otherSecret).ClientCredentials(), codes.Unavailable, ""},
		{"another CA's certificate for a", ca.identity(t, ca.issue(t, "a", "a")).ClientCredentials(), codes.Unavailable, ""},
		{"plain text", insecure.NewCredentials(), codes.Unavailable, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deliverAs(t, b, b.addr, tt.creds, uint64(i+1), tt.wantCode, tt.reason)
		})
	}
}

// TestSecretTLSConfig: SecretTLS refuses short secrets, no secret and names
// that cannot be TLS server names; the CA a secret derives is the same on
// every call.
func TestSecretTLSConfig(t *testing.T) {
	for _, tt := range []struct {
		name    string
		node    string
		secrets [][]byte
	}{
		{"no secret", "a", nil},
		{"short secret", "a", [][]byte{[]byte("fifteen bytes..")}},
		{"short second secret", "a", [][]byte{testSecret, []byte("short")}},
		{"IP as a name", "10.0.0.1", [][]byte{testSecret}},
		{"name with a space", "node 1", [][]byte{testSecret}},
	} {
		if _, err := SecretTLS(tt.node, tt.secrets, t0, rand.Reader); err == nil {
			t.Errorf("%s: SecretTLS accepted it", tt.name)
		}
	}
	c1, _, err1 := secretCA(testSecret)
	c2, _, err2 := secretCA(testSecret)
	if err1 != nil || err2 != nil || !c1.Equal(c2) {
		t.Errorf("the CA of one secret differs between calls (%v, %v)", err1, err2)
	}
}

// TestIncarnationFromGossip: from a member that advertises an incarnation,
// only envelopes of that incarnation are accepted, the others counted; a
// restart is learnt from the next membership; a member that advertises
// none is not checked.
func TestIncarnationFromGossip(t *testing.T) {
	if m, err := decodeWireMeta(encodeMeta(ProtocolVersion, "10.0.0.1:7201", 42)); err != nil || m.Inc != 42 {
		t.Fatalf("metadata round trip: %+v %v, want incarnation 42", m, err)
	}
	b := newTNode(t, "b", nil)
	b.start(t)
	steps := []struct {
		name     string
		aInc     uint64 // what gossip says of a
		envInc   uint64 // what the envelope claims
		accepted bool
	}{
		{"the incarnation gossip reports", 7, 7, true},
		{"a later one, unannounced", 7, math.MaxUint64, false},
		{"an earlier one", 7, 6, false},
		{"a restart, announced by gossip", 8, 8, true},
		{"the old one after the restart", 8, 7, false},
		{"a member advertising none", 0, 12345, true},
	}
	for _, s := range steps {
		b.SetPeers([]Member{{Name: "a", GRPCAddr: "127.0.0.1:1", Incarnation: s.aInc}, {Name: "b", GRPCAddr: b.addr}})
		counter := b.metrics.received
		if !s.accepted {
			counter = b.metrics.rejected.WithLabelValues(rejectIncarnation)
		}
		before := counterValue(t, counter)
		if err := b.receive(context.Background(), []*peerv1.Envelope{env("a", "b", s.envInc)}); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := counterValue(t, counter) - before; got != 1 {
			t.Errorf("%s: accepted %v: counter moved %v, want 1", s.name, s.accepted, got)
		}
	}
}
