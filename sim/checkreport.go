package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// CheckSummary sums up the fault checker's results of one mode.
type CheckSummary struct {
	// Mode is the CheckMode's String; Strict whether it is held to the
	// envelope alone.
	Mode   string `json:"mode"`
	Strict bool   `json:"strict"`
	// Schedules counts the schedules run, Failed those that broke the
	// promise, FailedSeeds their seeds in order.
	Schedules   int      `json:"schedules"`
	Failed      int      `json:"failed"`
	FailedSeeds []uint64 `json:"failed_seeds,omitempty"`
	// Worst is the largest excess of any schedule over its bound (negative:
	// the closest any came), WorstSeed its seed.
	Worst     Excess `json:"worst"`
	WorstSeed uint64 `json:"worst_seed"`
	// OverEnvelope sums, over the failed schedules, the worst key's hits
	// beyond its bound.
	OverEnvelope float64 `json:"over_envelope"`
	// PerFault is the largest excess over the envelope alone of any
	// schedule, divided by the fault windows overlapping its span (at
	// least one), PerFaultSeed its seed.
	PerFault     float64 `json:"per_fault"`
	PerFaultSeed uint64  `json:"per_fault_seed"`
}

// Summarize sums up results (of one mode each or several) by mode, in the
// order the modes first appear.
func Summarize(modes []CheckMode, results []*CheckResult) []CheckSummary {
	var out []CheckSummary
	for _, m := range modes {
		s := CheckSummary{Mode: m.String(), Strict: m.Strict}
		for _, r := range results {
			if r.Mode != s.Mode {
				continue
			}
			if s.Schedules == 0 || r.Worst.Over > s.Worst.Over {
				s.Worst, s.WorstSeed = r.Worst, r.Schedule.Seed
			}
			if pf := r.Envelope.Over / float64(max(1, r.Faults)); s.Schedules == 0 || pf > s.PerFault {
				s.PerFault, s.PerFaultSeed = pf, r.Schedule.Seed
			}
			s.Schedules++
			if r.Failed() {
				s.Failed++
				s.FailedSeeds = append(s.FailedSeeds, r.Schedule.Seed)
				s.OverEnvelope += max(0, r.Worst.Over)
			}
		}
		out = append(out, s)
	}
	return out
}

// WriteCheckSummary writes one line per mode: schedules run and failed,
// the worst excess and its seed, and the failed seeds.
func WriteCheckSummary(w io.Writer, sums []CheckSummary) error {
	for _, s := range sums {
		promise := "envelope + one allowance per fault"
		if s.Strict {
			promise = "envelope"
		}
		if _, err := fmt.Fprintf(w, "%-20s %5d schedules, %4d over the %s; worst %+.2f hits (key k%d, %v..%v, %d admitted for %.2f, seed %d); over the envelope alone, per fault: at most %+.2f hits (seed %d)\n",
			s.Mode, s.Schedules, s.Failed, promise, s.Worst.Over, s.Worst.Key, s.Worst.From, s.Worst.To,
			s.Worst.Admitted, s.Worst.Bound, s.WorstSeed, s.PerFault, s.PerFaultSeed); err != nil {
			return err
		}
		if len(s.FailedSeeds) > 0 {
			seeds := make([]string, len(s.FailedSeeds))
			for i, x := range s.FailedSeeds {
				seeds[i] = fmt.Sprint(x)
			}
			if _, err := fmt.Fprintf(w, "%-20s failed seeds: %s\n", "", strings.Join(seeds, " ")); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteFailure writes a failed schedule: its seed and its minimal schedule
// (shrunk from orig), the violations of the minimal one, and the schedule
// as JSON for cmd/simcheck -schedule.
func WriteFailure(w io.Writer, orig Schedule, r *CheckResult) error {
	s := r.Schedule
	fmt.Fprintf(w, "FAIL %s seed %d (%d faults, shrunk to %d)\n", r.Mode, s.Seed, len(orig.Faults), len(s.Faults))
	fmt.Fprintf(w, "  minimal schedule: %v\n", s)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  key k%d: %d admitted in %v..%v, bound %.2f (%+.2f)\n", v.Key, v.Admitted, v.From, v.To, v.Bound, v.Over)
	}
	if r.Anomalies > 0 {
		fmt.Fprintf(w, "  %d answers given twice (a bug of the Node)\n", r.Anomalies)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "  schedule: %s\n", b)
	return err
}
