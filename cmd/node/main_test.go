package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockedBuffer is an io.Writer safe for the node's concurrent logging.
type lockedBuffer struct {
	ch chan struct{}
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.ch <- struct{}{}
	defer func() { <-l.ch }()
	return l.b.Write(p)
}

func TestRunStartsAndStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as if SIGTERM arrived at once
	out := &lockedBuffer{ch: make(chan struct{}, 1)}
	args := []string{"--name", "cli", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local", "--log-format", "json"}
	if code := run(ctx, args, withSecret(nil), out); code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, out.b.String())
	}
	for _, want := range []string{`"msg":"node started"`, `"msg":"signal received; shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(out.b.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.b.String())
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	env := func(string) string { return "" }
	var out bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, env, &out); code != 0 {
		t.Errorf("--help: exit code %d, want 0", code)
	}
	if code := run(t.Context(), []string{"--mode", "bogus"}, env, &out); code != 2 {
		t.Errorf("bad flag: exit code %d, want 2", code)
	}
}

// TestRunExitsOnADuplicateName: a node started with the name of a live
// member is refused by the cluster, says why and exits 1 without a signal.
// Before, it logged "two nodes claim one name", reported ready and ran on,
// owning the name's keys beside the real member.
func TestRunExitsOnADuplicateName(t *testing.T) {
	cfg := ringlimit.DefaultConfig()
	cfg.Name, cfg.API.GRPCAddr, cfg.API.HTTPAddr, cfg.Gossip.Addr = "n1", "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Gossip.Profile = ringlimit.GossipLocal
	cfg.Peer.Secret = []byte("ringlimit test cluster secret, 32")
	real, err := ringlimit.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()

	out := &lockedBuffer{ch: make(chan struct{}, 1)}
	args := []string{"--name", "n1", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local", "--seeds", real.GossipAddr()}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if code := run(ctx, args, withSecret(nil), out); code != 1 || ctx.Err() != nil {
		t.Fatalf("exit code %d (context: %v); want 1 before any signal; output:\n%s", code, ctx.Err(), out.b.String())
	}
	if s := out.b.String(); !strings.Contains(s, `"n1" is a live member at `+real.GossipAddr()) || !strings.Contains(s, "give this node another name") {
		t.Errorf("output does not say the name is taken, by whom, and what to do:\n%s", s)
	}
	if got := real.Members(); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("the real n1 sees %v; want only itself", got)
	}
}
