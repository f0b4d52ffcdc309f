// Command sim runs ringlimit's deterministic cluster simulation and reports
// how far the cluster's admissions drift from an ideal single limiter, per
// consistency mode, under partitions, churn and delays.
//
//	go run ./cmd/sim -scenario partition-half -nodes 5 -mode cached,leased -seed 1 -duration 60s
//	go run ./cmd/sim -scenario all -format csv > out.csv
//	go run ./cmd/sim -scenario my.json -plot out.svg
//
// -scenario takes standard names (see -list), "all", or paths to JSON files,
// comma-separated. The same seed gives byte-identical output.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/sim"
)

// gcPercent is the garbage collector's target this batch program runs with
// unless GOGC is set: four times the default heap growth between
// collections, fewer collections for about twice the peak memory
// (docs/accuracy.md, "Speed"). The simulated results do not depend on it.
const gcPercent = 400

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sim:", err)
		}
		os.Exit(2)
	}
}

// config holds the parsed flags.
type config struct {
	scenarios, modes, flush, format, plot string
	nodes                                 int
	seed                                  uint64
	duration, window                      time.Duration
	rate                                  float64
	keys, parallel, workers               int
	quiet, list                           bool
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.scenarios, "scenario", "all", "scenario names or JSON files, comma-separated; \"all\" runs the standard set")
	fs.StringVar(&c.modes, "mode", "", "modes to compare, comma-separated (default local,owner,cached,leased)")
	fs.StringVar(&c.flush, "flush", "", "flush intervals to compare for cached and leased, comma-separated (default: the scenario's)")
	fs.StringVar(&c.format, "format", "table", "output format: table, json or csv")
	fs.StringVar(&c.plot, "plot", "", "write an SVG plot of every run to this file")
	fs.IntVar(&c.nodes, "nodes", 0, "nodes at the start (default: the scenario's, 5)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of every random choice")
	fs.DurationVar(&c.duration, "duration", 0, "simulated time; the timeline stretches with it (default: the scenario's, 60s)")
	fs.DurationVar(&c.window, "window", 0, "measurement window (default: the scenario's, 1s)")
	fs.Float64Var(&c.rate, "rate", 0, "client requests per second, cluster-wide (default: the scenario's)")
	fs.IntVar(&c.keys, "keys", 0, "distinct keys (default: the scenario's)")
	fs.IntVar(&c.parallel, "parallel", 0, "simulations run at once (default: one per CPU); the results do not depend on it")
	fs.IntVar(&c.workers, "workers", 0, "goroutines that run the nodes of one simulation at once (default: the CPUs per simulation running at once; 1 on a busy machine); the results do not depend on it")
	fs.BoolVar(&c.quiet, "q", false, "no progress on stderr (progress is written only when stderr is a terminal; the final summary line always, unless -q)")
	fs.BoolVar(&c.list, "list", false, "list the standard scenarios and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch c.format {
	case "table", "json", "csv":
	default:
		return c, fmt.Errorf("-format %q: want table, json or csv", c.format)
	}
	if c.parallel < 0 || c.workers < 0 {
		return c, fmt.Errorf("-parallel %d, -workers %d: want 0 (the default) or more", c.parallel, c.workers)
	}
	return c, nil
}

// scenarios loads the scenarios named on the command line and applies the
// overriding flags.
func scenarios(c config) ([]sim.Scenario, error) {
	names := strings.Split(c.scenarios, ",")
	if c.scenarios == "all" {
		names = sim.Names()
	}
	var out []sim.Scenario
	for _, name := range names {
		name = strings.TrimSpace(name)
		var (
			s   sim.Scenario
			err error
		)
		if strings.HasSuffix(name, ".json") {
			s, err = sim.LoadFile(name)
		} else {
			s, err = sim.Named(name)
		}
		if err != nil {
			return nil, err
		}
		s = s.Scale(c.nodes, c.duration)
		if c.window > 0 {
			s.Window = sim.Duration(c.window)
		}
		if c.rate > 0 {
			s.Workload.Rate = c.rate
		}
		if c.keys > 0 {
			s.Workload.Keys = c.keys
		}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if c.list {
		for _, name := range sim.Names() {
			s, _ := sim.Named(name)
			fmt.Fprintf(stdout, "%-16s %s\n", name, s.Description)
		}
		return nil
	}
	scs, err := scenarios(c)
	if err != nil {
		return err
	}
	vs, err := sim.ParseVariants(c.modes, c.flush)
	if err != nil {
		return err
	}
	opt := sim.Options{Seed: c.seed, Parallel: c.parallel, Workers: c.workers}
	start := time.Now()
	// The runs go on in parallel (sim.Options.Parallel): progress comes
	// from each of them, and the line sums them up.
	type runKey struct {
		scenario string
		variant  sim.Variant
	}
	var (
		mu       sync.Mutex
		requests = map[runKey]int64{} // the latest count of each run
		done     int
		printed  time.Time
	)
	sum := func() (total int64) {
		for _, n := range requests {
			total += n
		}
		return total
	}
	// The progress line rewrites itself with \r: only a terminal shows it
	// as one line; a redirected log would get every update, so it gets the
	// summary alone.
	tty := isTerminal(stderr)
	if !c.quiet {
		opt.Progress = func(p sim.Progress) {
			mu.Lock()
			defer mu.Unlock()
			requests[runKey{p.Scenario, p.Variant}] = p.Requests
			if p.Now == p.Duration {
				done++
			}
			if !tty || time.Since(printed) < 100*time.Millisecond {
				return
			}
			printed = time.Now()
			fmt.Fprintf(stderr, "\r\033[K%d/%d runs done, %s %v: %v/%v simulated, %d requests, %.1fs",
				done, len(scs)*len(vs), p.Scenario, p.Variant, p.Now, p.Duration, sum(), time.Since(start).Seconds())
		}
	}
	results, err := sim.Compare(scs, vs, opt)
	if !c.quiet {
		total := sum()
		el := time.Since(start).Seconds()
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		fmt.Fprintf(stderr, "%d runs, %d requests simulated in %.1fs (%.0f requests/s)\n", len(results), total, el, float64(total)/el)
	}
	if err != nil {
		return fmt.Errorf("%w (seed %d)", err, c.seed)
	}
	for _, r := range results {
		if r.ReferenceErrors > 0 || r.Anomalies > 0 {
			fmt.Fprintf(stderr, "sim: warning: %s %s: %d reference errors, %d anomalies (seed %d)\n",
				r.Scenario, r.Mode, r.ReferenceErrors, r.Anomalies, c.seed)
		}
	}
	if c.plot != "" {
		if err := writePlot(c.plot, results); err != nil {
			return err
		}
	}
	switch c.format {
	case "json":
		return sim.WriteJSON(stdout, results)
	case "csv":
		return sim.WriteCSV(stdout, results)
	}
	fmt.Fprintf(stdout, "seed %d; accuracy against an ideal single limiter of the same algorithm (see docs/accuracy.md)\n", c.seed)
	return sim.WriteTable(stdout, results)
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func writePlot(path string, results []*sim.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := sim.WriteSVG(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
