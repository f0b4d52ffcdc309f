package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

func TestRulesFlags(t *testing.T) {
	env := withSecret
	var out bytes.Buffer
	o, err := parseFlags([]string{"--rules", "/etc/ringlimit/rules", "--rules-poll-interval", "0s", "--envoy-headers",
		"--nginx-rule", "nginx/per_ip", "--nginx-key-header", "X-Client", "--nginx-fail-closed"}, env(nil), &out)
	if err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	c := o.cfg
	if c.Rules.Path != "/etc/ringlimit/rules" || c.Rules.PollInterval != 0 || !c.Rules.EnvoyHeaders || c.Rules.NginxRule != "nginx/per_ip" ||
		c.Rules.NginxKeyHeader != "X-Client" || c.Rules.NginxRuleHeader != "X-Ringlimit-Rule" || !c.Rules.NginxFailClosed {
		t.Errorf("got %q %v %v %q %q %q %v", c.Rules.Path, c.Rules.PollInterval, c.Rules.EnvoyHeaders, c.Rules.NginxRule,
			c.Rules.NginxKeyHeader, c.Rules.NginxRuleHeader, c.Rules.NginxFailClosed)
	}

	o, err = parseFlags(nil, env(map[string]string{"RINGLIMIT_RULES": "r.yaml", "RINGLIMIT_NGINX_RULE_HEADER": "X-Limit"}), &out)
	if err != nil || o.cfg.Rules.Path != "r.yaml" || o.cfg.Rules.PollInterval != 5*time.Second || o.cfg.Rules.NginxRuleHeader != "X-Limit" {
		t.Errorf("environment: %v %q %v %q", err, o.cfg.Rules.Path, o.cfg.Rules.PollInterval, o.cfg.Rules.NginxRuleHeader)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nginx-rule", "nginx/per_ip"}, "--nginx-rule: needs --rules"},
		{[]string{"--rules", "r.yaml", "--nginx-key-header", "X Client"}, "--nginx-key-header"},
		{[]string{"--rules", "r.yaml", "--rules-poll-interval", "-1s"}, "--rules-poll-interval"},
	} {
		if _, err := parseFlags(tc.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// fakeReloader counts reloads and answers err.
type fakeReloader struct {
	n   int
	err error
}

func (f *fakeReloader) ReloadRules() error { f.n++; return f.err }

func TestSIGHUPReloadsUntilCancelled(t *testing.T) {
	hup := make(chan os.Signal) // unbuffered: a send returns once the loop took it
	ctx, cancel := context.WithCancel(t.Context())
	var logs bytes.Buffer
	f := &fakeReloader{err: ringlimit.ErrNoRules}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = waitAndReload(ctx, hup, nil, f, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	hup <- os.Interrupt
	hup <- os.Interrupt
	cancel()
	<-done
	if f.n < 1 || f.n > 2 {
		t.Errorf("%d reloads, want 1 or 2 (the second may still be in progress at cancel)", f.n)
	}
	if !strings.Contains(logs.String(), "SIGHUP: nothing to reload") {
		t.Errorf("logs lack the warning: %s", logs.String())
	}
}

func TestRunFailsOnInvalidRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	args := []string{"--name", "cli", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local", "--rules", path}
	if code := run(t.Context(), args, withSecret(nil), &out); code != 1 {
		t.Fatalf("exit code %d, want 1; output:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), path+":4:") {
		t.Errorf("output lacks the line of the problem (%s:4):\n%s", path, out.String())
	}
}
