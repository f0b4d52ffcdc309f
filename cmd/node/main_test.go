package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
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
