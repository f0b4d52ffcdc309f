// Command loadgen drives a ringlimit cluster over gRPC and reports calls/s,
// decisions/s and latency percentiles, separately for items answered by the
// node that owns their key and items whose owner is another node (forwarded,
// or decided from a cache). See docs/bench.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(mainErr(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func mainErr(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.baseline {
		addr, stop, err := startBaseline()
		if err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return 1
		}
		defer stop()
		cfg.targets = []string{addr}
	}
	st, elapsed, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	rep := newReport(cfg, st, elapsed)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if st.calls == 0 {
		return 1
	}
	return 0
}

// envTargets, when set, is the default of --targets: scripts/cluster.sh
// (make run) prints it for the ports of its PORT_BASE.
const envTargets = "RINGLIMIT_ADDR"

// parseFlags parses the command line args, with the environment getenv; it
// writes --help and flag errors to out.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	var targets, mode, alg string
	targets = getenv(envTargets)
	if targets == "" {
		targets = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103" // make run's, on its default PORT_BASE
	}
	fs.StringVar(&targets, "targets", targets, "comma-separated gRPC addresses of the nodes (default: $"+envTargets+" when set, else the cluster of make run)")
	fs.StringVar(&cfg.route, "route", routeRoundRobin, "which target each call goes to: round-robin (the next one), or owner (the node that owns the call's keys, learned from earlier answers; round-robin until known)")
	fs.IntVar(&cfg.partitions, "partitions", client.DefaultPartitionCount, "partition count of the cluster's ring (ring.partition_count in GET /v1/cluster), for --route owner")
	fs.IntVar(&cfg.concurrency, "concurrency", 32, "calls in flight")
	fs.IntVar(&cfg.keys, "keys", 10000, "distinct unique keys")
	fs.StringVar(&cfg.dist, "dist", "uniform", "key distribution: uniform or zipf")
	fs.Float64Var(&cfg.zipfS, "zipf-s", 1.1, "zipf exponent s (> 1): larger is more skewed")
	fs.Int64Var(&cfg.seed, "seed", 1, "seed of the key choice (worker w uses seed+w)")
	fs.IntVar(&cfg.items, "items", 1, "items (checks) per call")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to run (the run ends at whichever bound comes first)")
	fs.Int64Var(&cfg.maxCalls, "max-calls", 10_000_000, "most calls to make")
	fs.StringVar(&mode, "mode", "owner", `consistency mode of every item: local, owner, cached, leased, or "" for the node's default`)
	fs.StringVar(&alg, "algorithm", "token_bucket", "algorithm of every item")
	fs.Int64Var(&cfg.limit, "limit", 1000, "limit of every key per period")
	fs.DurationVar(&cfg.period, "period", time.Second, "period of the limit")
	fs.Int64Var(&cfg.hits, "hits", 1, "hits per item")
	fs.StringVar(&cfg.name, "name", "loadgen", "limit name of every item")
	fs.DurationVar(&cfg.callTimeout, "call-timeout", 5*time.Second, "deadline of each call")
	fs.BoolVar(&cfg.json, "json", false, "print the report as JSON")
	fs.BoolVar(&cfg.baseline, "baseline", false, "instead of --targets, drive an in-process gRPC server that answers every item under limit without deciding: the machine's ceiling for the same calls")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for t := range strings.SplitSeq(targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.targets = append(cfg.targets, t)
		}
	}
	m, err := check.ParseMode(mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	cfg.mode = ringlimitv1.Mode(m)
	a, ok := ringlimitv1.Algorithm_value["ALGORITHM_"+strings.ToUpper(alg)]
	if !ok || a == 0 {
		return nil, fmt.Errorf("--algorithm %q: unknown", alg)
	}
	cfg.algorithm = ringlimitv1.Algorithm(a)
	switch {
	case cfg.route != routeRoundRobin && cfg.route != routeOwner:
		return nil, fmt.Errorf("--route %q: want %s or %s", cfg.route, routeRoundRobin, routeOwner)
	case cfg.partitions < 1:
		return nil, errors.New("--partitions must be at least 1")
	case len(cfg.targets) == 0:
		return nil, errors.New("--targets: none")
	case cfg.concurrency < 1, cfg.keys < 1, cfg.items < 1:
		return nil, errors.New("--concurrency, --keys and --items must be at least 1")
	case cfg.duration <= 0 || cfg.maxCalls < 1:
		return nil, errors.New("--duration and --max-calls must be positive: the run is bounded by both")
	case cfg.callTimeout <= 0:
		return nil, errors.New("--call-timeout must be positive")
	}
	if _, err := newChooser(cfg, rand.New(rand.NewSource(0))); err != nil {
		return nil, err
	}
	return cfg, nil
}
