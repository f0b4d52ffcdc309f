package ringlimit

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlimit/ringlimit/internal/testpki"
)

// testCA is a certificate authority made for one test; it writes its PEM
// files into the test's temporary directory.
type testCA struct {
	*testpki.CA
	dir string
	// File is the CA's PEM certificate.
	File string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca := &testCA{CA: testpki.NewCA(t, name), dir: t.TempDir()}
	ca.File = ca.write(t, name+"-ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
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

// issued is a certificate with its key, in memory and as PEM files.
type issued struct {
	tls.Certificate
	CertFile, KeyFile string
}

// issue returns a certificate for the common name cn with the DNS SANs
// dns and the IP SAN 127.0.0.1, for servers and clients both.
func (ca *testCA) issue(t *testing.T, cn string, dns ...string) issued {
	t.Helper()
	cert := ca.Issue(t, cn, []net.IP{net.IPv4(127, 0, 0, 1)}, dns...)
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	serial := cert.Leaf.SerialNumber.String()
	return issued{
		Certificate: cert,
		CertFile:    ca.write(t, cn+"-"+serial+".pem", &pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		KeyFile:     ca.write(t, cn+"-"+serial+".key", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}
