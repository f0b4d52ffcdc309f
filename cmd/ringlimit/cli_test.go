package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/ring"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseCheck(t *testing.T) {
	base := []string{"--name", "api", "--key", "alice", "--limit", "10", "--period", "1m"}
	for _, tc := range []struct {
		name    string
		args    []string
		want    checkOptions // compared: addrs, item, timeout, json, tls.on()
		wantTLS bool
		wantErr string // "" for success
	}{
		{name: "defaults", args: base, want: checkOptions{addrs: []string{"127.0.0.1:7101"},
			item: client.Item{Name: "api", Key: "alice", Hits: 1, Limit: 10, Period: time.Minute}, timeout: 3 * time.Second}},
		{name: "everything", args: append([]string{"--addr", "a:1, b:2", "--hits", "0", "--burst", "20", "--algorithm", "leaky_queue",
			"--mode", "owner", "--policy", "fail-closed", "--max-wait", "250ms", "--min-gap", "1s", "--count-rejected",
			"--warm-up", "5s", "--lease", "w1", "--release", "--timeout", "1s", "--json", "--tls-ca", "ca.pem"}, base...),
			want: checkOptions{addrs: []string{"a:1", "b:2"}, item: client.Item{Name: "api", Key: "alice", Peek: true, Limit: 10,
				Period: time.Minute, Burst: 20, Algorithm: bucket.LeakyQueue, Mode: check.ModeOwner, Policy: check.PolicyFailClosed,
				MaxWait: 250 * time.Millisecond, MinGap: time.Second, CountRejected: true, WarmUp: 5 * time.Second,
				Lease: "w1", Release: true}, timeout: time.Second, json: true},
			wantTLS: true},
		{name: "guava options", args: append([]string{"--algorithm", "smooth_bursty", "--max-burst-seconds", "2.5", "--cold-factor", "4"}, base...),
			want: checkOptions{addrs: []string{"127.0.0.1:7101"}, item: client.Item{Name: "api", Key: "alice", Hits: 1, Limit: 10,
				Period: time.Minute, Algorithm: bucket.SmoothBursty, MaxBurstSeconds: 2.5, ColdFactor: 4}, timeout: 3 * time.Second}},
		{name: "rule and cold factor", args: []string{"--rule", "r", "--key", "k", "--cold-factor", "2"}, wantErr: "--rule supplies the limit"},
		{name: "no name", args: []string{"--key", "k", "--limit", "1", "--period", "1s"}, wantErr: "--name is required"},
		{name: "rule", args: []string{"--rule", "edge/remote_address", "--key", "10.0.0.1", "--mode", "owner"},
			want: checkOptions{addrs: []string{"127.0.0.1:7101"}, item: client.Item{Rule: "edge/remote_address", Key: "10.0.0.1",
				Hits: 1, Mode: check.ModeOwner}, timeout: 3 * time.Second}},
		{name: "rule and name", args: []string{"--rule", "r", "--name", "n", "--key", "k"}, wantErr: "--rule and --name"},
		{name: "rule and limit", args: []string{"--rule", "r", "--key", "k", "--limit", "1"}, wantErr: "--rule supplies the limit"},
		{name: "rule and algorithm", args: []string{"--rule", "r", "--key", "k", "--algorithm", "gcra"}, wantErr: "--rule supplies the limit"},
		{name: "rule without key", args: []string{"--rule", "r"}, wantErr: "--key is required"},
		{name: "no key", args: []string{"--name", "n", "--limit", "1", "--period", "1s"}, wantErr: "--key is required"},
		{name: "no limit", args: []string{"--name", "n", "--key", "k", "--period", "1s"}, wantErr: "--limit must be positive"},
		{name: "no period", args: []string{"--name", "n", "--key", "k", "--limit", "1"}, wantErr: "--period must be positive"},
		{name: "negative hits", args: append([]string{"--hits", "-1"}, base...), wantErr: "--hits must not be negative"},
		{name: "bad algorithm", args: append([]string{"--algorithm", "bogus"}, base...), wantErr: `--algorithm: unknown algorithm "bogus" (want one of token_bucket,`},
		{name: "bad mode", args: append([]string{"--mode", "exact"}, base...), wantErr: "--mode"},
		{name: "bad policy", args: append([]string{"--policy", "open"}, base...), wantErr: "--policy"},
		{name: "bad duration", args: append([]string{"--period", "ten"}, base[:6]...), wantErr: `--period "ten": not a duration`},
		{name: "duration without a unit", args: append([]string{"--period", "60"}, base[:6]...),
			wantErr: `ringlimit check: --period "60": a duration needs a unit: write e.g. "60ms" or "60s" (see ringlimit help check)`},
		{name: "not a number", args: append([]string{"--limit", "ten"}, base[:4]...), wantErr: `--limit "ten": want a whole number`},
		{name: "empty addr", args: append([]string{"--addr", " , "}, base...), wantErr: "--addr is empty"},
		{name: "cert without key", args: append([]string{"--tls-cert", "c.pem"}, base...), wantErr: "--tls-cert and --tls-key go together"},
		{name: "stray argument", args: append(base, "extra"), wantErr: "unexpected arguments"},
	} {
		var out bytes.Buffer
		got, err := parseCheck(tc.args, noEnv, &out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(out.String(), tc.wantErr) {
				t.Errorf("%s: err %v, output %q; want an error containing %q", tc.name, err, out.String(), tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if strings.Join(got.addrs, "|") != strings.Join(tc.want.addrs, "|") || got.item != tc.want.item ||
			got.timeout != tc.want.timeout || got.json != tc.want.json || got.tls.on() != tc.wantTLS {
			t.Errorf("%s:\n got %+v\nwant %+v (tls %v)", tc.name, got, tc.want, tc.wantTLS)
		}
	}
}

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// TestEnvAddresses: RINGLIMIT_ADDR and RINGLIMIT_HTTP (printed by make run
// for its PORT_BASE) are the defaults of --addr and --http; a flag wins.
func TestEnvAddresses(t *testing.T) {
	env := func(name string) string {
		return map[string]string{envAddr: "127.0.0.1:17001,127.0.0.1:17002", envHTTP: "127.0.0.1:18001"}[name]
	}
	base := []string{"--name", "api", "--key", "alice", "--limit", "10", "--period", "1m"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{base, "127.0.0.1:17001|127.0.0.1:17002"},
		{append([]string{"--addr", "h:1"}, base...), "h:1"},
	} {
		o, err := parseCheck(tc.args, env, io.Discard)
		if got := strings.Join(o.addrs, "|"); err != nil || got != tc.want {
			t.Errorf("check %q: addrs %q, err %v; want %q", tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "http://127.0.0.1:18001/v1/cluster"},
		{[]string{"--http", "h:2"}, "http://h:2/v1/cluster"},
	} {
		o, err := parseCluster(tc.args, env, io.Discard)
		if err != nil || o.url != tc.want {
			t.Errorf("cluster %q: url %q, err %v; want %q", tc.args, o.url, err, tc.want)
		}
	}
}

func TestParseCluster(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantURL string
		wantErr string
	}{
		{nil, "http://127.0.0.1:8101/v1/cluster", ""},
		{[]string{"--http", "node-2:8102"}, "http://node-2:8102/v1/cluster", ""},
		{[]string{"--http", "node-2:8102", "--tls"}, "https://node-2:8102/v1/cluster", ""},
		{[]string{"--http", "https://rl.example.com/"}, "https://rl.example.com/v1/cluster", ""},
		{[]string{"--http", "ftp://x"}, "", "want host:port"},
		{[]string{"--http", ""}, "", "--http: empty"},
		{[]string{"--timeout", "0s"}, "", "--timeout must be positive"},
		{[]string{"now"}, "", "unexpected arguments"},
	} {
		var out bytes.Buffer
		got, err := parseCluster(tc.args, noEnv, &out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(out.String(), tc.wantErr) {
				t.Errorf("%q: err %v, output %q; want an error containing %q", tc.args, err, out.String(), tc.wantErr)
			}
			continue
		}
		if err != nil || got.url != tc.wantURL {
			t.Errorf("%q: url %q, err %v; want %q", tc.args, got.url, err, tc.wantURL)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  []string // in stdout or stderr
	}{
		{[]string{"help"}, exitOK, []string{"ringlimit check", "ringlimit cluster", "Exit codes"}},
		{[]string{"--help"}, exitOK, []string{"ringlimit check"}},
		{nil, exitUsage, []string{"Usage:"}},
		{[]string{"help", "check"}, exitOK, []string{"--addr", "--name", "--key", "--hits", "--limit", "--period",
			"--algorithm", "--mode", "--policy", "--json", "--tls-ca", "--timeout"}},
		{[]string{"check", "--help"}, exitOK, []string{"--addr (default 127.0.0.1:7101)"}},
		{[]string{"check", "-h"}, exitOK, []string{"--period"}},
		{[]string{"help", "cluster"}, exitOK, []string{"--http (default 127.0.0.1:8101)", "--json"}},
		{[]string{"cluster", "--help"}, exitOK, []string{"--http"}},
		{[]string{"help", "nope"}, exitUsage, []string{`unknown command "nope"`}},
		{[]string{"frobnicate"}, exitUsage, []string{`unknown command "frobnicate"`}},
		{[]string{"check", "--bogus"}, exitUsage, []string{"ringlimit check: unknown flag --bogus (see ringlimit help check)"}},
		{[]string{"check", "--period"}, exitUsage, []string{"ringlimit check: --period needs a value"}},
	} {
		var out bytes.Buffer
		code := run(t.Context(), tc.args, noEnv, &out, &out)
		if code != tc.wantCode {
			t.Errorf("%q: exit %d, want %d", tc.args, code, tc.wantCode)
		}
		for _, w := range tc.wantOut {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
	if _, err := parseCheck([]string{"--help"}, noEnv, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("parseCheck(--help) = %v, want flag.ErrHelp", err)
	}
}

func TestWriteResult(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		r    client.Result
		want string
	}{
		{"under", client.Result{Status: check.StatusUnderLimit, Limit: 10, Remaining: 9, ResetAt: now.Add(6 * time.Second),
			Owner: "n3", Node: "n2", Mode: check.ModeCached}, `
status:      under_limit
limit:       10
remaining:   9
reset:       2030-01-01T12:00:06Z (in 6s)
owner:       n3
mode:        cached
answered by: n2
`},
		{"over, degraded, shaping", client.Result{Status: check.StatusOverLimit, Limit: 10, Remaining: 0,
			ResetAt: now.Add(90*time.Second + 400*time.Millisecond), RetryAfter: 1234567 * time.Microsecond,
			Wait: 1500 * time.Microsecond, Owner: "n1", Node: "n1", Mode: check.ModeOwner, Degraded: true}, `
status:      over_limit
limit:       10
remaining:   0
reset:       2030-01-01T12:01:30.4Z (in 1m30s)
retry after: 1.2s
wait:        2ms
owner:       n1
mode:        owner
degraded:    yes: the owner could not be reached; the partition policy decided
answered by: n1
`},
		{"error", client.Result{Status: check.StatusError, Node: "n1",
			Err: &client.ItemError{Index: 0, Message: "limit: must be positive, got 0"}}, `
status:      error
error:       limit: must be positive, got 0
answered by: n1
`},
	} {
		var b bytes.Buffer
		writeResult(&b, tc.r, now)
		if got := "\n" + b.String(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestWriteCluster(t *testing.T) {
	st := &ringlimit.ClusterStatus{
		Self: "n1", GRPCAddr: "10.0.0.1:7101", HTTPAddr: "10.0.0.1:8101", GossipAddr: "10.0.0.1:7946",
		Ready: true, Mode: "cached", Policy: "local-share",
		Members: []ringlimit.MemberStatus{
			{Name: "n1", State: "alive", Self: true, GRPCAddr: "10.0.0.1:7101", GossipAddr: "10.0.0.1:7946", Protocol: 1, InRing: true},
			{Name: "n2", State: "alive", GRPCAddr: "10.0.0.2:7101", GossipAddr: "10.0.0.2:7946", Protocol: 1, InRing: true},
			{Name: "n4", State: "alive", GRPCAddr: "10.0.0.4:7101", Protocol: 1},
		},
		Ring: ring.Summary{Version: 7, PartitionCount: 1021, ReplicationFactor: 20, Load: 1.25,
			Members:     []ring.MemberLoad{{Name: "n1", Partitions: 340}, {Name: "n2", Partitions: 341}, {Name: "n3", Partitions: 340}},
			AverageLoad: 340.33, MaxLoad: 426},
	}
	want := `
node n1: ready, default mode cached, policy local-share
  grpc 10.0.0.1:7101  http 10.0.0.1:8101  gossip 10.0.0.1:7946

MEMBER     STATE  PARTITIONS   GRPC           GOSSIP         PROTOCOL
n1 (self)  alive  340          10.0.0.1:7101  10.0.0.1:7946  1
n2         alive  341          10.0.0.2:7101  10.0.0.2:7946  1
n4         alive  not in ring  10.0.0.4:7101  -              1
n3         gone   340          -              -              -

ring: version 7, 3 members, 1021 partitions (average 340.3, at most 426 per member), replication factor 20, load 1.25
`
	var b bytes.Buffer
	writeCluster(&b, st)
	if got := "\n" + b.String(); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// startNode starts a one-node cluster on loopback, its configuration
// changed by configure if given, and waits until it can decide; the test
// stops it.
func startNode(t *testing.T, configure ...func(*ringlimit.Config)) *ringlimit.Node {
	t.Helper()
	cfg := ringlimit.DefaultConfig()
	cfg.Name = "n1"
	cfg.API.GRPCAddr, cfg.API.HTTPAddr, cfg.Gossip.Addr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Gossip.Profile = ringlimit.GossipLocal
	cfg.Peer.Secret = []byte("ringlimit test cluster secret, 32")
	for _, c := range configure {
		c(&cfg)
	}
	n, err := ringlimit.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	})
	// Start returns before the first membership reaches the core.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for len(n.Members()) == 0 && time.Now().Before(deadline) {
		<-tick.C
	}
	return n
}

func TestCheckAgainstANode(t *testing.T) {
	n := startNode(t)
	args := func(extra ...string) []string {
		return append([]string{"check", "--addr", n.GRPCAddr(), "--name", "cli", "--key", "alice",
			"--limit", "2", "--period", "1h", "--mode", "owner"}, extra...)
	}
	for i, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{args(), exitOK, "status:      under_limit\nlimit:       2\nremaining:   1\n"},
		{args("--hits", "0"), exitOK, "remaining:   1\n"}, // a peek takes nothing
		{args(), exitOK, "remaining:   0\n"},
		{args(), exitOverLimit, "status:      over_limit\n"},
		{args("--json"), exitOverLimit, `"status": "over_limit"`},
		{args("--algorithm", "smooth_warming_up"), exitFailed, "error:       warm_up"},
	} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), tc.args, noEnv, &out, &errOut)
		if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("step %d %q: exit %d, stdout:\n%s\nstderr: %s\nwant exit %d and %q", i, tc.args[1:], code, out.String(), errOut.String(), tc.wantCode, tc.wantOut)
		}
	}

	var out bytes.Buffer
	if code := run(t.Context(), args("--json", "--key", "bob"), noEnv, &out, io.Discard); code != exitOK {
		t.Fatalf("--json: exit %d", code)
	}
	var j checkJSON
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if j.Status != "under_limit" || j.Limit != 2 || j.Remaining != 1 || j.Owner != "n1" || j.Node != "n1" || j.Mode != "owner" || j.ResetTime == nil {
		t.Errorf("--json: %+v", j)
	}

	// Nothing listens on a port just closed: the call fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var errOut bytes.Buffer
	code := run(t.Context(), []string{"check", "--addr", dead, "--name", "a", "--key", "b", "--limit", "1", "--period", "1s",
		"--timeout", "200ms"}, noEnv, io.Discard, &errOut)
	if code != exitFailed || !strings.Contains(errOut.String(), "ringlimit check: client: check via "+dead) {
		t.Errorf("unreachable node: exit %d, stderr %q; want %d", code, errOut.String(), exitFailed)
	}
}

