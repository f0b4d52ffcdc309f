package sim

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// Modes lists the consistency modes a comparison runs by default, in the
// order of the table.
func Modes() []check.Mode {
	return []check.Mode{check.ModeLocal, check.ModeOwner, check.ModeCached, check.ModeLeased}
}

// ParseVariants builds the variants of a comparison from a comma-separated
// list of modes ("local,owner,cached,leased"; empty means all four) and one
// of flush intervals ("50ms,100ms"; empty keeps the default). Flush
// intervals multiply the modes that flush (cached and leased); local and
// owner run once.
func ParseVariants(modes, flushes string) ([]Variant, error) {
	var ms []check.Mode
	if strings.TrimSpace(modes) == "" {
		ms = Modes()
	}
	for _, s := range splitList(modes) {
		m, err := check.ParseMode(s)
		if err != nil || m == check.ModeDefault {
			return nil, fmt.Errorf("sim: mode %q: want local, owner, cached or leased", s)
		}
		ms = append(ms, m)
	}
	fs := []time.Duration{0}
	if strings.TrimSpace(flushes) != "" {
		fs = fs[:0]
		for _, s := range splitList(flushes) {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("sim: flush interval %q: want a positive duration such as 100ms", s)
			}
			fs = append(fs, d)
		}
	}
	var vs []Variant
	for _, m := range ms {
		if m == check.ModeLocal || m == check.ModeOwner {
			vs = append(vs, Variant{Mode: m})
			continue
		}
		for _, f := range fs {
			vs = append(vs, Variant{Mode: m, Flush: f})
		}
	}
	return vs, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Run simulates sc under v and returns its measurements.
func Run(sc Scenario, v Variant, opt Options) (*Result, error) {
	c, err := NewCluster(sc, v, opt.Seed)
	if err != nil {
		return nil, err
	}
	c.workers = opt.Workers
	if c.workers <= 0 {
		c.workers = runtime.GOMAXPROCS(0)
	}
	if err := c.SetInterleave(opt.Interleave); err != nil {
		return nil, err
	}
	return c.Run(opt.Progress)
}

// Compare runs every scenario under every variant, all from opt.Seed, so
// each row of the comparison sees the same arrivals, and returns the
// results in that order (scenarios, then variants). It runs up to
// opt.Parallel simulations at once. On errors it returns the results of the
// runs before the first that failed, and that run's error.
func Compare(scenarios []Scenario, variants []Variant, opt Options) ([]*Result, error) {
	type job struct {
		sc Scenario
		v  Variant
	}
	var jobs []job
	for _, sc := range scenarios {
		for _, v := range variants {
			jobs = append(jobs, job{sc, v})
		}
	}
	workers := opt.Parallel
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(jobs))
	if opt.Workers <= 0 {
		// Share the CPUs out among the simulations that run at once.
		opt.Workers = max(1, runtime.GOMAXPROCS(0)/workers)
	}
	results := make([]*Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = Run(jobs[i].sc, jobs[i].v, opt)
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return results[:i], err
		}
	}
	return results, nil
}
