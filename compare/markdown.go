package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// readReport reads a report written by report.write.
func readReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("compare: %s: %w", path, err)
	}
	return &r, nil
}

// markdown writes the report's tables in Markdown, as docs/comparison.md
// shows them (compare -markdown compare.json).
func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "Run of %s: `%s`; %s; %d round(s) of %s per throughput run.\n\n", r.Date, r.Command, r.Machine, r.Rounds, r.Duration)
	fmt.Fprintln(w, "| system | version |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, k := range sortedKeys(r.Versions) {
		fmt.Fprintf(w, "| %s | %s |\n", k, r.Versions[k])
	}
	fmt.Fprintln(w, "\n| settings of | |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, k := range sortedKeys(r.Settings) {
		fmt.Fprintf(w, "| %s | %s |\n", k, strings.ReplaceAll(r.Settings[k], "|", "\\|"))
	}

	fmt.Fprintln(w, "\nThroughput and latency, medians over the rounds (x baseline: calls/s over the no-limiter baseline's in the same workload; load: the 1-minute load average at the start of each round's run):")
	fmt.Fprintln(w, "\n| workload | system | calls/s | checks/s | p50 ms | p99 ms | servers' CPU per call | x baseline | errors | load |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, m := range r.Medians {
		if m.Workload == wlHot {
			continue
		}
		xb := ""
		if b := r.find(m.Workload, sysBaseline); b != nil && b.CallsPerSec > 0 {
			xb = fmt.Sprintf("%.2f", m.CallsPerSec/b.CallsPerSec)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %.1f | %.0f µs | %s | %d | %s |\n", m.Workload, m.System,
			thousands(m.CallsPerSec), thousands(m.DecisionsPerSec), m.P50ms, m.P99ms, m.CPUPerCallUs, xb, m.Errors, loads(m.LoadAvgs))
	}

	fmt.Fprintln(w, "\nTargets of issue 19 (ratios of median calls/s; p50 in ms):")
	fmt.Fprintln(w, "\nneeds x baseline: for a ratio to another system, the calls/s the target asks for as a fraction of the no-limiter baseline's in the same workload (1 or more: more than a server that decides nothing reached); ringlimit x baseline: what ringlimit reached as that fraction.")
	fmt.Fprintln(w, "\n| ratio | target | measured | needs x baseline | ringlimit x baseline | |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | --- |")
	for _, t := range r.Targets {
		need, got := "-", "-"
		if t.NeedsBaseline > 0 {
			need, got = fmt.Sprintf("%.2f", t.NeedsBaseline), fmt.Sprintf("%.2f", t.Baseline)
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %s | %s | %s |\n", t.What, t.Want, t.Measured, need, got, t.verdict("**missed**", "(no target)"))
	}

	fmt.Fprintf(w, "\nAccuracy, %s: hits admitted where one bucket admits %d, each round:\n\n", wlHot, hotLimit)
	fmt.Fprintln(w, "| system | admitted | errors | load |")
	fmt.Fprintln(w, "| --- | --- | ---: | --- |")
	for _, h := range r.hotRows() {
		fmt.Fprintf(w, "| %s | %s | %d | %s |\n", h.system, strings.Join(h.admitted, ", "), h.errors, strings.Join(h.loads, " "))
	}

	fmt.Fprintf(w, "\n%s, each round:\n\n", wlKill)
	fmt.Fprintln(w, "| system | answered again after | bad answers (failed) | degraded: allowed / denied | admitted: before the kill + degraded + after = total | one bucket | over it | state | remaining / expected at the first good answer | load |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
	var kills []runRecord
	for _, rec := range r.Runs {
		if rec.Kill != nil {
			kills = append(kills, rec)
		}
	}
	slices.SortStableFunc(kills, func(a, b runRecord) int { return strings.Compare(a.System, b.System) })
	for _, rec := range kills {
		k := rec.Kill
		fmt.Fprintf(w, "| %s | %s | %d (%d) | %d / %d | %s | %d | +%d | %s | %d / %d | %.1f |\n", rec.System, k.again(), k.BadAnswers, k.Failed,
			k.AdmittedDegraded, k.DeniedDegraded, k.admittedSum(), k.Bucket, k.Excess, k.State, k.RemainingAt, k.ExpectedAt, rec.LoadAvg)
	}
}

// thousands formats v rounded, with commas between thousands.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