func TestClusterAgainstANode(t *testing.T) {
	n := startNode(t)
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"cluster", "--http", n.HTTPAddr()}, noEnv, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, w := range []string{"node n1: ready", "n1 (self)  alive", "ring: version"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}

	out.Reset()
	if code := run(t.Context(), []string{"cluster", "--http", "http://" + n.HTTPAddr(), "--json"}, noEnv, &out, &errOut); code != exitOK {
		t.Fatalf("--json: exit %d: %s", code, errOut.String())
	}
	var st ringlimit.ClusterStatus
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Self != "n1" || len(st.Members) != 1 {
		t.Errorf("--json: %+v, %v\n%s", st, err, out.String())
	}

	// A node's gRPC port does not speak HTTP/1: the command fails cleanly,
	// with a hint to use the HTTP port.
	errOut.Reset()
	if code := run(t.Context(), []string{"cluster", "--http", n.GRPCAddr(), "--timeout", "2s"}, noEnv, io.Discard, &errOut); code != exitFailed ||
		!strings.Contains(errOut.String(), "is "+n.GRPCAddr()+" the node's HTTP port, its --http-addr?") {
		t.Errorf("cluster against the gRPC port: exit %d, stderr %q; want %d and a hint to use the HTTP port", code, errOut.String(), exitFailed)
	}
	// A port nothing listens on gets no such hint.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	errOut.Reset()
	if code := run(t.Context(), []string{"cluster", "--http", dead, "--timeout", "2s"}, noEnv, io.Discard, &errOut); code != exitFailed ||
		strings.Contains(errOut.String(), "HTTP port") {
		t.Errorf("cluster against a closed port: exit %d, stderr %q; want %d and no hint", code, errOut.String(), exitFailed)
	}
}

