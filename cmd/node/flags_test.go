package main

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/check"
)

func TestParseFlags(t *testing.T) {
	def := ringlimit.DefaultConfig()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o options)
		wantErr string // substring of the error; "" for success
	}{
		{
			name: "defaults",
			check: func(t *testing.T, o options) {
				c := o.cfg
				if c.API.GRPCAddr != def.API.GRPCAddr || c.API.HTTPAddr != def.API.HTTPAddr || c.Gossip.Addr != def.Gossip.Addr {
					t.Errorf("addresses = %s %s %s, want the defaults", c.API.GRPCAddr, c.API.HTTPAddr, c.Gossip.Addr)
				}
				if c.Sync.Mode != check.ModeCached || c.Sync.Policy != check.PolicyLocalShare {
					t.Errorf("mode, policy = %v, %v; want cached, local-share", c.Sync.Mode, c.Sync.Policy)
				}
				if c.Gossip.Seeds != nil || o.logLevel != slog.LevelInfo || o.logJSON || o.shutdownTimeout != 15*time.Second {
					t.Errorf("got seeds %q, level %v, json %v, shutdown %v", c.Gossip.Seeds, o.logLevel, o.logJSON, o.shutdownTimeout)
				}
			},
		},
		{
			name: "every flag",
			args: []string{"--name", "n1", "--grpc-addr", "127.0.0.1:0", "--http-addr", "", "--gossip-addr", "127.0.0.1:0",
				"--gossip-advertise-addr", "10.0.0.1:7946", "--seeds", "a:1, b:2,,", "--gossip-profile", "local",
				"--mode", "owner", "--policy", "fail-closed", "--flush-interval", "50ms", "--forward-window", "2ms",
				"--max-batch", "64", "--tick-interval", "1ms", "--request-timeout", "1s", "--max-check-items", "10",
				"--max-key-len", "100", "--max-body-bytes", "4096", "--shutdown-timeout", "3s",
				"--log-level", "debug", "--log-format", "json",
				"--gossip-reconnect-interval", "-1s", "--gossip-reconnect-timeout", "1m", "--failed-member-ttl", "30s"},
			check: func(t *testing.T, o options) {
				c := o.cfg
				if c.Gossip.ReconnectInterval != -time.Second || c.Gossip.ReconnectTimeout != time.Minute || c.Sync.FailedMemberTTL != 30*time.Second {
					t.Errorf("reconnect interval %v, timeout %v, failed-member TTL %v; want -1s, 1m, 30s",
						c.Gossip.ReconnectInterval, c.Gossip.ReconnectTimeout, c.Sync.FailedMemberTTL)
				}
				got := []any{c.Name, c.API.GRPCAddr, c.API.HTTPAddr, c.Gossip.Addr, c.Gossip.AdvertiseAddr, c.Gossip.Profile,
					c.Sync.Mode, c.Sync.Policy, c.Sync.FlushInterval, c.Sync.ForwardWindow, c.Sync.MaxBatch,
					c.Sync.TickInterval, c.Sync.RequestTimeout, c.API.MaxBatchItems, c.API.MaxKeyLen, c.API.MaxBodyBytes,
					o.shutdownTimeout, o.logLevel, o.logJSON}
				want := []any{"n1", "127.0.0.1:0", "", "127.0.0.1:0", "10.0.0.1:7946", "local",
					check.ModeOwner, check.PolicyFailClosed, 50 * time.Millisecond, 2 * time.Millisecond, 64,
					time.Millisecond, time.Second, 10, 100, int64(4096),
					3 * time.Second, slog.LevelDebug, true}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("field %d = %v, want %v", i, got[i], want[i])
					}
				}
				if !slices.Equal(c.Gossip.Seeds, []string{"a:1", "b:2"}) {
					t.Errorf("seeds = %q, want [a:1 b:2]", c.Gossip.Seeds)
				}
			},
		},
		{
			name: "environment as default",
			env:  map[string]string{"RINGLIMIT_NAME": "env-node", "RINGLIMIT_MODE": "leased", "RINGLIMIT_SEEDS": "s:1", "RINGLIMIT_FLUSH_INTERVAL": "1s"},
			check: func(t *testing.T, o options) {
				c := o.cfg
				if c.Name != "env-node" || c.Sync.Mode != check.ModeLeased || !slices.Equal(c.Gossip.Seeds, []string{"s:1"}) || c.Sync.FlushInterval != time.Second {
					t.Errorf("got name %q mode %v seeds %q flush %v", c.Name, c.Sync.Mode, c.Gossip.Seeds, c.Sync.FlushInterval)
				}
			},
		},
		{
			name: "flag wins over environment",
			args: []string{"--name", "flag-node", "--mode", "local"},
			env:  map[string]string{"RINGLIMIT_NAME": "env-node", "RINGLIMIT_MODE": "leased"},
			check: func(t *testing.T, o options) {
				if o.cfg.Name != "flag-node" || o.cfg.Sync.Mode != check.ModeLocal {
					t.Errorf("got name %q mode %v, want flag-node local", o.cfg.Name, o.cfg.Sync.Mode)
				}
			},
		},
		{name: "unknown mode", args: []string{"--mode", "eventual"}, wantErr: `--mode "eventual"`},
		{name: "default is not a mode", args: []string{"--mode", "default"}, wantErr: "--mode"},
		{name: "unknown policy", args: []string{"--policy", "open"}, wantErr: `--policy "open"`},
		{name: "bad duration", args: []string{"--flush-interval", "soon"}, wantErr: "flush-interval"},
		{name: "zero flush interval", args: []string{"--flush-interval", "0s"}, wantErr: "--flush-interval must be positive"},
		{name: "negative reconnect timeout", args: []string{"--gossip-reconnect-timeout", "-1s"}, wantErr: "--gossip-reconnect-timeout: -1s must not be negative"},
		{name: "bad address", args: []string{"--grpc-addr", "nope"}, wantErr: `--grpc-addr: "nope" is not host:port`},
		{name: "bad seed", args: []string{"--seeds", "a:1,b"}, wantErr: `--seeds: "b" is not host:port`},
		{name: "bad profile", args: []string{"--gossip-profile", "wan"}, wantErr: `--gossip-profile: "wan"`},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
		{name: "check timeout below request timeout", args: []string{"--request-timeout", "3s"}, wantErr: "--check-timeout: 2s must be longer than --request-timeout (3s)"},
		{name: "zero max batch", args: []string{"--max-check-items", "0"}, wantErr: "--max-check-items: must be positive"},
		{name: "unknown flag", args: []string{"--colour"}, wantErr: "colour"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "bad environment", env: map[string]string{"RINGLIMIT_MAX_BATCH": "many"}, wantErr: "RINGLIMIT_MAX_BATCH"},
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

