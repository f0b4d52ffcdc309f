package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/flagvalue"
)

// options is what the command line and the environment configure.
type options struct {
	cfg             ringlimit.Config
	logLevel        slog.Level
	logJSON         bool
	shutdownTimeout time.Duration
	// tuneMemory sets the runtime's soft memory limit from the keys'
	// memory (internal/memlimit).
	tuneMemory bool
	// testClockOffset is the test hook's offset (testClockOffsetEnv), 0
	// when unset.
	testClockOffset time.Duration
}

// testClockOffsetEnv is a test hook, not a setting, and has no flag: set to
// a Go duration ("30m", "-2s"), the node reads its clock that far ahead of
// the host's (ringlimit.OffsetClock), as a host whose time is wrong would.
// The clock tests of e2e/ use it to give one container a skewed clock, which
// the containers' shared kernel clock cannot have. docs/operations.md.
const testClockOffsetEnv = "RINGLIMIT_TEST_CLOCK_OFFSET"

// envPrefix prefixes the environment variable of every flag:
// --flush-interval is RINGLIMIT_FLUSH_INTERVAL.
const envPrefix = "RINGLIMIT_"

// envName returns the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

const usageHead = `ringlimit node: one member of a cluster-coordinated rate limiter.

Usage: ringlimit-node [flags]

Every flag can also be set through the environment variable shown next to
it; a flag on the command line wins over the environment. Durations are Go
durations ("100ms", "1m30s"); addresses are host:port (port 0 picks one).

Flags:
`

