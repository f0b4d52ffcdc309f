package ringlimit

import (
	"crypto/tls"
	"fmt"
	"net"

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
	if err := checkAddr("PeerAddr", c.PeerAddr, true); err != nil {
		return err
	}
	if c.TLS.Enabled() {
		switch {
		case c.TLS.CertFile == "" || c.TLS.KeyFile == "":
			return configErr("TLS", "needs both CertFile and KeyFile")
		case c.PeerAddr == "":
			return configErr("TLS", "the public API's TLS needs the peer service on a port of its own: set PeerAddr")
		}
	} else if c.TLS.ClientCAFile != "" {
		return configErr("TLS", "ClientCAFile without a server certificate (CertFile, KeyFile)")
	}
	if c.PeerTLS.Enabled() {
		switch {
		case c.PeerTLS.CertFile == "" || c.PeerTLS.KeyFile == "" || c.PeerTLS.CAFile == "":
			return configErr("PeerTLS", "needs CertFile, KeyFile and CAFile")
		case c.PeerAddr == "":
			return configErr("PeerTLS", "mutual TLS between peers needs the peer service on a port of its own: set PeerAddr")
		case c.Name != "" && !peer.ValidTLSName(c.Name):
			return configErr("Name", "%q: with PeerTLS a node's name is its TLS server name and must be a DNS name (letters, digits, '-', '.')", c.Name)
		}
	}
	if c.Sidecar {
		for _, a := range []struct{ field, addr string }{{"GRPCAddr", c.GRPCAddr}, {"HTTPAddr", c.HTTPAddr}} {
			if a.addr != "" && !isLoopback(a.addr) {
				return configErr(a.field, "%q: in sidecar mode the public API binds to a loopback address (127.0.0.1, ::1 or localhost)", a.addr)
			}
		}
		if !isLoopback(c.GossipAddr) && c.PeerAddr == "" {
			return configErr("PeerAddr", "in sidecar mode, with gossip on %q, the peers need a port of their own: the public gRPC port is on loopback", c.GossipAddr)
		}
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

// mutualTLS loads the peers' identity, or returns nil when mutual TLS is
// off.
func (f PeerTLSFiles) mutualTLS() (*peer.MutualTLS, error) {
	if !f.Enabled() {
		return nil, nil
	}
	m, err := peer.LoadMutualTLS(f.CertFile, f.KeyFile, f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("ringlimit: peer TLS: %w", err)
	}
	return m, nil
}
