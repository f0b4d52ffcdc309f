package main

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSecurityAndLimitFlags(t *testing.T) {
	k16 := bytes.Repeat([]byte{1}, 16)
	k32 := bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o options)
		wantErr string
	}{
		{
			name: "TLS, peer mTLS and the peer port",
			args: []string{"--name", "n1.cluster", "--peer-addr", "10.0.0.1:7201", "--tls-cert", "c.pem", "--tls-key", "k.pem",
				"--tls-client-ca", "ca.pem", "--peer-tls-cert", "pc.pem", "--peer-tls-key", "pk.pem", "--peer-tls-ca", "pca.pem"},
			check: func(t *testing.T, o options) {
				c := o.cfg
				got := []string{c.Peer.Addr, c.API.TLS.CertFile, c.API.TLS.KeyFile, c.API.TLS.ClientCAFile, c.Peer.TLS.CertFile, c.Peer.TLS.KeyFile, c.Peer.TLS.CAFile}
				want := []string{"10.0.0.1:7201", "c.pem", "k.pem", "ca.pem", "pc.pem", "pk.pem", "pca.pem"}
				if !slices.Equal(got, want) {
					t.Errorf("got %q, want %q", got, want)
				}
			},
		},
		{
			name: "TLS from the environment",
			env: map[string]string{"RINGLIMIT_TLS_CERT": "c.pem", "RINGLIMIT_TLS_KEY": "k.pem", "RINGLIMIT_PEER_ADDR": "127.0.0.1:0",
				"RINGLIMIT_GOSSIP_KEY": b64(k32), "RINGLIMIT_SIDECAR": "true"},
			check: func(t *testing.T, o options) {
				c := o.cfg
				if c.API.TLS.CertFile != "c.pem" || c.API.TLS.KeyFile != "k.pem" || c.Peer.Addr != "127.0.0.1:0" || !bytes.Equal(c.Gossip.Key, k32) || !c.Sidecar {
					t.Errorf("got TLS %+v, peer %q, gossip key %x, sidecar %v", c.API.TLS, c.Peer.Addr, c.Gossip.Key, c.Sidecar)
				}
			},
		},
		{
			name: "gossip keys for a rotation",
			args: []string{"--gossip-keys", b64(k32) + ", " + b64(k16)},
			check: func(t *testing.T, o options) {
				c := o.cfg
				if !bytes.Equal(c.Gossip.Key, k32) || len(c.Gossip.SecondaryKeys) != 1 || !bytes.Equal(c.Gossip.SecondaryKeys[0], k16) {
					t.Errorf("got primary %x, secondary %x", c.Gossip.Key, c.Gossip.SecondaryKeys)
				}
			},
		},
		{
			name: "limits and timeouts",
			args: []string{"--max-recv-msg-bytes", "2048", "--max-concurrent-streams", "8", "--max-header-bytes", "4096",
				"--read-header-timeout", "1s", "--read-timeout", "2s", "--write-timeout", "3s", "--idle-timeout", "4s",
				"--max-connection-age", "5m"},
			check: func(t *testing.T, o options) {
				c := o.cfg
				got := []any{c.API.MaxRecvMsgBytes, c.API.MaxConcurrentStreams, c.API.MaxHeaderBytes, c.API.ReadHeaderTimeout, c.API.ReadTimeout, c.API.WriteTimeout, c.API.IdleTimeout, c.API.MaxConnectionAge}
				want := []any{2048, uint32(8), 4096, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Minute}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("field %d = %v, want %v", i, got[i], want[i])
					}
				}
			},
		},
		{name: "gossip key not base64", args: []string{"--gossip-key", "not base64!"}, wantErr: "--gossip-key: key 1 is not base64"},
		{name: "gossip key of a bad size", args: []string{"--gossip-key", b64([]byte("short"))}, wantErr: "--gossip-key: key 1 is 5 bytes"},
		{name: "second gossip key of a bad size", args: []string{"--gossip-keys", b64(k16) + "," + b64(k16[:7])}, wantErr: "--gossip-keys: key 2 is 7 bytes"},
		{name: "both gossip key flags", args: []string{"--gossip-key", b64(k16), "--gossip-keys", b64(k16)}, wantErr: "one or the other"},
		{name: "max keys", args: []string{"--max-keys", "5000"}, check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeys != 5000 {
				t.Errorf("Sync.MaxKeys = %d, want 5000", o.cfg.Sync.MaxKeys)
			}
		}},
		{name: "zero max keys", args: []string{"--max-keys", "0"}, wantErr: "--max-keys must be positive"},
		{name: "max key bytes default", check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeyBytes != 256<<20 {
				t.Errorf("Sync.MaxKeyBytes = %d, want 256 MiB", o.cfg.Sync.MaxKeyBytes)
			}
		}},
		{name: "memory tuned by default", check: func(t *testing.T, o options) {
			if !o.tuneMemory {
				t.Error("tuneMemory false by default, want true")
			}
		}},
		{name: "memory tuning off", env: map[string]string{"RINGLIMIT_TUNE_MEMORY": "false"}, check: func(t *testing.T, o options) {
			if o.tuneMemory {
				t.Error("tuneMemory true with RINGLIMIT_TUNE_MEMORY=false")
			}
		}},
		{name: "max key bytes in MiB", args: []string{"--max-key-bytes", "96MiB"}, check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeyBytes != 96<<20 {
				t.Errorf("Sync.MaxKeyBytes = %d, want 96 MiB", o.cfg.Sync.MaxKeyBytes)
			}
		}},
		{name: "max key bytes in Kubernetes units", env: map[string]string{"RINGLIMIT_MAX_KEY_BYTES": "96Mi"}, check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeyBytes != 96<<20 {
				t.Errorf("Sync.MaxKeyBytes = %d, want 96 MiB", o.cfg.Sync.MaxKeyBytes)
			}
		}},
		{name: "max key bytes from GOMEMLIMIT", env: map[string]string{"GOMEMLIMIT": "268435456"}, check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeyBytes != 128<<20 {
				t.Errorf("Sync.MaxKeyBytes = %d, want half of GOMEMLIMIT (128 MiB)", o.cfg.Sync.MaxKeyBytes)
			}
		}},
		{name: "max key bytes given wins over GOMEMLIMIT", args: []string{"--max-key-bytes", "0"}, env: map[string]string{"GOMEMLIMIT": "256MiB"}, check: func(t *testing.T, o options) {
			if o.cfg.Sync.MaxKeyBytes != 0 {
				t.Errorf("Sync.MaxKeyBytes = %d, want 0 as given", o.cfg.Sync.MaxKeyBytes)
			}
		}},
		{name: "max key bytes not a size", args: []string{"--max-key-bytes", "1.5GB"}, wantErr: "--max-key-bytes"},
		{name: "insecure peers", args: []string{"--insecure-peers"}, env: map[string]string{"RINGLIMIT_PEER_SECRET": ""}, check: func(t *testing.T, o options) {
			if !o.cfg.Peer.Insecure || len(o.cfg.Peer.Secret) != 0 {
				t.Errorf("InsecurePeers %v, secret %q: want insecure, no secret", o.cfg.Peer.Insecure, o.cfg.Peer.Secret)
			}
		}},
		{name: "peer secret", args: []string{"--peer-secret", b64(k32)}, check: func(t *testing.T, o options) {
			if !bytes.Equal(o.cfg.Peer.Secret, k32) {
				t.Errorf("PeerSecret %x, want %x", o.cfg.Peer.Secret, k32)
			}
		}},
		{name: "no peer authentication", env: map[string]string{"RINGLIMIT_PEER_SECRET": ""}, wantErr: "the peers must authenticate each other"},
		{name: "peer secret not base64", args: []string{"--peer-secret", "not base64!"}, wantErr: "--peer-secret is not base64"},
		{name: "short peer secret", args: []string{"--peer-secret", b64([]byte("fifteen bytes.."))}, wantErr: "Peer.Secret: 15 bytes"},
		{name: "insecure peers with a secret", args: []string{"--insecure-peers", "--peer-secret", b64(k16)}, wantErr: "--insecure-peers: set together with Peer.TLS or Peer.Secret"},
		{name: "peer secret with a name that is not a DNS name", args: []string{"--name", "node_1"}, wantErr: "must be a DNS name"},
		{name: "TLS certificate without key", args: []string{"--tls-cert", "c", "--peer-addr", "127.0.0.1:0"}, wantErr: "needs both CertFile and KeyFile"},
		{name: "client CA without TLS", args: []string{"--tls-client-ca", "ca"}, wantErr: "ClientCAFile without a server certificate"},
		{name: "peer TLS without CA", args: []string{"--peer-tls-cert", "c", "--peer-tls-key", "k", "--peer-addr", ":0"}, wantErr: "needs CertFile, KeyFile and CAFile"},
		{name: "peer TLS with a name that is not a DNS name", args: []string{"--name", "node 1", "--peer-addr", ":0",
			"--peer-tls-cert", "c", "--peer-tls-key", "k", "--peer-tls-ca", "ca"}, wantErr: "must be a DNS name"},
		{name: "sidecar with a public gRPC port", args: []string{"--sidecar", "--grpc-addr", "0.0.0.0:7101"}, wantErr: "sidecar mode"},
		{name: "sidecar with a public HTTP port", args: []string{"--sidecar", "--http-addr", ":8101"}, wantErr: "sidecar mode"},
		{name: "sidecar gossiping beyond loopback without a peer port", args: []string{"--sidecar", "--gossip-addr", "10.0.0.1:7946"}, wantErr: "--peer-addr"},
		{name: "zero header bytes", args: []string{"--max-header-bytes", "0"}, wantErr: "--max-header-bytes"},
		{name: "zero read timeout", args: []string{"--read-timeout", "0s"}, wantErr: "--read-timeout"},
		{name: "too many streams", args: []string{"--max-concurrent-streams", "5000000000"}, wantErr: "--max-concurrent-streams"},
		{name: "bad peer address", args: []string{"--peer-addr", "7201"}, wantErr: "--peer-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			o, err := parseFlags(tt.args, withSecret(tt.env), &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v (output %s)", err, out.String())
			}
			tt.check(t, o)
		})
	}
}

func TestSidecarAcceptsLoopbackAndAPeerPort(t *testing.T) {
	var out bytes.Buffer
	o, err := parseFlags([]string{"--sidecar", "--grpc-addr", "localhost:7101", "--http-addr", "[::1]:8101",
		"--gossip-addr", "10.0.0.1:7946", "--peer-addr", "10.0.0.1:7201"}, withSecret(nil), &out)
	if err != nil {
		t.Fatalf("err = %v (output %s)", err, out.String())
	}
	if !o.cfg.Sidecar {
		t.Errorf("Sidecar = false")
	}
}
