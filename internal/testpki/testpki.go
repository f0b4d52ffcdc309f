// Package testpki makes certificate authorities and certificates for tests:
// ECDSA P-256 keys, valid over fixed instants that span any plausible run,
// so that no test reads the clock to make them.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// The validity of every certificate made here.
var (
	notBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter  = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// serial numbers the certificates, unique within a test binary.
var serial atomic.Int64

// CA is a certificate authority made for one test.
type CA struct {
	// Cert is the CA's certificate; Cert.Raw its DER form.
	Cert *x509.Certificate
	key  crypto.Signer
}

// NewCA returns a new CA whose certificate's common name is cn. It fails t
// on error.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return &CA{Cert: create(t, tmpl, tmpl, key, key), key: key}
}

// Pool returns a pool holding the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue returns a certificate signed by ca for the common name cn with the
// IP SANs ips and the DNS SANs dns, for servers and clients both. Its Leaf
// is set and its PrivateKey is an *ecdsa.PrivateKey. It fails t on error.
func (ca *CA) Issue(t testing.TB, cn string, ips []net.IP, dns ...string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leaf := create(t, tmpl, ca.Cert, key, ca.key)
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// create signs tmpl (holding key's public half) by parent with signer and
// returns the parsed certificate.
func create(t testing.TB, tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
