// Package memlimit sets the Go runtime's soft memory limit of a node
// process from the memory its keys take, so that the collector works
// harder as the key store fills (issue 16: resident memory per key).
//
// Go lets the heap grow to (1 + GOGC/100) times what was live after the
// last collection: at the default GOGC=100 a node holding 1M keys of 125
// bytes of live heap each would take about 250 bytes of resident memory a
// key. The keys are long-lived and their memory is charged as they come
// (rlsync.Metrics.KeyBytes), so a Tuner gives them a smaller margin than
// the rest of the heap: the limit is
//
//	2 × other + (1 + 1/KeyHeadroom) × keys + Slack
//
// where keys is the charge of the keys and other the rest of the live heap
// at the last collection: GOGC=100 for what comes and goes (calls in
// flight, buffers), a quarter for the keys, and a fixed slack for the
// runtime's own memory and what arrives between two updates. It never
// exceeds the limit the process started with (GOMEMLIMIT, when set): the
// operator's ceiling. The runtime bounds what a limit set too low costs:
// the collector takes at most about half the CPU before it lets the heap
// past the limit.
//
// The soft memory limit is process-wide: only a program that runs one
// node (cmd/node) uses a Tuner, never the library.
package memlimit

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	// KeyHeadroom: the keys' heap may grow by 1/KeyHeadroom of itself
	// between two collections (a quarter).
	KeyHeadroom = 4
	// Slack is the fixed margin, in bytes, for the runtime's memory
	// outside the heap and the keys that arrive between two updates.
	Slack = 16 << 20
)

// Limit returns the soft memory limit, in bytes, for a process whose keys
// are charged keys bytes and whose other live heap is other bytes, at most
// ceiling.
func Limit(keys, other, ceiling int64) int64 {
	keys, other = max(keys, 0), max(other, 0)
	l := 2*other + keys + keys/KeyHeadroom + Slack
	return min(l, ceiling)
}

// Tuner keeps the soft memory limit at Limit as the keys' charge and the
// live heap change. It is not safe for concurrent use: one goroutine calls
// Update (Run does).
type Tuner struct {
	keys    func() int64
	ceiling int64
	set     func(int64) int64
	heap    func() (live, cycles uint64)
	// cycles is the number of collections when other was last measured;
	// other the live heap then beyond the keys' charge; limit the limit
	// set last.
	cycles uint64
	other  int64
	limit  int64
}

// New returns a Tuner of the limit of this process; keys returns the
// keys' charge in bytes (it must not block). The ceiling is the limit in
// force now (GOMEMLIMIT, or none).
func New(keys func() int64) *Tuner {
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	heap := func() (uint64, uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64()
	}
	return newTuner(keys, debug.SetMemoryLimit, heap)
}

// newTuner is New with the runtime replaced: set is debug.SetMemoryLimit,
// heap returns the live heap at the last collection and the number of
// collections.
func newTuner(keys func() int64, set func(int64) int64, heap func() (live, cycles uint64)) *Tuner {
	return &Tuner{keys: keys, ceiling: set(-1), set: set, heap: heap}
}

// Update sets the limit from the keys' charge now and the live heap at the
// last collection (measured again only when there was a new one), and
// returns it.
func (t *Tuner) Update() int64 {
	live, cycles := t.heap()
	keys := t.keys()
	if cycles != t.cycles {
		t.cycles = cycles
		t.other = int64(live) - keys
	}
	l := Limit(keys, t.other, t.ceiling)
	if l != t.limit {
		t.set(l)
		t.limit = l
	}
	return l
}

// Run updates the limit every period until ctx ends, then puts the
// ceiling back.
func (t *Tuner) Run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		t.Update()
		select {
		case <-ctx.Done():
			t.set(t.ceiling)
			return
		case <-tick.C:
		}
	}
}
