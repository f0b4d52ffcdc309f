package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
)

// tlsFlags are the TLS flags shared by every command.
type tlsFlags struct {
	enable     bool
	ca         string
	cert, key  string
	serverName string
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&t.enable, "tls", false, "speak TLS, verifying the node's certificate against the system's roots (implied by the other --tls-* flags)")
	fs.StringVar(&t.ca, "tls-ca", "", "PEM file of the CA(s) that signed the nodes' certificates, instead of the system's roots")
	fs.StringVar(&t.cert, "tls-cert", "", "PEM certificate file of this client, for nodes that require mutual TLS (with --tls-key)")
	fs.StringVar(&t.key, "tls-key", "", "PEM private key file of --tls-cert")
	fs.StringVar(&t.serverName, "tls-server-name", "", "name to verify in the node's certificate, when it differs from the host dialled")
}

// on reports whether TLS was asked for.
func (t *tlsFlags) on() bool {
	return t.enable || t.ca != "" || t.cert != "" || t.key != "" || t.serverName != ""
}

// check validates the combination without reading files.
func (t *tlsFlags) check() error {
	if (t.cert == "") != (t.key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	return nil
}

// config loads the files and returns the TLS configuration, or nil when TLS
// is off.
func (t *tlsFlags) config() (*tls.Config, error) {
	if !t.on() {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: t.serverName, MinVersion: tls.VersionTLS12}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate found", t.ca)
		}
	}
	if t.cert != "" {
		c, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}
