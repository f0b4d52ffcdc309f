// Command simcheck is ringlimit's randomized fault checker: it runs seeded
// random fault schedules (partitions, isolations, one-way cuts, flapping
// links, crashes, restarts, joins, graceful leaves, clock offsets within
// the nodes' bound, stepping forward and back) through the simulator
// with the interleaving scheduler, and checks every key's admissions over
// every span against the promise of each mode (sim/check.go): owner and
// leased mode with fail-closed within the token bucket's envelope, cached
// mode within its allowance per fault. A failed schedule is shrunk to a
// minimal one (faults dropped while it still fails) and printed with its
// seed. The same flags give the same output, byte for byte.
//
//	go run ./cmd/simcheck -n 1000                         # make sim-check
//	go run ./cmd/simcheck -mode owner/fail-closed -seed 19 -n 1
//	go run ./cmd/simcheck -schedule failing.json -mode leased/fail-closed
//	go run ./cmd/simcheck -schedule failing.json -mode owner/fail-closed -shrink 0 -trace k2
//	go run ./cmd/simcheck -notify 2.5s -n 300       # gossip of joins slower than FenceHold and HandoffWait
//	go run ./cmd/simcheck -reorder 10ms -n 1000     # links that deliver out of order
//
// It exits 1 when a schedule failed, 2 on a usage or run error.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/sim"
)

func main() {
	code, err := run(os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "simcheck:", err)
	}
	os.Exit(code)
}

// isTerminal reports whether f is a character device (a terminal): the
// progress bar goes only there.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// config holds the parsed flags.
type config struct {
	modes, schedule, format, trace string
	seed                           uint64
	n, parallel, shrink            int
	duration, maxOffset, notify    time.Duration
	notifyMax, reorder             time.Duration
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("simcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.modes, "mode", "", "modes to check, mode/policy comma-separated (default owner/fail-closed,leased/fail-closed,cached/local-share)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the first schedule")
	fs.IntVar(&c.n, "n", 1000, "schedules per mode: seeds seed, seed+1, ...")
	fs.IntVar(&c.parallel, "parallel", 0, "schedules run at once (default: one per CPU); the output does not depend on it")
	fs.IntVar(&c.shrink, "shrink", 1000, "failed schedules to shrink and print per mode (the others are listed by seed)")
	fs.DurationVar(&c.duration, "duration", 0, "simulated traffic time of each schedule (default 20s)")
	fs.DurationVar(&c.maxOffset, "max-offset", sim.DefaultCheckSpec().MaxOffset,
		"largest clock offset a schedule gives a node, either way (default: the nodes' bound, sync.Config.MaxClockOffset; 0 draws none; beyond the bound the check sees its effect)")
	fs.DurationVar(&c.notifyMax, "notify-max", 0, "draw each schedule's gossip delay for joins, leaves and heals uniformly in [200ms, this] from its seed (written in the schedule's JSON, so a failure replays; overrides -notify)")
	fs.DurationVar(&c.reorder, "reorder", 0, "give every link an exponential jitter of this mean and let it deliver out of order (default: FIFO links, the simulator's 200µs of uniform jitter)")
	fs.DurationVar(&c.notify, "notify", 0, "how long gossip takes to tell a member of a join, a graceful leave or a healed link (default: the simulator's, 200ms)")
	fs.StringVar(&c.schedule, "schedule", "", "check the schedule in this JSON file (as a failure prints it) instead of drawing seeds")
	fs.StringVar(&c.format, "format", "text", "output: text, or json (every result)")
	fs.StringVar(&c.trace, "trace", "", "write the story of this key (k0, k1, ...) to stderr: each node's views and the key's owner in them, starts, stops, leaves, and every admission or policy decision of the key with its owner and the tokens left; one mode, and -schedule or -n 1")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.n < 1:
		return c, fmt.Errorf("-n %d: want at least 1", c.n)
	case c.format != "text" && c.format != "json":
		return c, fmt.Errorf("-format %q: want text or json", c.format)
	case c.shrink < 0 || c.parallel < 0 || c.duration < 0 || c.maxOffset < 0 || c.notify < 0 || c.notifyMax < 0 || c.reorder < 0:
		return c, errors.New("-shrink, -parallel, -duration, -max-offset, -notify, -notify-max and -reorder must not be negative")
	case c.trace != "" && c.schedule == "" && c.n != 1:
		return c, fmt.Errorf("-trace %s: one schedule at a time (-schedule, or -n 1)", c.trace)
	}
	if c.parallel == 0 {
		c.parallel = runtime.GOMAXPROCS(0)
	}
	return c, nil
}