// parseFlags reads the configuration from args and the environment
// (getenv). It writes --help and errors about flags to out. It returns
// flag.ErrHelp for -h/--help.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	o := options{cfg: ringlimit.DefaultConfig(), shutdownTimeout: 15 * time.Second, tuneMemory: true}
	c := &o.cfg
	fs := flag.NewFlagSet("ringlimit-node", flag.ContinueOnError)
	// Errors are written below, in a line of their own, without the flag
	// package's usage dump; --help writes the usage.
	fs.SetOutput(io.Discard)

	var seeds, mode, policy, logLevel, logFormat, gossipKey, gossipKeys, peerSecret string
	var maxConcurrentStreams uint
	fs.StringVar(&c.Name, "name", "", "node name, unique in the cluster and stable across restarts (default: the host name)")
	fs.StringVar(&c.API.GRPCAddr, "grpc-addr", c.API.GRPCAddr, "gRPC listen address of the public API (checks, Envoy's rate limit service)")
	fs.StringVar(&c.API.HTTPAddr, "http-addr", c.API.HTTPAddr, "HTTP listen address: JSON API, /healthz, /readyz, /v1/cluster, /metrics; empty disables HTTP")
	fs.StringVar(&c.Gossip.Addr, "gossip-addr", c.Gossip.Addr, "gossip (memberlist) listen address, TCP and UDP")
	fs.StringVar(&c.Gossip.AdvertiseAddr, "gossip-advertise-addr", "", "gossip address announced to the other nodes, when it differs from --gossip-addr (NAT, containers)")
	fs.StringVar(&seeds, "seeds", "", "comma-separated gossip addresses of nodes to join through; empty starts a new cluster")
	fs.StringVar(&c.Gossip.Profile, "gossip-profile", c.Gossip.Profile, `gossip tuning: "lan" (nodes on a network) or "local" (many nodes on one host)`)
	fs.DurationVar(&c.Gossip.ReconnectInterval, "gossip-reconnect-interval", c.Gossip.ReconnectInterval, "how often seeds and failed members missing from the membership are joined again, so partitions heal (0: the profile's 2s; negative: never)")
	fs.DurationVar(&c.Gossip.ReconnectTimeout, "gossip-reconnect-timeout", c.Gossip.ReconnectTimeout, "how long a failed member is tried again before it is forgotten (0: the profile's 10m)")
	fs.DurationVar(&c.Gossip.ProbeInterval, "gossip-probe-interval", c.Gossip.ProbeInterval, "time between two failure-detection probes (0: the profile's, local 200ms, lan 250ms); longer for many nodes on few cores")
	fs.DurationVar(&c.Gossip.ProbeTimeout, "gossip-probe-timeout", c.Gossip.ProbeTimeout, "how long a probe waits for its ack (0: the profile's 100ms); longer for many nodes on few cores")
	fs.IntVar(&c.Gossip.SuspicionMult, "gossip-suspicion-mult", c.Gossip.SuspicionMult, "a suspect member is declared dead after this many probe intervals times log10(members) (0: the profile's 2)")
	fs.DurationVar(&c.Sync.MaxClockOffset, "max-clock-offset", c.Sync.MaxClockOffset, "bound on how far this node's clock may differ from the cluster's (the median of the members' clocks, measured): beyond it the node logs it, reports it (ringlimit_clock_skewed) and, when most members agree and it does not, is not ready")
	fs.DurationVar(&c.Sync.FailedMemberTTL, "failed-member-ttl", c.Sync.FailedMemberTTL, "how long a failed member still counts in the quorum baseline: a node seeing no more than half of it decides the lost members' keys by the partition policy (0: no quorum rule)")
	fs.DurationVar(&c.Sync.OwnerLeaseTTL, "owner-lease-ttl", c.Sync.OwnerLeaseTTL, "a node decides as a key's owner (owner and leased mode) only while a majority of the cluster echoed one of its clock readings within this time, and takes a failed member's keys over this long after a majority confirmed it: a cut-off owner stops before the majority starts (at least 2 x --request-timeout)")
	flagvalue.ChoiceVar(fs, &mode, "mode", c.Sync.Mode.String(), []string{"local", "owner", "cached", "leased"}, "default consistency mode of checks that do not name one")
	flagvalue.ChoiceVar(fs, &policy, "policy", c.Sync.Policy.String(), []string{"fail-open", "fail-closed", "local-share"}, "default partition policy when a key's owner is unreachable")
	fs.DurationVar(&c.Sync.FlushInterval, "flush-interval", c.Sync.FlushInterval, "cached mode: how often pending hits are flushed to each key's owner (drift grows with it)")
	fs.DurationVar(&c.Sync.ForwardWindow, "forward-window", c.Sync.ForwardWindow, "owner mode: how long forwarded checks wait to be batched with others bound for the same owner")
	fs.IntVar(&c.Sync.MaxBatch, "max-batch", c.Sync.MaxBatch, "most items in one message between nodes (flush, forward, push); a full batch is sent at once")
	fs.DurationVar(&c.Sync.TickInterval, "tick-interval", c.Sync.TickInterval, "how often timers (flushes, retries, timeouts) are driven")
	fs.DurationVar(&c.Sync.RequestTimeout, "request-timeout", c.Sync.RequestTimeout, "how long a message to another node waits for its answer before the partition policy decides")
	fs.DurationVar(&c.API.CheckTimeout, "check-timeout", c.API.CheckTimeout, "longest a public call waits for its answers (must exceed --request-timeout)")
	fs.IntVar(&c.API.MaxBatchItems, "max-check-items", c.API.MaxBatchItems, "most items in one public Check call")
	fs.IntVar(&c.API.MaxKeyLen, "max-key-len", c.API.MaxKeyLen, "most bytes of name + unique_key in one item")
	fs.IntVar(&c.Sync.MaxKeys, "max-keys", c.Sync.MaxKeys, "most keys a node keeps (owned, cached, backed up); beyond it the least recently used are evicted")
	var keyBytesSet bool
	fs.BoolVar(&o.tuneMemory, "tune-memory", o.tuneMemory, "set the Go runtime's soft memory limit from the keys' memory every second, so that the collector gives the keys a quarter of their size as headroom instead of GOGC's whole (never above GOMEMLIMIT; false: GOGC and GOMEMLIMIT alone)")
	fs.Var(byteSize{&c.Sync.MaxKeyBytes, &keyBytesSet}, "max-key-bytes", "most memory the keys a node keeps (and the backups it holds for others, and its hand-offs not yet acknowledged) may take, e.g. 128MiB; beyond it the least recently used keys are evicted (0: --max-keys alone; default: half of GOMEMLIMIT when set, else 256MiB)")
	fs.Int64Var(&c.API.MaxBodyBytes, "max-body-bytes", c.API.MaxBodyBytes, "most bytes of an HTTP request body")
	fs.IntVar(&c.API.MaxRecvMsgBytes, "max-recv-msg-bytes", c.API.MaxRecvMsgBytes, "most bytes of one gRPC message received, public or peer")
	fs.UintVar(&maxConcurrentStreams, "max-concurrent-streams", uint(c.API.MaxConcurrentStreams), "most concurrent gRPC calls per connection")
	fs.IntVar(&c.API.MaxHeaderBytes, "max-header-bytes", c.API.MaxHeaderBytes, "most bytes of request headers, HTTP and gRPC")
	fs.DurationVar(&c.API.ReadHeaderTimeout, "read-header-timeout", c.API.ReadHeaderTimeout, "HTTP: longest wait for a request's headers; gRPC: for a connection's handshake")
	fs.DurationVar(&c.API.ReadTimeout, "read-timeout", c.API.ReadTimeout, "HTTP: longest wait for a whole request, body included")
	fs.DurationVar(&c.API.WriteTimeout, "write-timeout", c.API.WriteTimeout, "HTTP: longest time to answer a request once read")
	fs.DurationVar(&c.API.IdleTimeout, "idle-timeout", c.API.IdleTimeout, "how long an idle HTTP keep-alive or gRPC connection stays open")
	fs.DurationVar(&c.API.MaxConnectionAge, "max-connection-age", c.API.MaxConnectionAge, "gRPC connections older than this are asked to reconnect (spreads clients over new nodes)")
	fs.StringVar(&c.Peer.Addr, "peer-addr", "", "listen address of the peer port (traffic between nodes), reachable by the other nodes (default: the --grpc-addr host, a free port)")
	fs.DurationVar(&c.Peer.RPCTimeout, "peer-rpc-timeout", c.Peer.RPCTimeout, "how long a call to another node, connection and TLS handshake included, may take before that node counts as unreachable for a while and its keys go by the partition policy (0: 1s); longer for many nodes on few cores")
	fs.StringVar(&peerSecret, "peer-secret", "", "base64 cluster secret (at least 16 bytes) the nodes authenticate each other with, when not derived from the gossip key; prefer the environment variable")
	fs.BoolVar(&c.Peer.Insecure, "insecure-peers", false, "run the peer port without authentication: whoever reaches it can move any limit (tests on loopback only)")
	fs.StringVar(&c.API.TLS.CertFile, "tls-cert", "", "PEM certificate (chain) of the public gRPC and HTTP APIs; enables TLS on them")
	fs.StringVar(&c.API.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.API.TLS.ClientCAFile, "tls-client-ca", "", "PEM CA bundle: public API clients must present a certificate it signed")
	fs.StringVar(&c.Peer.TLS.CertFile, "peer-tls-cert", "", "PEM certificate of this node on the peer port, naming --name (DNS SAN); enables mutual TLS between nodes")
	fs.StringVar(&c.Peer.TLS.KeyFile, "peer-tls-key", "", "PEM private key of --peer-tls-cert")
	fs.StringVar(&c.Peer.TLS.CAFile, "peer-tls-ca", "", "PEM CA bundle that signs every node's peer certificate")
	fs.StringVar(&gossipKey, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip; prefer the environment variable, which ps does not show")
	fs.StringVar(&gossipKeys, "gossip-keys", "", "comma-separated base64 gossip keys for a rotation: the first encrypts, all decrypt (instead of --gossip-key)")
	fs.BoolVar(&c.Sidecar, "sidecar", false, "sidecar profile: refuse to serve the public API beyond loopback")
	fs.StringVar(&c.Rules.Path, "rules", "", "rules file, or directory of *.yaml rules files (Lyft's format, docs/rules.md): Envoy's rate limit service, /v1/nginx/auth and the rule field of checks; reloaded on SIGHUP and on change")
	fs.DurationVar(&c.Rules.PollInterval, "rules-poll-interval", c.Rules.PollInterval, "how often the rules files are read for changes; 0 reloads on SIGHUP only")
	fs.BoolVar(&c.Rules.EnvoyHeaders, "envoy-headers", false, "Envoy rate limit service: add x-ratelimit-* and retry-after headers to the answers (Lyft's LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&c.Rules.NginxRule, "nginx-rule", "", "the rule /v1/nginx/auth checks every subrequest against (e.g. nginx/per_ip); empty: named per request by --nginx-rule-header")
	fs.StringVar(&c.Rules.NginxRuleHeader, "nginx-rule-header", c.Rules.NginxRuleHeader, "header naming the rule of a /v1/nginx/auth subrequest, set by nginx (proxy_set_header), when --nginx-rule is empty")
	fs.StringVar(&c.Rules.NginxKeyHeader, "nginx-key-header", c.Rules.NginxKeyHeader, "header carrying the client key of a /v1/nginx/auth subrequest, set by nginx (proxy_set_header X-Real-IP $remote_addr)")
	fs.BoolVar(&c.Rules.NginxAllowBadKeys, "nginx-allow-bad-keys", false, "/v1/nginx/auth: let through (204) a subrequest whose key is missing, too long or not UTF-8, instead of 403")
	fs.BoolVar(&c.Rules.EnvoyAllowBadKeys, "envoy-allow-bad-keys", false, "Envoy rate limit service: answer OK for a descriptor whose key cannot be formed, instead of OVER_LIMIT")
	fs.BoolVar(&c.API.GRPCRulesOnly, "grpc-rules-only", false, "public gRPC API: take only checks that name a rule; a check choosing its own limit gets an error (for untrusted callers)")
	fs.BoolVar(&c.API.HTTPRulesOnly, "http-rules-only", false, "POST /v1/check: take only checks that name a rule; a check choosing its own limit gets an error (for untrusted callers)")
	fs.BoolVar(&c.Rules.NginxFailClosed, "nginx-fail-closed", false, "/v1/nginx/auth: answer 503 instead of 204 when a check fails (unknown rule, cluster unable to answer)")
	fs.BoolVar(&c.API.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the HTTP port (keep that port private)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "on SIGTERM/SIGINT: how long to drain calls, hand keys off and leave before stopping anyway")
	flagvalue.ChoiceVar(fs, &logLevel, "log-level", "info", []string{"debug", "info", "warn", "error"}, "log level")
	flagvalue.ChoiceVar(fs, &logFormat, "log-format", "text", []string{"text", "json"}, "log format")

	flags := configFlags(fs, c, map[string]string{"Gossip.Seeds": "--seeds", "Gossip.Key": "--gossip-key",
		"Gossip.SecondaryKeys": "--gossip-keys", "API.MaxConcurrentStreams": "--max-concurrent-streams"})
	var bad error // the first bad value on the command line
	flagvalue.Explain(fs, &bad)
	usage := func() {
		fmt.Fprint(out, usageHead)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(out, "  --%s  [%s]%s\n      %s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}

	// The environment first, as defaults; then the command line.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = usageErr(out, "%s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := flagvalue.Parse(fs, args, &bad); errors.Is(err, flag.ErrHelp) {
		usage()
		return o, err
	} else if err != nil {
		return o, usageErr(out, "%v (ringlimit-node --help lists every flag)", err)
	}
	if fs.NArg() > 0 {
		return o, usageErr(out, "unexpected arguments: %q", fs.Args())
	}

	c.Gossip.Seeds = splitList(seeds)
	if !keyBytesSet {
		// Sized from the memory limit the Go runtime works to, if any (the
		// manifests set GOMEMLIMIT to 7/8 of the container's limit, and the
		// key budget themselves).
		budget, ok, err := keyBudgetFromMemLimit(getenv("GOMEMLIMIT"))
		if err != nil {
			return o, usageErr(out, "%v", err)
		}
		if ok {
			c.Sync.MaxKeyBytes = budget
		}
	}
	if maxConcurrentStreams > math.MaxUint32 {
		return o, usageErr(out, "--max-concurrent-streams %d: at most %d", maxConcurrentStreams, uint32(math.MaxUint32))
	}
	c.API.MaxConcurrentStreams = uint32(maxConcurrentStreams)
	keys, err := parseGossipKeys(gossipKey, gossipKeys)
	if err != nil {
		return o, usageErr(out, "%v", err)
	}
	if len(keys) > 0 {
		c.Gossip.Key, c.Gossip.SecondaryKeys = keys[0], keys[1:]
	}
	if peerSecret != "" {
		if c.Peer.Secret, err = base64.StdEncoding.DecodeString(strings.TrimSpace(peerSecret)); err != nil {
			return o, usageErr(out, "--peer-secret is not base64: %v", err)
		}
	}
	// --mode, --policy, --log-level and --log-format took only their
	// valid words (flagvalue.ChoiceVar).
	if c.Sync.Mode, err = check.ParseMode(mode); err != nil {
		return o, usageErr(out, "--mode: %v", err)
	}
	if c.Sync.Policy, err = check.ParsePolicy(policy); err != nil {
		return o, usageErr(out, "--policy: %v", err)
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return o, usageErr(out, "--log-level: %v", err)
	}
	o.logJSON = logFormat == "json"
	if o.shutdownTimeout <= 0 {
		return o, usageErr(out, "--shutdown-timeout must be positive")
	}
	if v := getenv(testClockOffsetEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return o, usageErr(out, "%s=%q (a test hook): %v", testClockOffsetEnv, v, err)
		}
		o.testClockOffset = d
		c.Clock = ringlimit.OffsetClock(d)
	}
	if err := c.Validate(); err != nil {
		return o, usageErr(out, "%s", inFlagNames(err, flags))
	}
	return o, nil
}

// parseGossipKeys decodes --gossip-key or --gossip-keys (not both): base64
// keys, the first the one gossip is sent with.
func parseGossipKeys(key, keys string) ([][]byte, error) {
	if key != "" && keys != "" {
		return nil, errors.New("--gossip-key and --gossip-keys: give one or the other")
	}
	list := splitList(keys)
	flagName := "--gossip-keys"
	if key != "" {
		list, flagName = []string{strings.TrimSpace(key)}, "--gossip-key"
	}
	var out [][]byte
	for i, k := range list {
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d is not base64: %v", flagName, i+1, err)
		}
		if n := len(b); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%s: key %d is %d bytes, want 16, 24 or 32 (e.g. head -c 32 /dev/urandom | base64)", flagName, i+1, n)
		}
		out = append(out, b)
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// errUsage is wrapped by every error about the configuration.
var errUsage = errors.New("invalid configuration")

func usageErr(out io.Writer, format string, args ...any) error {
	err := fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
	fmt.Fprintln(out, err)
	return err
}
