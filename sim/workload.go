package sim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// draw is what the workload draws for one arrival.
type draw struct {
	key  int
	hits int64
	// u is the load balancer's uniform draw in [0, 1), scaled by the
	// weights when the arrival comes (nodes may join meanwhile).
	u float64
	// next is the time of the following arrival.
	next int64
}

// workload generates the client traffic from its own seeded generator, so
// every mode of one comparison sees the very same arrivals.
type workload struct {
	spec Workload
	rng  *rand.Rand
	zipf *rand.Zipf
	// names holds every key's name, one after the other; ends[i] is the
	// end of key i's name in it (its start is ends[i-1], or 0). A slice of
	// offsets, not of strings: the garbage collector has no pointer to
	// follow in it, and it is a quarter of the size, so the arrival of a
	// cold key reads it from a nearer cache. (With 100,000 keys it cut a
	// coordinated run's instructions by 5-8% in owner and leased mode, 1%
	// in cached: docs/bench.md, "Session 14".)
	names string
	ends  []int32
	// meanGap is the mean time between arrivals while on, in nanoseconds.
	meanGap float64
	// on and cycle describe bursty traffic (cycle zero: steady).
	on, cycle int64
	// onTime is the "on" time elapsed at the last arrival, in nanoseconds.
	onTime float64
	// cum holds the load balancer's cumulative weights, by node index.
	cum []float64
}

func newWorkload(spec Workload, rng *rand.Rand) *workload {
	w := &workload{spec: spec, rng: rng, meanGap: 1e9 / spec.Rate, ends: make([]int32, spec.Keys)}
	var sb strings.Builder
	for i := range w.ends {
		sb.WriteString("k")
		sb.WriteString(strconv.Itoa(i))
		w.ends[i] = int32(sb.Len())
	}
	w.names = sb.String()
	if spec.Dist == "zipf" && spec.Keys > 1 {
		w.zipf = rand.NewZipf(rng, spec.ZipfS, 1, uint64(spec.Keys-1))
	}
	if spec.On > 0 {
		w.on, w.cycle = int64(spec.On), int64(spec.On+spec.Off)
	}
	return w
}

// keyName returns the name of key i: "k" and its index.
func (w *workload) keyName(i int) string {
	start := int32(0)
	if i > 0 {
		start = w.ends[i-1]
	}
	return w.names[start:w.ends[i]]
}

// keys returns the number of keys.
func (w *workload) keys() int { return len(w.ends) }

// weight returns the load balancer's weight of the initial node i.
func (w *workload) weight(i int) float64 {
	switch {
	case len(w.spec.Weights) > i:
		return w.spec.Weights[i]
	case w.spec.Skew > 0:
		return 1 / math.Pow(float64(i+1), w.spec.Skew)
	}
	return 1
}

// reweigh rebuilds the cumulative weights after a node was added.
func (w *workload) reweigh(nodes []*simNode) {
	w.cum = w.cum[:0]
	sum := 0.0
	for _, s := range nodes {
		sum += s.weight
		w.cum = append(w.cum, sum)
	}
}

// start draws the time of the first arrival and returns it.
func (w *workload) start() int64 { return w.next() }

// draw draws one arrival: its key, its hits, its load balancer draw and
// the time of the arrival after it, in that order.
func (w *workload) draw() draw {
	var d draw
	d.key = w.key()
	d.hits = w.hits()
	d.u = w.rng.Float64()
	d.next = w.next()
	return d
}

// take returns the next arrival's draws.
func (w *workload) take() draw { return w.draw() }

// next returns the time of the next arrival, in nanoseconds since the start.
func (w *workload) next() int64 {
	if w.spec.Arrivals == "fixed" {
		w.onTime += w.meanGap
	} else {
		w.onTime += w.rng.ExpFloat64() * w.meanGap
	}
	t := int64(w.onTime)
	if w.cycle > 0 {
		k := t / w.on
		t = k*w.cycle + t%w.on
	}
	return t
}

// key draws the key index of a request.
func (w *workload) key() int {
	switch {
	case w.spec.Keys == 1:
		return 0
	case w.zipf != nil:
		return int(w.zipf.Uint64())
	case w.spec.Dist == "hot":
		if w.rng.Float64() < w.spec.HotShare {
			return 0
		}
		return 1 + w.rng.IntN(w.spec.Keys-1)
	}
	return w.rng.IntN(w.spec.Keys)
}

// hits draws the hits of a request.
func (w *workload) hits() int64 {
	if w.spec.MaxHits > 1 && w.spec.MultiHit > 0 && w.rng.Float64() < w.spec.MultiHit {
		return 2 + w.rng.Int64N(w.spec.MaxHits-1)
	}
	return 1
}

// node returns the node the load balancer sends a request to, for its
// uniform draw u: by weight, and when that node is not serving, the next
// one that is (a load balancer routes around a node whose health check
// fails). It returns -1 when no node serves. (A cluster always has a node:
// the initial ones stay in nodes, even down.)
func (w *workload) node(nodes []*simNode, u float64) int {
	n := len(w.cum)
	if n == 0 {
		return -1
	}
	u *= w.cum[n-1]
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if w.cum[mid] <= u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	i := min(lo, n-1)
	for k := range n {
		if j := (i + k) % n; nodes[j].serving() {
			return j
		}
	}
	return -1
}
