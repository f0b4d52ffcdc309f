package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// admission is one admission as the fault checker sees it: the instant
// the deciding node's bucket took its tokens, in nanoseconds since the
// start (sync.Config.Admitted), and its hits. The instant is the
// decision's, not the answer's: an answer can wait far longer than a link
// after its decision (an owner answers a forward once every check in it is
// decided, so a check decided at once waits for another one held on its
// fence, its lease or a relay; the fault checker's leased seed 361: two
// checks decided at 17.014 s answered at 17.270 s).
type admission struct{ at, hits int64 }

// admissionLog keeps every admission of a run, per key, for the envelope
// check. The nodes fill it as they decide (Cluster.admitted), so a key's
// admissions are sorted by instant only once the run is over (sorted).
type admissionLog struct {
	keys [][]admission
}

func newAdmissionLog(keys int) *admissionLog {
	return &admissionLog{keys: make([][]admission, keys)}
}

// add logs an admission of hits of key at instant at.
func (l *admissionLog) add(key int, hits, at int64) {
	l.keys[key] = append(l.keys[key], admission{at: at, hits: hits})
}

// admitted logs, when the cluster keeps an admission log, that node s's
// bucket admitted hits of key at at (on s's clock).
func (c *Cluster) admitted(s *simNode, key string, hits int64, at time.Time) {
	if c.adm == nil {
		return
	}
	name, ok := strings.CutPrefix(key, "k") // workload.go names key i "ki"
	k, err := strconv.Atoi(name)
	if !ok || err != nil || k < 0 || k >= len(c.adm.keys) {
		c.err = fmt.Errorf("sim: admission of unknown key %q", key)
		return
	}
	c.adm.add(k, hits, int64(at.Sub(c.epoch))-s.skew)
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
// [From, To] of decisions in which the key's admissions exceeded their bound
// by the most (or came closest to it, Over then being zero or negative).
type Excess struct {
	// Key is the key's index in the workload ("k3" is 3).
	Key int `json:"key"`
	// From and To bound the span, from the start of the run: the instants
	// of the first and the last admission in it.
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
// length t, at most capacity + rate x (t + lag), where lag widens every
// span (CheckMode.LeaseSlack; zero otherwise: the admissions are logged at
// their decisions). It works in units of hits x period so that the
// arithmetic is exact.
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
	// Over from integers, so that its sign is exact: a span that meets
	// the envelope exactly (the bucket's own, logged at its decisions) is
	// not over by a rounding.
	over := (x.Admitted-e.capacity)*e.period - e.limit*(int64(x.To-x.From)+e.lag)
	x.Over = float64(over) / float64(e.period)
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

// worstWith returns the span of adm (sorted by instant) whose admissions
// exceed bound(from, to) by the most, trying every pair of admissions (the
// fault checker's keys admit a few hundred hits a run).
func worstWith(key int, adm []admission, bound func(from, to int64) float64) Excess {
	x := Excess{Key: key, Over: -bound(0, 0)}
	first := true
	for i := range adm {
		from := adm[i].at
		var n int64
		for _, a := range adm[i:] {
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