// run runs the checker and returns the exit code: 0 when every schedule
// kept its promise, 1 when one failed, 2 on an error.
func run(args []string, stdout, stderr io.Writer, tty bool) (int, error) {
	c, err := parse(args, stderr)
	if err != nil {
		return 2, err
	}
	modes, err := sim.ParseCheckModes(c.modes)
	if err != nil {
		return 2, err
	}
	spec := sim.DefaultCheckSpec()
	if c.duration > 0 {
		spec.Duration = c.duration
	}
	spec.MaxOffset = c.maxOffset
	spec.Notify = c.notify
	spec.NotifyMax = c.notifyMax
	spec.Reorder = c.reorder
	var results []*sim.CheckResult
	var scheds []sim.Schedule
	if c.schedule != "" || c.trace != "" {
		s := sim.NewSchedule(spec, c.seed)
		if c.schedule != "" {
			if s, err = readSchedule(c.schedule); err != nil {
				return 2, err
			}
		}
		check, err := checkOne(c.trace, modes, stderr)
		if err != nil {
			return 2, err
		}
		for _, m := range modes {
			r, err := check(spec, m, s)
			if err != nil {
				return 2, err
			}
			results = append(results, r)
			scheds = append(scheds, s)
		}
	} else {
		start := time.Now()
		progress := func(done, total int) {}
		if tty {
			progress = func(done, total int) { bar(stderr, done, total, time.Since(start)) }
		}
		results, err = sim.CheckSeeds(spec, modes, c.seed, c.n, c.parallel, progress)
		if tty {
			fmt.Fprintln(stderr)
		}
		if err != nil {
			return 2, err
		}
		for _, r := range results {
			scheds = append(scheds, r.Schedule)
		}
	}
	if c.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return 2, err
		}
	}
	failed := false
	shrunk := map[string]int{}
	for i, r := range results {
		if !r.Failed() {
			continue
		}
		failed = true
		if c.format != "text" || shrunk[r.Mode] >= c.shrink {
			continue
		}
		shrunk[r.Mode]++
		m := modeOf(modes, r.Mode)
		_, min, err := sim.Shrink(spec, m, r.Schedule, r)
		if err != nil {
			return 2, err
		}
		if err := sim.WriteFailure(stdout, scheds[i], min); err != nil {
			return 2, err
		}
	}
	if c.format == "text" {
		fmt.Fprintf(stdout, "fault checker: %d to %d nodes, %v each, %d keys of %d per %v, %.0f requests/s, interleave %v, clock offsets within ±%v\n",
			spec.MinNodes, spec.MaxNodes, spec.Duration, spec.Keys, spec.Limit.Limit, spec.Limit.Period, spec.Rate, spec.Interleave, spec.MaxOffset)
		if spec.NotifyMax > 0 {
			fmt.Fprintf(stdout, "gossip tells a join, a leave or a heal in a delay drawn per schedule in [200ms, %v]\n", spec.NotifyMax)
		} else if spec.Notify > 0 {
			fmt.Fprintf(stdout, "gossip tells a join, a leave or a heal in %v\n", spec.Notify)
		}
		if spec.Reorder > 0 {
			fmt.Fprintf(stdout, "links reorder: exponential jitter of mean %v\n", spec.Reorder)
		}
		if err := sim.WriteCheckSummary(stdout, sim.Summarize(modes, results)); err != nil {
			return 2, err
		}
	}
	if failed {
		return 1, nil
	}
	return 0, nil
}

// checkOne returns the function that checks one schedule: sim.Check, or
// with a trace of key ("k2") to w, sim.CheckTrace, which takes one mode.
func checkOne(key string, modes []sim.CheckMode, w io.Writer) (func(sim.CheckSpec, sim.CheckMode, sim.Schedule) (*sim.CheckResult, error), error) {
	if key == "" {
		return sim.Check, nil
	}
	k, err := strconv.Atoi(strings.TrimPrefix(key, "k"))
	if err != nil || !strings.HasPrefix(key, "k") || k < 0 {
		return nil, fmt.Errorf("-trace %q: want a key k0, k1, ...", key)
	}
	if len(modes) != 1 {
		return nil, fmt.Errorf("-trace %s: one mode at a time (-mode), not %d", key, len(modes))
	}
	return func(spec sim.CheckSpec, m sim.CheckMode, s sim.Schedule) (*sim.CheckResult, error) {
		return sim.CheckTrace(spec, m, s, k, w)
	}, nil
}

// modeOf returns the mode of modes whose String is name.
func modeOf(modes []sim.CheckMode, name string) sim.CheckMode {
	for _, m := range modes {
		if m.String() == name {
			return m
		}
	}
	return modes[0]
}

// readSchedule reads a schedule as a failure prints it.
func readSchedule(path string) (sim.Schedule, error) {
	var s sim.Schedule
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// bar draws the progress bar on one terminal line.
func bar(w io.Writer, done, total int, elapsed time.Duration) {
	const width = 40
	k := done * width / total
	fmt.Fprintf(w, "\r[%s%s] %d/%d schedules, %v", strings.Repeat("=", k), strings.Repeat(" ", width-k), done, total,
		elapsed.Round(time.Second))
}
