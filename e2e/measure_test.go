//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// failed reports why r failed (the call, or an item answered with an error),
// or "" when it did not.
func failed(c *cluster, r *callRec) string {
	at := r.start.Format("15:04:05.000")
	if r.err != nil {
		st := status.Convert(r.err)
		return fmt.Sprintf("call to %s sent %s: %v: %s", c.nodes[r.node].name, at, st.Code(), st.Message())
	}
	for _, res := range r.res {
		if res.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT && res.Status != ringlimitv1.Status_STATUS_OVER_LIMIT {
			return fmt.Sprintf("call to %s sent %s: item %v %q", c.nodes[r.node].name, at, res.Status, res.Error)
		}
	}
	return ""
}

// failures counts the calls kept by keep that failed, with a few examples.
func failures(c *cluster, recs []callRec, keep func(*callRec) bool) (int, []string) {
	n := 0
	var ex []string
	for k := range recs {
		r := &recs[k]
		if !keep(r) {
			continue
		}
		if why := failed(c, r); why != "" {
			n++
			if len(ex) < 5 {
				ex = append(ex, why)
			}
		}
	}
	return n, ex
}

// sentTo returns a filter of the calls sent to the nodes idx within
// [from, until).
func sentTo(idx []int, from, until time.Time) func(*callRec) bool {
	return func(r *callRec) bool {
		ok := false
		for _, i := range idx {
			ok = ok || r.node == i
		}
		return ok && !r.start.Before(from) && r.start.Before(until)
	}
}

// anytime is a filter of every call.
func anytime(*callRec) bool { return true }

// tally is what the items of one family got.
type tally struct {
	Answers  int `json:"answers"`
	Admitted int `json:"admitted"`
	Degraded int `json:"degraded"`
	// DegradedAdmitted counts the degraded answers that admitted.
	DegradedAdmitted int `json:"degraded_admitted"`
}

// count tallies the answered items of family fam in the calls kept by keep.
func count(recs []callRec, items []*ringlimitv1.CheckItem, fam string, keep func(*callRec) bool) tally {
	var t tally
	for k := range recs {
		r := &recs[k]
		if r.res == nil || !keep(r) {
			continue
		}
		for j, res := range r.res {
			if items[j].Name != fam || (res.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT && res.Status != ringlimitv1.Status_STATUS_OVER_LIMIT) {
				continue
			}
			t.Answers++
			ok := res.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT
			if ok {
				t.Admitted++
			}
			if res.Degraded {
				t.Degraded++
				if ok {
					t.DegradedAdmitted++
				}
			}
		}
	}
	return t
}

// admittedByKey returns the hits admitted per key of family fam in the calls
// kept by keep.
func admittedByKey(recs []callRec, items []*ringlimitv1.CheckItem, fam string, keep func(*callRec) bool) map[string]int64 {
	out := map[string]int64{}
	for k := range recs {
		r := &recs[k]
		if r.res == nil || !keep(r) {
			continue
		}
		for j, res := range r.res {
			if items[j].Name == fam && res.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				out[items[j].UniqueKey] += items[j].GetHits()
			}
		}
	}
	return out
}

// checkSpent checks that no key of spent admitted, under load (every call
// of recs), more than it had left after being spent plus slack:
// max(0, limit - pre) + slack, where pre is what it admitted while being
// spent. A fault that hands a spent key a fresh bucket breaks this. For such
// a key it logs the first admissions under load: when, through which node,
// by which owner, degraded or not, and the remaining count. It returns the
// hits admitted under load, and the hits admitted while spending beyond
// limit + slack (an accuracy figure of the mode, with no fault, reported
// but not asserted here).
func checkSpent(t *testing.T, c *cluster, recs []callRec, items, spent []*ringlimitv1.CheckItem, pre map[string]int64, slack int64) (load, preOver int64) {
	t.Helper()
	if len(spent) == 0 {
		return 0, 0
	}
	got := admittedByKey(recs, items, spent[0].Name, anytime)
	mine := map[string]int64{}
	for _, it := range spent {
		mine[it.UniqueKey] = pre[it.UniqueKey]
		load += got[it.UniqueKey]
		preOver += max(0, pre[it.UniqueKey]-it.Limit-slack)
		if left := max(0, it.Limit-pre[it.UniqueKey]) + slack; got[it.UniqueKey] > left {
			t.Errorf("%s %s: %d hits admitted under load, want <= %d (limit %d - %d admitted while spending it, + %d): the fault gave hits back; admitted under load: %s",
				it.Name, it.UniqueKey, got[it.UniqueKey], left, it.Limit, pre[it.UniqueKey], slack, admissions(c, recs, items, it, 8))
		}
	}
	if preOver > 0 {
		t.Logf("NOTE: with no fault yet, the %d keys of %s admitted %d hits beyond limit + %d while being spent (%v)",
			len(spent), spent[0].Name, preOver, slack, mine)
	}
	return load, preOver
}

