package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// report is the outcome of a run.
type report struct {
	Targets      int     `json:"targets"`
	Concurrency  int     `json:"concurrency"`
	ItemsPerCall int     `json:"items_per_call"`
	Keys         int     `json:"keys"`
	Dist         string  `json:"dist"`
	Mode         string  `json:"mode"`
	Route        string  `json:"route"`
	Seconds      float64 `json:"seconds"`
	Calls        int64   `json:"calls"`
	CallsPerSec  float64 `json:"calls_per_sec"`
	// Decisions counts items answered (any status) in successful calls.
	Decisions    int64            `json:"decisions"`
	DecisionsSec float64          `json:"decisions_per_sec"`
	RPCErrors    int64            `json:"rpc_errors"`
	ErrorCodes   map[string]int64 `json:"rpc_error_codes,omitempty"`
	UnderLimit   int64            `json:"under_limit"`
	OverLimit    int64            `json:"over_limit"`
	ItemErrors   int64            `json:"item_errors"`
	// Latency rows: every call; calls that carried an item answered by the
	// owner; calls that carried an item whose owner is another node.
	Latency []latencyRow `json:"latency"`
}

type latencyRow struct {
	Class string  `json:"class"`
	Items int64   `json:"items"`
	Calls uint64  `json:"calls"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"p100_ms"`
}

func newReport(cfg *config, st *stats, elapsed time.Duration) *report {
	secs := elapsed.Seconds()
	dec := st.items[classOwner] + st.items[classForwarded]
	mode := "node default"
	if cfg.mode != ringlimitv1.Mode_MODE_DEFAULT {
		mode = modeName(cfg.mode)
	}
	r := &report{
		Targets: len(cfg.targets), Concurrency: cfg.concurrency, ItemsPerCall: cfg.items, Keys: cfg.keys,
		Dist: cfg.dist, Mode: mode, Route: cfg.route, Seconds: secs, Calls: st.calls, CallsPerSec: float64(st.calls) / secs,
		Decisions: dec, DecisionsSec: float64(dec) / secs, RPCErrors: st.rpcErrors, ErrorCodes: st.errCodes,
		UnderLimit: st.status[ringlimitv1.Status_STATUS_UNDER_LIMIT],
		OverLimit:  st.status[ringlimitv1.Status_STATUS_OVER_LIMIT],
		ItemErrors: st.status[ringlimitv1.Status_STATUS_ERROR] + st.status[ringlimitv1.Status_STATUS_UNSPECIFIED],
	}
	if cfg.dist == "zipf" {
		r.Dist = fmt.Sprintf("zipf s=%g", cfg.zipfS)
	}
	row := func(class string, items int64, h *hist) latencyRow {
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		return latencyRow{Class: class, Items: items, Calls: h.n, P50ms: ms(h.quantile(0.5)),
			P99ms: ms(h.quantile(0.99)), Maxms: ms(h.quantile(1))}
	}
	r.Latency = []latencyRow{
		row("all calls", dec, &st.callLat),
		row("owner-answered", st.items[classOwner], &st.classLat[classOwner]),
		row("forwarded", st.items[classForwarded], &st.classLat[classForwarded]),
	}
	return r
}

func modeName(m ringlimitv1.Mode) string {
	switch m {
	case ringlimitv1.Mode_MODE_LOCAL:
		return "local"
	case ringlimitv1.Mode_MODE_OWNER:
		return "owner"
	case ringlimitv1.Mode_MODE_CACHED:
		return "cached"
	case ringlimitv1.Mode_MODE_LEASED:
		return "leased"
	}
	return m.String()
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "targets %d (route %s)  concurrency %d  items/call %d  keys %d (%s)  mode %s\n",
		r.Targets, r.Route, r.Concurrency, r.ItemsPerCall, r.Keys, r.Dist, r.Mode)
	fmt.Fprintf(w, "%.2fs  calls %d (%.0f/s)  decisions %d (%.0f/s)\n", r.Seconds, r.Calls, r.CallsPerSec, r.Decisions, r.DecisionsSec)
	fmt.Fprintf(w, "under limit %d  over limit %d  item errors %d  failed calls %d", r.UnderLimit, r.OverLimit, r.ItemErrors, r.RPCErrors)
	if len(r.ErrorCodes) > 0 {
		codes := make([]string, 0, len(r.ErrorCodes))
		for c := range r.ErrorCodes {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			fmt.Fprintf(w, " %s:%d", c, r.ErrorCodes[c])
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-16s %10s %10s %9s %9s %9s   (call latency, ms)\n", "", "items", "calls", "p50", "p99", "max")
	for _, l := range r.Latency {
		fmt.Fprintf(w, "%-16s %10d %10d %9.3f %9.3f %9.3f\n", l.Class, l.Items, l.Calls, l.P50ms, l.P99ms, l.Maxms)
	}
}
