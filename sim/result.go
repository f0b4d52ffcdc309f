package sim

import "math"

// Result is the outcome of one run: one scenario under one Variant.
type Result struct {
	// Scenario is the scenario's name.
	Scenario string `json:"scenario"`
	// Description is the scenario's one-sentence description, if it has one.
	Description string `json:"description,omitempty"`
	// Mode and Flush are the variant's consistency mode and flush interval.
	Mode  string   `json:"mode"`
	Flush Duration `json:"flush"`
	// Seed is the seed the run was generated from.
	Seed uint64 `json:"seed"`
	// Nodes is the number of nodes at the start; Duration the simulated
	// traffic time; Window the measurement window.
	Nodes    int      `json:"nodes"`
	Duration Duration `json:"duration"`
	Window   Duration `json:"window"`
	// Limit describes the limit of every key.
	Limit string `json:"limit"`
	// LimitRate is the limit's long-run rate, in hits per second.
	LimitRate float64 `json:"limit_rate"`
	// Disruption is the span from the first fault to the last recovery; nil
	// for a scenario without events.
	Disruption *Interval `json:"disruption,omitempty"`
	// Phases holds "all" and, for a scenario with a disruption, "before",
	// "during" and "after" (those that are not empty).
	Phases []PhaseStats `json:"phases"`
	// Convergence is how long after the disruption ended the admissions per
	// window came within Tolerance of the ideal and stayed there, measured in
	// whole windows; Converged is false when they never did. Convergence is
	// nil without a disruption followed by at least one whole window.
	Convergence *Duration `json:"convergence"`
	Converged   bool      `json:"converged"`
	// ViewChanges counts membership view changes delivered to nodes.
	ViewChanges int64 `json:"view_changes"`
	// ReferenceErrors counts requests the ideal limiter could not decide
	// (an error of package bucket); nonzero means the comparison is void.
	ReferenceErrors int64 `json:"reference_errors"`
	// Anomalies counts done callbacks a Node called more than once for one
	// check: a bug of the Node under test when nonzero.
	Anomalies int64 `json:"anomalies"`
	// Series are the per-window counts behind the plot.
	Series Series `json:"series"`
}

// Phase returns the phase called name, or the "all" phase.
func (r *Result) Phase(name string) PhaseStats {
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return r.Phases[0]
}

// PhaseStats are the measurements of one phase of a run, summed over its
// windows. Hits are counted in permits, requests one each.
//
// Admissions are netted per key and per window: Over sums, over keys and
// windows, the hits the cluster admitted beyond what the ideal limiter
// admitted for that key in that window; Under the hits it admitted fewer.
type PhaseStats struct {
	// Name is "all", "before", "during" or "after".
	Name string `json:"name"`
	// Start and End bound the phase; a window belongs to the phase its start
	// falls in.
	Start Duration `json:"start"`
	End   Duration `json:"end"`
	// Requests counts client requests and Hits the permits they asked for.
	Requests int64 `json:"requests"`
	Hits     int64 `json:"hits"`
	// Admitted counts hits the cluster admitted, Ideal those the ideal
	// single limiter admitted from the same arrivals; AdmittedPct is
	// Admitted/Ideal in percent.
	Admitted    int64   `json:"admitted"`
	Ideal       int64   `json:"ideal"`
	AdmittedPct float64 `json:"admitted_pct"`
	// Over and Under are the netted excess and shortfall (see the type's
	// comment); OverPct and FalseRejectPct are them over Ideal, in percent.
	Over           int64   `json:"over"`
	Under          int64   `json:"under"`
	OverPct        float64 `json:"over_pct"`
	FalseRejectPct float64 `json:"false_reject_pct"`
	// WorstWindowOverPct is the largest Over/Ideal of a single window, in
	// percent, and WorstWindowAt that window's start.
	WorstWindowOverPct float64  `json:"worst_window_over_pct"`
	WorstWindowAt      Duration `json:"worst_window_at"`
	// Errors counts requests answered with an error, Lost those whose node
	// went down before answering, Unserved those no node was up to take,
	// Degraded those decided by the partition policy, Late decisions too late
	// to net (counted as over).
	Errors   int64 `json:"errors"`
	Lost     int64 `json:"lost"`
	Unserved int64 `json:"unserved"`
	Degraded int64 `json:"degraded"`
	Late     int64 `json:"late"`
	// Messages and Bytes count what the nodes sent each other (the protobuf
	// size of each envelope); PerDecision divides by the decided requests.
	Messages            int64   `json:"messages"`
	Bytes               int64   `json:"bytes"`
	MessagesPerDecision float64 `json:"messages_per_decision"`
	BytesPerDecision    float64 `json:"bytes_per_decision"`
}

