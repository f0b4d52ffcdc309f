package ringlimit

import (
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/ringlimit/ringlimit/peer"
)

// TLSFiles names the PEM files of TLS on the public gRPC and HTTP APIs.
// The zero value is TLS off.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate (with its chain)
	// and private key; both or neither.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a bundle of CAs, and every client of the
	// public APIs (health, readiness and metrics included) must present a
	// certificate signed by one of them.
	ClientCAFile string
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// PeerTLSFiles names the PEM files of mutual TLS between nodes. The zero
// value is mutual TLS off.
type PeerTLSFiles struct {
	// CertFile and KeyFile are the node's certificate and private key. The
	// certificate must name the node (its Name as a DNS SAN, or as the
	// common name of a certificate with no DNS SAN) and allow both server
	// and client authentication.
	CertFile, KeyFile string
	// CAFile is the bundle of CAs that sign the members' certificates.
	CAFile string
}

// Enabled reports whether mutual TLS is configured.
func (f PeerTLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// validateSecurity checks the TLS, peer port and sidecar fields.
func (c Config) validateSecurity() error {
	if err := checkAddr("Peer.Addr", c.Peer.Addr, true); err != nil {
		return err
	}
	if c.API.TLS.Enabled() {
		if c.API.TLS.CertFile == "" || c.API.TLS.KeyFile == "" {
			return configErr("API.TLS", "needs both CertFile and KeyFile")
		}
	} else if c.API.TLS.ClientCAFile != "" {
		return configErr("API.TLS", "ClientCAFile without a server certificate (CertFile, KeyFile)")
	}
	if c.Peer.TLS.Enabled() {
		switch {
		case c.Peer.TLS.CertFile == "" || c.Peer.TLS.KeyFile == "" || c.Peer.TLS.CAFile == "":
			return configErr("Peer.TLS", "needs CertFile, KeyFile and CAFile")
		}
	}
	if err := c.validatePeerAuth(); err != nil {
		return err
	}
	if c.Sidecar {
		for _, a := range []struct{ field, addr string }{{"API.GRPCAddr", c.API.GRPCAddr}, {"API.HTTPAddr", c.API.HTTPAddr}} {
			if a.addr != "" && !isLoopback(a.addr) {
				return configErr(a.field, "%q: in sidecar mode the public API binds to a loopback address (127.0.0.1, ::1 or localhost)", a.addr)
			}
		}
		if !isLoopback(c.Gossip.Addr) && c.Peer.Addr == "" {
			return configErr("Peer.Addr", "in sidecar mode, with gossip on %q, the peers need a port of their own: the public gRPC port is on loopback", c.Gossip.Addr)
		}
	}
	return nil
}

// Peer authentication modes, as /v1/cluster and the start log show them.
const (
	peerAuthCertificates = "mutual-tls"      // PeerTLS: certificates of the cluster's CA
	peerAuthSecret       = "secret"          // PeerSecret or the gossip key: a CA derived from it
	peerAuthNone         = "none (insecure)" // InsecurePeers
)

// peerAuth returns how peers authenticate under c.
func (c Config) peerAuth() string {
	switch {
	case c.Peer.TLS.Enabled():
		return peerAuthCertificates
	case len(c.Peer.Secret) > 0 || len(c.Gossip.Key) > 0:
		return peerAuthSecret
	}
	return peerAuthNone
}

// peerSecrets returns the secrets the peers' CA is derived from: PeerSecret,
// or the gossip keys, the one sent with first.
func (c Config) peerSecrets() [][]byte {
	if len(c.Peer.Secret) > 0 {
		return [][]byte{c.Peer.Secret}
	}
	return append([][]byte{c.Gossip.Key}, c.Gossip.SecondaryKeys...)
}

// validatePeerAuth checks that the peers authenticate, or that the
// operator said explicitly that they need not.
func (c Config) validatePeerAuth() error {
	if c.Peer.Insecure {
		if c.Peer.TLS.Enabled() || len(c.Peer.Secret) > 0 {
			return configErr("Peer.Insecure", "set together with Peer.TLS or Peer.Secret: choose one")
		}
		return nil
	}
	switch {
	case len(c.Peer.Secret) > 0 && len(c.Peer.Secret) < peer.MinSecretLen:
		return configErr("Peer.Secret", "%d bytes, at least %d", len(c.Peer.Secret), peer.MinSecretLen)
	case c.peerAuth() == peerAuthNone:
		return configErr("Peer.Secret", "the peers must authenticate each other: set Peer.Secret, a Gossip.Key (the secret is derived from it) or Peer.TLS; Peer.Insecure turns authentication off (docs/security.md)")
	case c.Name != "" && !peer.ValidTLSName(c.Name):
		return configErr("Name", "%q: peers authenticate by TLS, where a node's name is its server name and must be a DNS name (letters, digits, '-', '.')", c.Name)
	}
	return nil
}

// isLoopback reports whether the host of the host:port addr is a loopback
// address or "localhost". An empty host (every interface) is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serverTLS loads the public APIs' TLS configuration, or returns nil when
// TLS is off.
func (f TLSFiles) serverTLS() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("ringlimit: TLS certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile != "" {
		pool, err := peer.LoadCertPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("ringlimit: TLS client CA: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// mutualTLS loads the peers' identity from PeerTLS, or derives it from the
// peer secret, or returns nil when peers do not authenticate.
func (c Config) mutualTLS(now time.Time) (*peer.MutualTLS, error) {
	switch c.peerAuth() {
	case peerAuthCertificates:
		m, err := peer.LoadMutualTLS(c.Peer.TLS.CertFile, c.Peer.TLS.KeyFile, c.Peer.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ringlimit: peer TLS: %w", err)
		}
		return m, nil
	case peerAuthSecret:
		m, err := peer.SecretTLS(c.Name, c.peerSecrets(), now, rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("ringlimit: peer secret: %w", err)
		}
		return m, nil
	}
	return nil, nil
}
