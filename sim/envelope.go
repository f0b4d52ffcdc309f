package sim

import (
	"slices"

	"github.com/ringlimit/ringlimit/bucket"
)

// admission is one admitted request as the fault checker sees it: the
// instant its node answered it, in nanoseconds since the start, its hits,
// and how long before the answer the request reached its node (wait): it
// was decided somewhere in [at - wait, at]. An answer can wait far longer
// than the envelope's lag after its decision: an owner answers a forward
// once every check in it is decided, so a check decided at once waits for
// another one held on its fence, its lease or a relay (up to
// RequestTimeout/2 or more; the fault checker's leased seed 361: two
// checks decided at 17.014 s answered at 17.270 s).
type admission struct{ at, hits, wait int64 }

// admissionLog keeps every admission of a run, per key, for the envelope
// check. The cluster fills it in settle (step.go), node by node, so a key's
// admissions are sorted by instant only once the run is over (sorted).
type admissionLog struct {
	keys [][]admission
}

func newAdmissionLog(keys int) *admissionLog {
	return &admissionLog{keys: make([][]admission, keys)}
}

// add logs d when it admitted.
func (l *admissionLog) add(d *decision) {
	if d.err || !d.allowed {
		return
	}
	l.keys[d.key] = append(l.keys[d.key], admission{at: d.at, hits: d.hits, wait: max(0, d.at-d.arrived)})
}

// sorted sorts every key's admissions by instant (stable: the order of
// settle breaks ties) and returns them.
func (l *admissionLog) sorted() [][]admission {
	for _, a := range l.keys {
		slices.SortStableFunc(a, func(x, y admission) int {
			switch {
			case x.at < y.at:
				return -1
			case x.at > y.at:
				return 1
			}
			return 0
		})
	}
	return l.keys
}

// Excess is the worst span of one key against its bound: the span
// [From, To] of answers in which the key's admissions exceeded their bound
// by the most (or came closest to it, Over then being zero or negative).
type Excess struct {
	// Key is the key's index in the workload ("k3" is 3).
	Key int `json:"key"`
	// From and To bound the span, from the start of the run: the instants
	// of the first and the last answer in it.
	From Duration `json:"from"`
	To   Duration `json:"to"`
	// Admitted is the hits admitted in the span; Bound what the bound
	// allows there, in hits (not rounded).
	Admitted int64   `json:"admitted"`
	Bound    float64 `json:"bound"`
	// Over is Admitted - Bound: positive for a violation.
	Over float64 `json:"over"`
}

// envelope is the token bucket's envelope of one limit: over any span of
// length t, at most capacity + rate x (t + lag), where lag allows for the
// time between a decision and the answer the checker sees (an owner's
// answer crosses one link). It works in units of hits x period so that
// the arithmetic is exact.
type envelope struct {
	capacity, limit, period, lag int64
}

func newEnvelope(l bucket.Limit, lag int64) envelope {
	return envelope{capacity: l.Capacity(), limit: l.Limit, period: int64(l.Period), lag: lag}
}

// bound returns the envelope over a span of span nanoseconds, in hits.
func (e envelope) bound(span int64) float64 {
	return float64(e.capacity) + float64(e.limit)*float64(span+e.lag)/float64(e.period)
}

// worst returns the span of adm (sorted by instant) whose admissions exceed
// the envelope by the most, in one pass: with S the running sum of hits,
// the excess of the span from admission i to j is
// (S_j·P − L·t_j) − (S_(i−1)·P − L·t_i) − C·P − L·lag, so it keeps the
// least second term seen so far.
func (e envelope) worst(key int, adm []admission) Excess {
	x := Excess{Key: key, Over: -float64(e.capacity)}
	if len(adm) == 0 {
		return x
	}
	if slices.ContainsFunc(adm, func(a admission) bool { return a.wait > 0 }) {
		return worstWith(key, adm, func(from, to int64) float64 { return e.bound(to - from) })
	}
	var sum int64 // hits before admission j
	best, bestFrom := int64(0), 0
	var top int64
	first := true
	for j, a := range adm {
		b := sum*e.period - e.limit*a.at // the span starting at j
		if j == 0 || b < best {
			best, bestFrom = b, j
		}
		sum += a.hits
		v := sum*e.period - e.limit*a.at - best
		if first || v > top {
			first, top = false, v
			x.From, x.To = Duration(adm[bestFrom].at), Duration(a.at)
		}
	}
	x.Admitted = spanHits(adm, int64(x.From), int64(x.To))
	x.Bound = e.bound(int64(x.To - x.From))
	x.Over = float64(x.Admitted) - x.Bound
	return x
}

// spanHits sums the hits of the admissions of adm within [from, to].
func spanHits(adm []admission, from, to int64) int64 {
	var n int64
	for _, a := range adm {
		if a.at >= from && a.at <= to {
			n += a.hits
		}
	}
	return n
}

// worstWith returns the span of adm whose admissions exceed bound(from, to)
// by the most, trying every pair of admissions (the fault checker's keys
// admit a few hundred hits a run). A span runs from the arrival of one
// request (at - wait) to the answer of another, and counts the admissions
// decided within it for certain: those whose request arrived at or after
// its start and whose answer came at or before its end. With no wait that
// is every answer from the first to the last.
func worstWith(key int, adm []admission, bound func(from, to int64) float64) Excess {
	x := Excess{Key: key, Over: -bound(0, 0)}
	first := true
	for i := range adm {
		from := adm[i].at - adm[i].wait
		var n int64
		for j := range adm {
			a := adm[j]
			if a.at-a.wait < from {
				continue
			}
			n += a.hits
			b := bound(from, a.at)
			if over := float64(n) - b; first || over > x.Over {
				first = false
				x = Excess{Key: key, From: Duration(from), To: Duration(a.at), Admitted: n, Bound: b, Over: over}
			}
		}
	}
	return x
}
