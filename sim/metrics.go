package sim

import (
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// winStat are the counters of one measurement window. Requests are counted
// in the window of their arrival, wherever and whenever they are decided;
// messages in the window they are sent.
type winStat struct {
	requests, hits, decisions int64
	admitted, ideal           int64
	over, under               int64
	errors, lost, unserved    int64
	degraded, late            int64
	messages, bytes           int64
	hotHits, hotAdm, hotIdeal int64
}

// keyStat nets one key's admissions against the ideal's in the last two
// windows that saw the key; slot w&1 holds window w. It also holds the
// ideal limiter's bucket of the key (made on first use, in sp: no
// allocation per key, and no heap object per key for the garbage collector
// to mark: 2.7% fewer instructions in a uniform cached run of 100,000
// keys, docs/bench.md, "Session 14"). With the padding, one keyStat is two 64-byte cache lines of a
// large (page-aligned) slice: the bucket and the slots' windows in the
// first, which every arrival reads, the sums in the second.
type keyStat struct {
	ref        bucket.Bucket
	sp         bucket.Space
	win        [2]int32
	_          [8]byte
	adm, ideal [2]int64
	_          [32]byte
}

// metrics accumulates a run's measurements.
type metrics struct {
	window int64 // nanoseconds
	w      []winStat
	keys   []keyStat
	// nodeAdm and nodeHot are the hits admitted by each node per window, for
	// every key and for key 0.
	nodeAdm, nodeHot [][]int64
	names            []string
	viewChanges      int64
	refErrors        int64
}

func newMetrics(windows int, window int64, keys int) *metrics {
	m := &metrics{window: window, w: make([]winStat, windows), keys: make([]keyStat, keys)}
	for i := range m.keys {
		m.keys[i].win = [2]int32{-1, -1}
	}
	return m
}

// grow adds the per-node series of a new node.
func (m *metrics) grow(n int, name string) {
	for len(m.nodeAdm) < n {
		m.nodeAdm = append(m.nodeAdm, make([]int64, len(m.w)))
		m.nodeHot = append(m.nodeHot, make([]int64, len(m.w)))
		m.names = append(m.names, name)
	}
}

// win returns the window of instant at, clamped to the run.
func (m *metrics) win(at int64) int {
	return min(int(at/m.window), len(m.w)-1)
}

// arrival counts a request and the ideal limiter's answer to it.
func (m *metrics) arrival(w, key int, hits int64, idealAllowed bool) {
	ws := &m.w[w]
	ws.requests++
	ws.hits += hits
	if key == 0 {
		ws.hotHits += hits
	}
	if idealAllowed {
		ws.ideal += hits
		if key == 0 {
			ws.hotIdeal += hits
		}
		m.net(key, w, 0, hits)
	}
}

// decision is a node's answer to one client request, kept by the node
// until the window ends and the cluster counts it (step.go).
type decision struct {
	win, key int32
	hits     int64
	at       int64 // the instant the node answered
	// arrived is the instant the request reached its node (trace.go: an
	// answer can wait on others, e.g. the rest of its forward's batch).
	arrived int64

	err      bool // the node answered with an error
	degraded bool
	allowed  bool
	// remaining and owner are the answer's, for the trace (trace.go).
	remaining int64
	owner     string
}

// newDecision records the answer r to request p, given at instant at.
func newDecision(p *pending, r *check.Response, at int64) decision {
	return decision{arrived: p.at, win: p.win, key: p.key, hits: p.hits, at: at, err: r.Err != nil, degraded: r.Degraded, allowed: r.Allowed,
		remaining: r.Remaining, owner: r.Owner}
}

// traffic counts the messages a node sent in one window, and their bytes.
type traffic struct{ messages, bytes int64 }

// decided counts node's answer d.
func (m *metrics) decided(node int, d *decision) {
	w, key, hits := int(d.win), int(d.key), d.hits
	ws := &m.w[w]
	if d.err {
		ws.errors++
		return
	}
	ws.decisions++
	if d.degraded {
		ws.degraded++
	}
	if !d.allowed {
		return
	}
	ws.admitted += hits
	m.nodeAdm[node][w] += hits
	if key == 0 {
		ws.hotAdm += hits
		m.nodeHot[node][w] += hits
	}
	m.net(key, w, hits, 0)
}

// net adds adm and ideal hits of key to window w's netting slot, folding the
// slot's previous window first. A decision so late that its slot already
// moved on cannot be netted: it counts as over-admission (and as late).
func (m *metrics) net(key, w int, adm, ideal int64) {
	st := &m.keys[key]
	s := w & 1
	if st.win[s] != int32(w) {
		if st.win[s] > int32(w) {
			m.w[w].late++
			m.w[w].over += adm
			return
		}
		m.fold(st, s)
		st.win[s], st.adm[s], st.ideal[s] = int32(w), 0, 0
	}
	st.adm[s] += adm
	st.ideal[s] += ideal
}

// fold moves a netting slot's difference into its window's totals.
func (m *metrics) fold(st *keyStat, s int) {
	if st.win[s] < 0 {
		return
	}
	ws := &m.w[st.win[s]]
	if d := st.adm[s] - st.ideal[s]; d > 0 {
		ws.over += d
	} else {
		ws.under -= d
	}
	st.win[s] = -1
}

// finish folds every open netting slot; call it once, after the run.
func (m *metrics) finish() {
	for i := range m.keys {
		m.fold(&m.keys[i], 0)
		m.fold(&m.keys[i], 1)
	}
}
