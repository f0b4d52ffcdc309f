// Command compare runs ringlimit, Gubernator and Lyft's ratelimit service
// (with Redis) side by side on loopback, one system at a time, interleaved
// over rounds, and drives every one with the same gRPC load tool, next to a
// baseline that answers the same APIs without deciding anything. It prints
// a table of medians and ratios and writes the runs as JSON. See
// docs/bench.md ("Beside Gubernator and Lyft") and `make compare`.
//
// The same binary serves the baseline (compare -serve-baseline ADDR) and
// Gubernator's daemons (compare -serve-gubernator, configured by GUBER_*
// variables) as processes of their own, and prints the tables of a JSON
// report in Markdown (compare -markdown FILE).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// config is one comparison.
type config struct {
	rounds      int
	duration    time.Duration // of every throughput run
	maxCalls    int64         // of every throughput run
	conc        int           // single-check concurrency
	batchConc   int           // concurrency of 100-check calls
	batchItems  int           // checks per batched call
	keys        int           // distinct keys of throughput runs
	hotCalls    int64         // calls of one hit in the hot-key run
	killWait    time.Duration // longest wait for an owner kill to heal
	noKill      bool
	killOnly    bool           // run the owner kills alone: no warm-up, throughput or hot-key runs
	only        *regexp.Regexp // systems to run (by slot name); nil: all
	gomaxprocs  int
	redisPool   int
	out         string
	logDir      string
	self        string // this binary, which serves the baseline and Gubernator
	nodeBin     string
	lyftBin     string
	redisBin    string
	rlVersion   string
	callTimeout time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(mainErr(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "-serve-baseline" {
		return serveBaseline(args[1])
	}
	if len(args) == 1 && args[0] == "-serve-gubernator" {
		return serveGubernator()
	}
	if len(args) == 2 && args[0] == "-markdown" {
		rep, err := readReport(args[1])
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		rep.markdown(stdout)
		return 0
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 2
	}
	rep, err := compare(ctx, cfg, stderr)
	if rep != nil {
		rep.summarise()
		rep.print(stdout)
		if werr := rep.write(cfg.out); werr != nil {
			fmt.Fprintln(stderr, "compare:", werr)
			return 1
		}
		fmt.Fprintf(stdout, "\nJSON: %s; server logs: %s\n", cfg.out, cfg.logDir)
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	// The concurrencies and the batch size are fixed: the tables and the
	// targets name the workloads by them (wlSingle32, wlBatch).
	cfg := &config{conc: 32, batchConc: 8, batchItems: 100}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(out)
	var only string
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds: every system runs every workload once per round, one system at a time")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of each throughput run (each also ends at --max-calls)")
	fs.Int64Var(&cfg.maxCalls, "max-calls", 5_000_000, "most calls of each throughput run")
	fs.IntVar(&cfg.keys, "keys", 10000, "distinct keys (descriptor values) of the throughput runs, drawn uniformly")
	fs.Int64Var(&cfg.hotCalls, "hot-calls", 3000, "calls of one hit on the hot key (limit 1000 per hour) in the accuracy runs")
	fs.DurationVar(&cfg.killWait, "kill-wait", 60*time.Second, "owner kill: longest wait, after the kill, for the system to answer again")
	fs.BoolVar(&cfg.noKill, "no-kill", false, "skip the owner kill runs")
	fs.BoolVar(&cfg.killOnly, "kill-only", false, "run only the owner kill runs (of the systems that have them: ringlimit, gubernator)")
	fs.StringVar(&only, "only", "", "run only the systems whose slot name matches this regular expression (baseline, ringlimit, ringlimit-1, gubernator, lyft-1, lyft-3)")
	fs.IntVar(&cfg.gomaxprocs, "gomaxprocs", 1, "GOMAXPROCS of every server process")
	fs.IntVar(&cfg.redisPool, "redis-pool", 10, "REDIS_POOL_SIZE of Lyft's service (its default is 10)")
	fs.StringVar(&cfg.out, "out", "compare.json", "write the runs, medians and settings here as JSON")
	fs.StringVar(&cfg.logDir, "log-dir", "", "directory of the servers' logs and files (default: a new temporary directory)")
	fs.StringVar(&cfg.nodeBin, "node", "bin/ringlimit-node", "ringlimit's node binary")
	fs.StringVar(&cfg.lyftBin, "lyft", "bin/ratelimit", "Lyft's ratelimit service binary")
	fs.StringVar(&cfg.redisBin, "redis", "redis-server", "Redis server binary")
	fs.StringVar(&cfg.rlVersion, "ringlimit-version", "", "ringlimit's version to report (e.g. git describe)")
	fs.DurationVar(&cfg.callTimeout, "call-timeout", 2*time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.rounds < 1, cfg.keys < 1, cfg.gomaxprocs < 1, cfg.redisPool < 1:
		return nil, errors.New("--rounds, --keys, --gomaxprocs and --redis-pool must be at least 1")
	case cfg.noKill && cfg.killOnly:
		return nil, errors.New("--no-kill and --kill-only exclude each other")
	case cfg.duration <= 0 || cfg.maxCalls < 1 || cfg.hotCalls < 1 || cfg.killWait <= 0 || cfg.callTimeout <= 0:
		return nil, errors.New("--duration, --max-calls, --hot-calls, --kill-wait and --call-timeout must be positive: every run is bounded")
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return nil, fmt.Errorf("--only: %w", err)
		}
		cfg.only = re
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary: %w", err)
	}
	cfg.self = self
	for _, p := range []*string{&cfg.nodeBin, &cfg.lyftBin} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	if cfg.logDir == "" {
		if cfg.logDir, err = os.MkdirTemp("", "ringlimit-compare-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
		return nil, err
	}
	return cfg, nil
}

// compare runs every round and returns the report, partial if a run
// failed (with the error).
func compare(ctx context.Context, cfg *config, log io.Writer) (*report, error) {
	rep, err := newReport(cfg)
	if err != nil {
		return nil, err
	}
	slots := slotsOf(cfg)
	if len(slots) == 0 {
		return rep, errors.New("--only (and --kill-only) select no system")
	}
	for r := range cfg.rounds {
		// Each round starts at another system, so that a slow stretch of
		// the machine does not always fall on the same one.
		for k := range slots {
			s := slots[(r+k)%len(slots)]
			fmt.Fprintf(log, "round %d: %s (load average %.2f)\n", r+1, s.name, loadAvg())
			if err := s.run(ctx, cfg, r+1, rep, log); err != nil {
				return rep, fmt.Errorf("round %d, %s: %w", r+1, s.name, err)
			}
		}
	}
	return rep, nil
}

// slot is one system's turn in a round: it starts the system, runs its
// workloads and stops every process it started.
type slot struct {
	name  string
	run   func(ctx context.Context, cfg *config, round int, rep *report, log io.Writer) error
	kills bool // whether it runs owner kills
}

func slotsOf(cfg *config) []slot {
	all := []slot{
		{"baseline", runBaselineSlot, false},
		{"ringlimit", runRinglimitSlot, true},
		{"ringlimit-1", runRinglimit1Slot, false},
		{"gubernator", runGubernatorSlot, true},
		{"lyft-1", func(ctx context.Context, cfg *config, round int, rep *report, log io.Writer) error {
			return runLyftSlot(ctx, cfg, round, rep, 1)
		}, false},
		{"lyft-3", func(ctx context.Context, cfg *config, round int, rep *report, log io.Writer) error {
			return runLyftSlot(ctx, cfg, round, rep, 3)
		}, false},
	}
	var out []slot
	for _, s := range all {
		if (cfg.only == nil || cfg.only.MatchString(s.name)) && (s.kills || !cfg.killOnly) {
			out = append(out, s)
		}
	}
	return out
}

// runName returns a limit name unique to one run, so that each run starts
// on fresh buckets.
func runName(round int, parts ...string) string {
	return fmt.Sprintf("r%d-%s", round, strings.Join(parts, "-"))
}
