package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit"
)

func TestCheckByRuleAgainstANode(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n"+
		"    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *ringlimit.Config) { c.Rules.Path = rules })
	args := func(rule string) []string {
		return []string{"check", "--addr", n.GRPCAddr(), "--rule", rule, "--key", "203.0.113.7"}
	}
	for i, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{args("edge/remote_address"), exitOK, "status:      under_limit\nlimit:       1\nremaining:   0\n"},
		{args("edge/remote_address"), exitOverLimit, "status:      over_limit\n"},
		{args("edge/nope"), exitFailed, `error:       rule: unknown rule "edge/nope"`},
	} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), tc.args, noEnv, &out, &errOut)
		if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("step %d %q: exit %d, stdout:\n%s\nstderr: %s\nwant exit %d and %q", i, tc.args[1:], code, out.String(), errOut.String(), tc.wantCode, tc.wantOut)
		}
	}
}