func TestHelpNamesEveryFlagAndVariable(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags([]string{"--help"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"--name", "RINGLIMIT_NAME", "--seeds", "RINGLIMIT_SEEDS", "--mode", "--policy",
		"--flush-interval", "--forward-window", "--max-batch", "--gossip-profile", "RINGLIMIT_LOG_FORMAT"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestFlagErrorsSayHowToWriteIt: the errors of issue 18 item 5, as a new
// user met them. Each is one line (not the 110 lines of --help), names the
// flag or environment variable the value came from, says how to write it,
// and names no field of ringlimit.Config.
func TestFlagErrorsSayHowToWriteIt(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		want  []string
		avoid []string
	}{
		{name: "duration without a unit", args: []string{"--flush-interval", "100"},
			want: []string{`--flush-interval "100"`, "needs a unit", `"100ms"`}, avoid: []string{"parse error"}},
		{name: "not a duration", args: []string{"--request-timeout", "soon"},
			want: []string{`--request-timeout "soon"`, `"1m30s"`}},
		{name: "duration without a unit, environment", env: map[string]string{"RINGLIMIT_FLUSH_INTERVAL": "100"},
			want: []string{`RINGLIMIT_FLUSH_INTERVAL="100"`, `"100ms"`}, avoid: []string{"--flush-interval"}},
		{name: "mode from the environment", env: map[string]string{"RINGLIMIT_MODE": "bogus"},
			want: []string{`RINGLIMIT_MODE="bogus"`, "local, owner, cached or leased"}, avoid: []string{"--mode"}},
		{name: "mode on the command line", args: []string{"--mode", "bogus"},
			want: []string{`--mode "bogus"`, "local, owner, cached or leased"}},
		{name: "policy from the environment", env: map[string]string{"RINGLIMIT_POLICY": "open"},
			want: []string{`RINGLIMIT_POLICY="open"`, "fail-open, fail-closed or local-share"}},
		{name: "not a number", args: []string{"--max-batch", "many"}, want: []string{`--max-batch "many"`, "whole number"}},
		{name: "not a boolean", args: []string{"--sidecar=maybe"}, want: []string{`--sidecar "maybe"`, "true or false"}},
		{name: "timeouts", args: []string{"--check-timeout", "1s", "--request-timeout", "2s"},
			want:  []string{"--check-timeout: 1s must be longer than --request-timeout (2s)"},
			avoid: []string{"CheckTimeout", "RequestTimeout", "Sync."}},
		{name: "a field of the core", args: []string{"--tick-interval", "0s"},
			want: []string{"--tick-interval must be positive"}, avoid: []string{"TickInterval", "sync: config"}},
		{name: "unknown flag", args: []string{"--colour"}, want: []string{"unknown flag --colour", "--help lists every flag"}},
		{name: "no value", args: []string{"--mode"}, want: []string{"--mode needs a value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := parseFlags(tt.args, withSecret(tt.env), &out)
			if err == nil {
				t.Fatal("no error")
			}
			got := out.String()
			if n := strings.Count(got, "\n"); n != 1 {
				t.Errorf("%d lines written, want 1:\n%s", n, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) || !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, output %q: want %q in both", err, got, w)
				}
			}
			for _, a := range tt.avoid {
				if strings.Contains(got, a) {
					t.Errorf("output %q names %q", got, a)
				}
			}
		})
	}
}

// TestConfigFlagsNamesEveryValidatedField: every field that Config.Validate
// may name and a flag sets has the flag's name (a renamed flag or field
// would otherwise print the field again).
func TestConfigFlagsNamesEveryValidatedField(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c := ringlimit.DefaultConfig()
	fs.DurationVar(&c.API.CheckTimeout, "check-timeout", 0, "")
	fs.DurationVar(&c.Sync.RequestTimeout, "request-timeout", 0, "")
	fs.IntVar(&c.API.MaxBatchItems, "max-check-items", 0, "")
	m := configFlags(fs, &c, map[string]string{"Gossip.Seeds": "--seeds"})
	want := map[string]string{"API.CheckTimeout": "--check-timeout", "Sync.RequestTimeout": "--request-timeout",
		"RequestTimeout": "--request-timeout", "API.MaxBatchItems": "--max-check-items", "Gossip.Seeds": "--seeds"}
	if len(m) != len(want) {
		t.Errorf("got %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s: got %q, want %q", k, m[k], v)
		}
	}
}

// testSecret is the base64 cluster secret withSecret gives.
const testSecret = "cmluZ2xpbWl0IHRlc3QgY2x1c3RlciBzZWNyZXQsIDMy"

// withSecret returns a getenv reading env, in which the peers' secret
// (RINGLIMIT_PEER_SECRET) is testSecret unless env sets it, a gossip key,
// peer TLS or RINGLIMIT_INSECURE_PEERS: a node refuses to start without
// peer authentication.
func withSecret(env map[string]string) func(string) string {
	return func(k string) string {
		if k == "RINGLIMIT_PEER_SECRET" {
			if _, ok := env[k]; ok {
				return env[k]
			}
			for _, other := range []string{"RINGLIMIT_GOSSIP_KEY", "RINGLIMIT_GOSSIP_KEYS", "RINGLIMIT_PEER_TLS_CERT", "RINGLIMIT_INSECURE_PEERS"} {
				if env[other] != "" {
					return ""
				}
			}
			return testSecret
		}
		return env[k]
	}
}
