package conformance

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit"
)

// fakeClock is the one clock of both services: Lyft's reads it in Unix
// seconds, ringlimit's node as a time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// UnixNow returns the clock's time in Unix seconds (Lyft's TimeSource).
func (c *fakeClock) UnixNow() int64 { return c.Now().Unix() }

// Set sets the clock.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// startRinglimit starts a one-node ringlimit cluster in-process on
// loopback ports, its rules the file content (written to a temporary file),
// its clock clk, and returns a client of its Envoy service.
func startRinglimit(t *testing.T, name string, content []byte, clk *fakeClock, allowBadKeys bool) rlsv3.RateLimitServiceClient {
	t.Helper()
	path := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := ringlimit.DefaultConfig()
	cfg.Name = "conformance"
	cfg.API.GRPCAddr, cfg.API.HTTPAddr, cfg.Gossip.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Gossip.Profile = ringlimit.GossipLocal
	cfg.Peer.Secret = []byte("conformance test: one node, 32 bytes")
	cfg.Rules.EnvoyAllowBadKeys = allowBadKeys
	cfg.Rules.Path, cfg.Rules.PollInterval = path, 0
	cfg.Clock = clk
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("ringlimit node: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for len(n.Members()) < 1 { // Start returns before the first membership reaches the core
		if time.Now().After(deadline) {
			t.Fatal("ringlimit node: no members after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	return rlsv3.NewRateLimitServiceClient(dial(t, n.GRPCAddr()))
}