// admissions describes the first n admissions of item's key in recs.
func admissions(c *cluster, recs []callRec, items []*ringlimitv1.CheckItem, item *ringlimitv1.CheckItem, n int) string {
	var b strings.Builder
	for k := range recs {
		r := &recs[k]
		for j, res := range r.res {
			if items[j].Name != item.Name || items[j].UniqueKey != item.UniqueKey || res.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
				continue
			}
			if n == 0 {
				b.WriteString("...")
				return b.String()
			}
			n--
			fmt.Fprintf(&b, "[%s via %s, owner %s, degraded %v, remaining %d] ", r.start.Format("15:04:05.000"),
				c.nodes[r.node].name, res.Owner, res.Degraded, res.Remaining)
		}
	}
	return b.String()
}

// phase is a stretch of a scenario's timeline.
type phase struct {
	name     string
	from, to time.Time
}

// phaseFig compares the admissions of one family in one phase with an ideal
// limiter: one exact bucket per key fed the same answered requests in the
// order they were sent.
type phaseFig struct {
	Phase    string  `json:"phase"`
	Seconds  float64 `json:"seconds"`
	Keys     int     `json:"keys"`
	Answers  int     `json:"answers"`
	Admitted int     `json:"admitted"`
	Ideal    int     `json:"ideal"`
	// AdmittedPct is 100 x admitted / ideal (the simulator's adm%).
	AdmittedPct float64 `json:"admitted_pct"`
	// OverPct is 100 x (admitted - ideal) / ideal, at least 0 (the
	// simulator's over%, summed over the phase rather than per window).
	OverPct float64 `json:"over_pct"`
}

// compareIdeal returns fam's figures per phase.
func compareIdeal(recs []callRec, items []*ringlimitv1.CheckItem, fam string, phases []phase) []phaseFig {
	figs := make([]phaseFig, len(phases))
	for p, ph := range phases {
		figs[p].Phase = ph.name
		figs[p].Seconds = ph.to.Sub(ph.from).Seconds()
	}
	ideal := map[string]bucket.Bucket{}
	seen := make([]map[string]bool, len(phases))
	for p := range seen {
		seen[p] = map[string]bool{}
	}
	for k := range recs { // sorted by start
		r := &recs[k]
		if r.res == nil {
			continue
		}
		p := -1
		for q, ph := range phases {
			if !r.start.Before(ph.from) && r.start.Before(ph.to) {
				p = q
			}
		}
		for j, res := range r.res {
			it := items[j]
			if it.Name != fam || (res.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT && res.Status != ringlimitv1.Status_STATUS_OVER_LIMIT) {
				continue
			}
			b := ideal[it.UniqueKey]
			if b == nil {
				var err error
				b, err = bucket.New(bucket.Limit{Algorithm: bucket.TokenBucket, Limit: it.Limit,
					Period: it.Period.AsDuration(), Burst: it.Burst}, r.start)
				if err != nil {
					panic(fmt.Sprintf("e2e: broken invariant: the load's own limit is invalid: %v", err))
				}
				ideal[it.UniqueKey] = b
			}
			d, _ := b.Take(r.start, it.GetHits())
			if p < 0 {
				continue
			}
			figs[p].Answers++
			seen[p][it.UniqueKey] = true
			if d.Allowed {
				figs[p].Ideal++
			}
			if res.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				figs[p].Admitted++
			}
		}
	}
	for p := range figs {
		figs[p].Keys = len(seen[p])
		if figs[p].Ideal > 0 {
			figs[p].AdmittedPct = round2(100 * float64(figs[p].Admitted) / float64(figs[p].Ideal))
			figs[p].OverPct = round2(math.Max(0, 100*float64(figs[p].Admitted-figs[p].Ideal)/float64(figs[p].Ideal)))
		}
	}
	return figs
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// ms returns d in milliseconds, for reports.
func ms(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }

// emit prints scenario's figures as one machine-readable line,
// "E2E-RESULT {json}", on standard output, and logs them.
func emit(t *testing.T, scenario string, fields map[string]any) {
	fields["scenario"] = scenario
	fields["pass"] = !t.Failed()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Errorf("encoding the result: %v", err)
		return
	}
	fmt.Printf("E2E-RESULT %s\n", b)
}