// Series are the per-window counts of a run, in hits.
type Series struct {
	// Admitted and Ideal count every key; HotAdmitted and HotIdeal key 0
	// (the hottest key), HotRequested the hits asked for it.
	Admitted     []int64 `json:"admitted"`
	Ideal        []int64 `json:"ideal"`
	HotRequested []int64 `json:"hot_requested"`
	HotAdmitted  []int64 `json:"hot_admitted"`
	HotIdeal     []int64 `json:"hot_ideal"`
	// Nodes names the nodes, and HotByNode[i] the hits of key 0 that node i
	// admitted per window.
	Nodes     []string  `json:"nodes"`
	HotByNode [][]int64 `json:"hot_by_node"`
}

// pct returns a/b in percent, rounded to 1e-4, and 0 when b is 0.
func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*1e6) / 1e4
}

// ratio returns a/b rounded to 1e-4, and 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*1e4) / 1e4
}

// phase sums the windows whose start falls in [start, end).
func (m *metrics) phase(name string, start, end int64) PhaseStats {
	p := PhaseStats{Name: name, Start: Duration(start), End: Duration(end)}
	worst := -1.0
	var decisions int64
	for w := range m.w {
		at := int64(w) * m.window
		if at < start || at >= end {
			continue
		}
		ws := &m.w[w]
		p.Requests += ws.requests
		p.Hits += ws.hits
		p.Admitted += ws.admitted
		p.Ideal += ws.ideal
		p.Over += ws.over
		p.Under += ws.under
		p.Errors += ws.errors
		p.Lost += ws.lost
		p.Unserved += ws.unserved
		p.Degraded += ws.degraded
		p.Late += ws.late
		p.Messages += ws.messages
		p.Bytes += ws.bytes
		decisions += ws.decisions
		if ws.ideal > 0 {
			if o := pct(ws.over, ws.ideal); o > worst {
				worst, p.WorstWindowOverPct, p.WorstWindowAt = o, o, Duration(at)
			}
		}
	}
	p.AdmittedPct = pct(p.Admitted, p.Ideal)
	p.OverPct = pct(p.Over, p.Ideal)
	p.FalseRejectPct = pct(p.Under, p.Ideal)
	p.MessagesPerDecision = ratio(p.Messages, decisions)
	p.BytesPerDecision = ratio(p.Bytes, decisions)
	return p
}

// convergence finds the first whole window starting at or after end from
// which every whole window's admissions stay within tol of the ideal. ok is
// false when there is no whole window after end; converged is false when
// even the last window is out of tolerance.
func (m *metrics) convergence(end, duration int64, tol float64) (after int64, converged, ok bool) {
	whole := int(duration / m.window) // windows [0, whole) are complete
	first := int((end + m.window - 1) / m.window)
	if first >= whole {
		return 0, false, false
	}
	w0 := whole
	for w := whole - 1; w >= first; w-- {
		ws := &m.w[w]
		if math.Abs(float64(ws.admitted-ws.ideal)) > tol*float64(ws.ideal) {
			break
		}
		w0 = w
	}
	if w0 == whole {
		return 0, false, true
	}
	return int64(w0)*m.window - end, true, true
}
