package peer

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"time"
)

// MinSecretLen is the shortest cluster secret SecretTLS accepts, in bytes:
// 128 bits, the size of the shortest gossip key.
const MinSecretLen = 16

// secretCAInfo is the HKDF info that derives a cluster CA's key from a
// cluster secret. A new version of the derivation gets a new label, so that
// the same secret never yields one key for two purposes.
const secretCAInfo = "ringlimit peer CA v1"

// secretLeafLife is how long the certificate SecretTLS issues is valid, from
// an hour before now (clocks of members differ). A process that lives longer
// is restarted long before; the certificate is never written anywhere.
const secretLeafLife = 10 * 365 * 24 * time.Hour

// SecretTLS returns the mutual TLS identity of node name in a cluster whose
// members share secrets instead of certificates. Each secret (at least
// MinSecretLen bytes) deterministically derives a certificate authority: its
// Ed25519 key is HKDF-SHA256(secret, "ringlimit peer CA v1"), so every member
// holding the secret holds the same CA, and nobody else does. The node's
// certificate, for a fresh key drawn from random, names name and is signed
// by the CA of secrets[0]; the identity trusts the CAs of every secret, so
// a secret is rotated by three rolling restarts, as gossip keys are: add the
// new secret after the old, then put it first, then drop the old.
//
// The result is a MutualTLS like any other: connections are encrypted and
// both ends authenticated, replayed or altered records are refused by TLS,
// and AuthorizeCertificate ties each envelope's From to the name in the
// client's certificate. What a secret cannot give is the difference between
// members: any holder can issue a certificate for any name (docs/security.md).
func SecretTLS(name string, secrets [][]byte, now time.Time, random io.Reader) (*MutualTLS, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: peer secret: none given", ErrInvalidConfig)
	}
	if !ValidTLSName(name) {
		return nil, fmt.Errorf("%w: peer secret: node name %q is not a DNS name", ErrInvalidConfig, name)
	}
	pool := x509.NewCertPool()
	var signer *x509.Certificate
	var signerKey ed25519.PrivateKey
	for i, s := range secrets {
		ca, key, err := secretCA(s)
		if err != nil {
			return nil, fmt.Errorf("%w: peer secret %d: %v", ErrInvalidConfig, i, err)
		}
		pool.AddCert(ca)
		if i == 0 {
			signer, signerKey = ca, key
		}
	}
	pub, priv, err := ed25519.GenerateKey(random)
	if err != nil {
		return nil, fmt.Errorf("peer: peer secret: node key: %w", err)
	}
	serial := make([]byte, 16)
	if _, err := io.ReadFull(random, serial); err != nil {
		return nil, fmt.Errorf("peer: peer secret: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetBytes(serial),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(secretLeafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(random, tmpl, signer, pub, signerKey)
	if err != nil {
		return nil, fmt.Errorf("peer: peer secret: node certificate: %w", err)
	}
	return NewMutualTLS(tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pool)
}

// secretCA returns the certificate authority that secret derives: the same
// certificate, byte for byte, on every member (a fixed serial and validity,
// and Ed25519 signatures are deterministic).
func secretCA(secret []byte) (*x509.Certificate, ed25519.PrivateKey, error) {
	if len(secret) < MinSecretLen {
		return nil, nil, fmt.Errorf("%d bytes, at least %d", len(secret), MinSecretLen)
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, secretCAInfo, ed25519.SeedSize)
	if err != nil {
		return nil, nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	id := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ringlimit peer CA " + hex.EncodeToString(id[:8])},
		NotBefore:             time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
		SubjectKeyId:          id[:20],
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}
