package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes results as an indented JSON array.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// convergence renders a result's convergence: "-" without a disruption
// followed by a whole window, "never" when it did not converge.
func (r *Result) convergence() string {
	switch {
	case r.Convergence == nil:
		return "-"
	case !r.Converged:
		return "never"
	}
	return r.Convergence.String()
}

// f2 formats a percentage or ratio with two decimals.
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

// WriteTable writes the comparison table: one row per run, the whole run's
// accuracy first, then the disrupted phase's and the recovery's.
//
// Columns: adm% (admitted/ideal), over% and rej% (netted over-admission and
// false rejections over the whole run), worst% (the worst single window's
// over-admission), the same over% and rej% during the disruption, conv (the
// convergence time after it), msg/dec and B/dec (messages and bytes between
// nodes per decided request), degr% (requests decided by the partition
// policy) and lost (requests never answered).
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tflush\tadm%\tover%\trej%\tworst%\tduring over%\tduring rej%\tconv\tmsg/dec\tB/dec\tdegr%\tlost\t")
	for _, r := range results {
		all := r.Phases[0]
		during := "-\t-"
		if r.Disruption != nil {
			d := r.Phase("during")
			during = f2(d.OverPct) + "\t" + f2(d.FalseRejectPct)
		}
		flush := r.Flush.String()
		if r.Mode == "local" || r.Mode == "owner" {
			flush = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			r.Scenario, r.Mode, flush, f2(all.AdmittedPct), f2(all.OverPct), f2(all.FalseRejectPct),
			f2(all.WorstWindowOverPct), during, r.convergence(), f2(all.MessagesPerDecision),
			f2(all.BytesPerDecision), f2(pct(all.Degraded, all.Requests)), all.Lost)
	}
	return tw.Flush()
}

// csvHeader names the columns of WriteCSV.
func csvHeader() []string {
	return []string{"scenario", "mode", "flush", "seed", "nodes", "phase", "start", "end",
		"requests", "hits", "admitted", "ideal", "admitted_pct", "over", "under", "over_pct",
		"false_reject_pct", "worst_window_over_pct", "worst_window_at", "errors", "lost", "unserved",
		"degraded", "late", "messages", "bytes", "messages_per_decision", "bytes_per_decision", "convergence"}
}

// WriteCSV writes one row per run and phase, with every PhaseStats field.
func WriteCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	i64 := func(x int64) string { return strconv.FormatInt(x, 10) }
	for _, r := range results {
		for _, p := range r.Phases {
			row := []string{r.Scenario, r.Mode, r.Flush.String(), strconv.FormatUint(r.Seed, 10),
				strconv.Itoa(r.Nodes), p.Name, p.Start.String(), p.End.String(),
				i64(p.Requests), i64(p.Hits), i64(p.Admitted), i64(p.Ideal), f2(p.AdmittedPct),
				i64(p.Over), i64(p.Under), f2(p.OverPct), f2(p.FalseRejectPct),
				f2(p.WorstWindowOverPct), p.WorstWindowAt.String(), i64(p.Errors), i64(p.Lost),
				i64(p.Unserved), i64(p.Degraded), i64(p.Late), i64(p.Messages), i64(p.Bytes),
				f2(p.MessagesPerDecision), f2(p.BytesPerDecision), r.convergence()}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