// TestCheckAgainstTheHTTPPort: pointed at a node's HTTP port, check fails
// with gRPC's "frame too large ... looked like an HTTP/1.1 header" and a
// line that says to give the gRPC port (issue 18 item 6).
func TestCheckAgainstTheHTTPPort(t *testing.T) {
	n := startNode(t)
	var errOut bytes.Buffer
	code := run(t.Context(), []string{"check", "--addr", n.HTTPAddr(), "--name", "a", "--key", "b", "--limit", "1", "--period", "1s",
		"--timeout", "2s"}, noEnv, io.Discard, &errOut)
	want := "ringlimit check: " + n.HTTPAddr() + " answers HTTP/1.1 (200 OK), as a node's HTTP port does; ringlimit check speaks gRPC: give --addr the node's gRPC port"
	if code != exitFailed || !strings.Contains(errOut.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, errOut.String(), exitFailed, want)
	}
}

// TestNeverPrintsAsNever: a request for more hits than the limit holds can
// never be admitted; its retry-after is the largest duration, printed as
// "never" rather than 2562047h47m16.85s (issue 18 item 6). --json keeps the
// HTTP API's spelling.
func TestNeverPrintsAsNever(t *testing.T) {
	n := startNode(t)
	args := []string{"check", "--addr", n.GRPCAddr(), "--name", "a", "--key", "b", "--limit", "2", "--period", "1m",
		"--hits", "5", "--mode", "owner"}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), args, noEnv, &out, &errOut); code != exitOverLimit {
		t.Fatalf("exit %d, want %d: %s%s", code, exitOverLimit, out.String(), errOut.String())
	}
	if got := out.String(); !strings.Contains(got, "retry after: never (") || strings.Contains(got, "2562047h") {
		t.Errorf("output:\n%s\nwant \"retry after: never\"", got)
	}
	out.Reset()
	if code := run(t.Context(), append(args, "--json"), noEnv, &out, &errOut); code != exitOverLimit {
		t.Fatalf("--json: exit %d", code)
	}
	var j checkJSON
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.RetryAfter != never.String() {
		t.Errorf("--json: retry_after %q, %v; want %q", j.RetryAfter, err, never.String())
	}
}
