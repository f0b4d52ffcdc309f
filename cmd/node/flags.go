package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// options is what the command line and the environment configure.
type options struct {
	cfg             ringlimit.Config
	logLevel        slog.Level
	logJSON         bool
	shutdownTimeout time.Duration
}

// envPrefix prefixes the environment variable of every flag:
// --flush-interval is RINGLIMIT_FLUSH_INTERVAL.
const envPrefix = "RINGLIMIT_"

// envName returns the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

const usageHead = `ringlimit node: one member of a cluster-coordinated rate limiter.

Usage: node [flags]

Every flag can also be set through the environment variable shown next to
it; a flag on the command line wins over the environment. Durations are Go
durations ("100ms", "1m30s"); addresses are host:port (port 0 picks one).

Flags:
`

// parseFlags reads the configuration from args and the environment
// (getenv). It writes --help and errors about flags to out. It returns
// flag.ErrHelp for -h/--help.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	o := options{cfg: ringlimit.DefaultConfig(), shutdownTimeout: 15 * time.Second}
	c := &o.cfg
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(out)

	var seeds, mode, policy, logLevel, logFormat string
	fs.StringVar(&c.Name, "name", "", "node name, unique in the cluster and stable across restarts (default: the host name)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address: public API and peer traffic; must be reachable by the other nodes")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address: JSON API, /healthz, /readyz, /v1/cluster, /metrics; empty disables HTTP")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "gossip (memberlist) listen address, TCP and UDP")
	fs.StringVar(&c.GossipAdvertiseAddr, "gossip-advertise-addr", "", "gossip address announced to the other nodes, when it differs from --gossip-addr (NAT, containers)")
	fs.StringVar(&seeds, "seeds", "", "comma-separated gossip addresses of nodes to join through; empty starts a new cluster")
	fs.StringVar(&c.GossipProfile, "gossip-profile", c.GossipProfile, `gossip tuning: "lan" (nodes on a network) or "local" (many nodes on one host)`)
	fs.StringVar(&mode, "mode", c.Sync.Mode.String(), "default consistency mode of checks that do not name one: local, owner, cached or leased")
	fs.StringVar(&policy, "policy", c.Sync.Policy.String(), "default partition policy when a key's owner is unreachable: fail-open, fail-closed or local-share")
	fs.DurationVar(&c.Sync.FlushInterval, "flush-interval", c.Sync.FlushInterval, "cached mode: how often pending hits are flushed to each key's owner (drift grows with it)")
	fs.DurationVar(&c.Sync.ForwardWindow, "forward-window", c.Sync.ForwardWindow, "owner mode: how long forwarded checks wait to be batched with others bound for the same owner")
	fs.IntVar(&c.Sync.MaxBatch, "max-batch", c.Sync.MaxBatch, "most items in one message between nodes (flush, forward, push); a full batch is sent at once")
	fs.DurationVar(&c.Sync.TickInterval, "tick-interval", c.Sync.TickInterval, "how often timers (flushes, retries, timeouts) are driven")
	fs.DurationVar(&c.Sync.RequestTimeout, "request-timeout", c.Sync.RequestTimeout, "how long a message to another node waits for its answer before the partition policy decides")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", c.CheckTimeout, "longest a public call waits for its answers (must exceed --request-timeout)")
	fs.IntVar(&c.MaxBatchItems, "max-check-items", c.MaxBatchItems, "most items in one public Check call")
	fs.IntVar(&c.MaxKeyLen, "max-key-len", c.MaxKeyLen, "most bytes of name + unique_key in one item")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "most bytes of an HTTP request body")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the HTTP port (keep that port private)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "on SIGTERM/SIGINT: how long to drain calls, hand keys off and leave before stopping anyway")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")

	fs.Usage = func() {
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
				envErr = fmt.Errorf("%s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		fmt.Fprintln(out, envErr)
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageErr(out, "unexpected arguments: %q", fs.Args())
	}

	c.Seeds = splitList(seeds)
	var err error
	if c.Sync.Mode, err = rlsync.ParseMode(mode); err != nil || c.Sync.Mode == rlsync.ModeDefault {
		return o, usageErr(out, "--mode %q: want local, owner, cached or leased", mode)
	}
	if c.Sync.Policy, err = rlsync.ParsePolicy(policy); err != nil || c.Sync.Policy == rlsync.PolicyDefault {
		return o, usageErr(out, "--policy %q: want fail-open, fail-closed or local-share", policy)
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return o, usageErr(out, "--log-level %q: want debug, info, warn or error", logLevel)
	}
	switch logFormat {
	case "text":
	case "json":
		o.logJSON = true
	default:
		return o, usageErr(out, "--log-format %q: want text or json", logFormat)
	}
	if o.shutdownTimeout <= 0 {
		return o, usageErr(out, "--shutdown-timeout must be positive")
	}
	if err := c.Validate(); err != nil {
		return o, usageErr(out, "%v", err)
	}
	return o, nil
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
