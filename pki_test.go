package ringlimit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// The tests' certificates are valid over fixed instants that span any
// plausible run, so no test reads the clock to make them.
var (
	certNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	certNotAfter  = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	certSerial    atomic.Int64
)

// testCA is a certificate authority made for one test; it writes its PEM
// files into the test's temporary directory.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	dir  string
	// File is the CA's PEM certificate.
	File string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(certSerial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             certNotBefore,
		NotAfter:              certNotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, dir: t.TempDir()}
	ca.File = ca.write(t, name+"-ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: der})
	return ca
}

func (ca *testCA) write(t *testing.T, name string, b *pem.Block) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issued is a certificate with its key, in memory and as PEM files.
type issued struct {
	tls.Certificate
	CertFile, KeyFile string
}

// issue returns a certificate for the common name cn with the DNS SANs
// dns and the IP SAN 127.0.0.1, for servers and clients both.
func (ca *testCA) issue(t *testing.T, cn string, dns ...string) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    certNotBefore,
		NotAfter:     certNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	serial := tmpl.SerialNumber.String()
	return issued{
		Certificate: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		CertFile:    ca.write(t, cn+"-"+serial+".pem", &pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyFile:     ca.write(t, cn+"-"+serial+".key", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}
