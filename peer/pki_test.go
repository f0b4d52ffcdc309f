package peer

import (
	"crypto/tls"
	"testing"

	"github.com/ringlimit/ringlimit/internal/testpki"
)

// testCA is a certificate authority made for one test.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, cn string) *testCA { return &testCA{testpki.NewCA(t, cn)} }

// issue returns a certificate for cn with the DNS SANs dns, usable as a
// server and as a client.
func (ca *testCA) issue(t *testing.T, cn string, dns ...string) tls.Certificate {
	t.Helper()
	return ca.Issue(t, cn, nil, dns...)
}

// identity returns the MutualTLS of a node presenting cert and trusting ca.
func (ca *testCA) identity(t *testing.T, cert tls.Certificate) *MutualTLS {
	t.Helper()
	m, err := NewMutualTLS(cert, ca.Pool())
	if err != nil {
		t.Fatal(err)
	}
	return m
}
