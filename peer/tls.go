package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"

	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
)

// Errors of mutual TLS between peers.
var (
	// ErrNoPeerCertificate: a Deliver came over a connection without a
	// verified client certificate (plain text, or TLS without mTLS).
	ErrNoPeerCertificate = errors.New("peer: no verified peer certificate")
	// ErrCertificateName: the peer's certificate does not name the node it
	// speaks for.
	ErrCertificateName = errors.New("peer: certificate does not name the node")
)

// MutualTLS is a node's identity between peers: its certificate and the
// certificate authority (CA) that signs every member's certificate. It makes
// the credentials of both ends of a peer connection and the
// TransportConfig.Authorize check that ties a certificate to a node name.
//
// The rule, on both ends: a connection is accepted only if the other end
// presents a certificate that chains to the CA, and that certificate must
// name the node it speaks for (CertificateNames): the server's, the member
// the client meant to dial (the Transport dials with the member's name as
// the authority, hence the TLS server name); the client's, the From of every
// envelope it delivers. A member's certificate therefore carries its node
// name as a DNS subject alternative name (or, with no DNS SAN at all, as its
// subject common name), and both extended key usages, server and client
// authentication.
//
// A MutualTLS is immutable and safe for concurrent use. Rotating a
// certificate means restarting the node with the new files.
type MutualTLS struct {
	cert tls.Certificate
	cas  *x509.CertPool
}

// NewMutualTLS returns the identity of a node that presents cert and trusts
// the peer certificates signed by cas.
func NewMutualTLS(cert tls.Certificate, cas *x509.CertPool) (*MutualTLS, error) {
	if len(cert.Certificate) == 0 || cert.PrivateKey == nil {
		return nil, fmt.Errorf("%w: peer TLS: no certificate or private key", ErrInvalidConfig)
	}
	if cas == nil {
		return nil, fmt.Errorf("%w: peer TLS: no CA", ErrInvalidConfig)
	}
	return &MutualTLS{cert: cert, cas: cas}, nil
}

// LoadMutualTLS reads a node's PEM certificate (chain) and private key and
// the cluster's PEM CA bundle, and returns its identity.
func LoadMutualTLS(certFile, keyFile, caFile string) (*MutualTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: peer TLS certificate: %v", ErrInvalidConfig, err)
	}
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, err
	}
	return NewMutualTLS(cert, pool)
}

// LoadCertPool reads a PEM bundle of CA certificates.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %v", ErrInvalidConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA: no PEM certificate in %s", ErrInvalidConfig, file)
	}
	return pool, nil
}

// ServerConfig returns the TLS configuration of the peer port: it presents
// the node's certificate and requires a client certificate signed by the
// CA. The client's node name is checked per envelope by Authorize.
func (m *MutualTLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{m.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.cas,
	}
}

// ClientConfig returns the TLS configuration of connections to peers: it
// presents the node's certificate and accepts a server only if its
// certificate chains to the CA and names the node dialled (the TLS server
// name, which the Transport sets to the member's name).
//
// Go's own verification is replaced (InsecureSkipVerify with
// VerifyConnection doing the whole check), because it matches the server
// name against DNS SANs only, and the rule here also accepts a common name
// on a certificate without DNS SANs.
func (m *MutualTLS) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		Certificates:       []tls.Certificate{m.cert},
		InsecureSkipVerify: true, // VerifyConnection verifies the chain and the name
		VerifyConnection:   m.verifyServer,
	}
}

// verifyServer checks the server's chain against the CA and its name
// against the server name dialled.
func (m *MutualTLS) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peer: the server presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         m.cas,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("peer: server certificate: %w", err)
	}
	if cs.ServerName == "" || !CertificateNames(leaf, cs.ServerName) {
		return fmt.Errorf("%w: the server's certificate does not name %q", ErrCertificateName, cs.ServerName)
	}
	return nil
}

// ServerCredentials returns the gRPC credentials of the peer port's server.
func (m *MutualTLS) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(m.ServerConfig())
}

// ClientCredentials returns the gRPC credentials for
// TransportConfig.Credentials.
func (m *MutualTLS) ClientCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(m.ClientConfig())
}

// AuthorizeCertificate is a TransportConfig.Authorize for mutual TLS: it
// accepts an envelope from from only if the call came over TLS with a
// client certificate verified by the server (ServerConfig) that names from
// (CertificateNames). It does not block.
func AuthorizeCertificate(ctx context.Context, from string) error {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return ErrNoPeerCertificate
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ErrNoPeerCertificate
	}
	if !CertificateNames(info.State.VerifiedChains[0][0], from) {
		return fmt.Errorf("%w: the client's certificate does not name %q", ErrCertificateName, from)
	}
	return nil
}

// CertificateNames reports whether cert names the node name: name is one of
// its DNS subject alternative names or, for a certificate with no DNS SAN,
// its subject common name. The comparison is exact (no wildcards, case
// sensitive): node names are identities, not host names.
func CertificateNames(cert *x509.Certificate, name string) bool {
	if name == "" || cert == nil {
		return false
	}
	if len(cert.DNSNames) > 0 {
		return slices.Contains(cert.DNSNames, name)
	}
	return cert.Subject.CommonName == name
}

// ValidTLSName reports whether name can be a node's name under mutual TLS:
// it travels as the TLS server name, so it must be a DNS name (letters,
// digits, '-' and '.', at most 253 bytes, labels of at most 63) and not an
// IP address, which TLS does not send as a server name.
func ValidTLSName(name string) bool {
	if name == "" || len(name) > 253 || net.ParseIP(name) != nil {
		return false
	}
	label := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 || name[i-1] == '-' {
				return false
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' && label > 0:
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0 && name[len(name)-1] != '-'
}
