package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// runRecord is one run of one workload on one system.
type runRecord struct {
	Round              int         `json:"round"`
	Workload           string      `json:"workload"`
	System             string      `json:"system"`
	Nodes              int         `json:"nodes"`
	LoadAvg            float64     `json:"loadavg_1m_start"`
	LoadAvgAfter       float64     `json:"loadavg_1m_end"`
	ServerCPUPerCallUs float64     `json:"server_cpu_us_per_call,omitempty"`
	Load               *loadResult `json:"load,omitempty"`
	Kill               *killResult `json:"kill,omitempty"`
}

// median is the median over rounds of one workload on one system.
type median struct {
	Workload        string    `json:"workload"`
	System          string    `json:"system"`
	Runs            int       `json:"runs"`
	CallsPerSec     float64   `json:"calls_per_s"`
	DecisionsPerSec float64   `json:"decisions_per_s"`
	P50ms           float64   `json:"p50_ms"`
	P99ms           float64   `json:"p99_ms"`
	CPUPerCallUs    float64   `json:"server_cpu_us_per_call"`
	Admitted        float64   `json:"admitted"`
	Errors          int64     `json:"errors"` // failed calls, item errors and degraded items, over all runs
	LoadAvgs        []float64 `json:"loadavgs"`
}

// target is one ratio that issue #19 asks for, as measured.
type target struct {
	What     string  `json:"what"`
	Want     string  `json:"want"`
	Measured float64 `json:"measured"`
	Met      bool    `json:"met"`
	// NeedsBaseline is, for a ratio to another system, the calls/s the
	// target asks for as a fraction of the no-limiter baseline's in the
	// same workload and run; Baseline is what ringlimit reached as that
	// fraction. A need of 1 or more asks a limiter to outrun a server that
	// decides nothing, with gRPC's generated codec; ringlimit's own codec
	// can (docs/comparison.md). Zero when not measured.
	NeedsBaseline float64 `json:"needs_x_baseline,omitempty"`
	Baseline      float64 `json:"ringlimit_x_baseline,omitempty"`
}

// verdict returns "met", missed, or none when the issue sets no target.
func (t target) verdict(missed, none string) string {
	switch {
	case t.Want == "-":
		return none
	case t.Met:
		return "met"
	}
	return missed
}

// report is everything one comparison measured and how.
type report struct {
	Date     string            `json:"date"`
	Command  string            `json:"command"`
	Machine  string            `json:"machine"`
	Versions map[string]string `json:"versions"`
	Settings map[string]string `json:"settings"`
	Rounds   int               `json:"rounds"`
	Duration string            `json:"duration"`
	Runs     []runRecord       `json:"runs"`
	Medians  []median          `json:"medians"`
	Targets  []target          `json:"targets"`
}

func newReport(cfg *config) (*report, error) {
	r := &report{
		Date:     time.Now().UTC().Format(time.RFC3339),
		Command:  strings.Join(os.Args, " "),
		Machine:  fmt.Sprintf("%d cores (%s/%s), load average %.2f at the start", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadAvg()),
		Rounds:   cfg.rounds,
		Duration: cfg.duration.String(),
		Versions: map[string]string{},
	}
	for _, b := range []struct{ name, path, dep string }{
		{"ringlimit", cfg.nodeBin, ""},
		{"gubernator", cfg.self, "github.com/gubernator-io/gubernator/v2"},
		{"lyft ratelimit", cfg.lyftBin, "github.com/envoyproxy/ratelimit"},
	} {
		v, err := binVersion(b.path, b.dep)
		if err != nil {
			return nil, err
		}
		if b.dep == "" && cfg.rlVersion != "" {
			v = cfg.rlVersion + ", " + v
		}
		r.Versions[b.name] = v
	}
	out, err := exec.Command(cfg.redisBin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("compare: %s --version: %w (make compare installs redis-server)", cfg.redisBin, err)
	}
	r.Versions["redis"] = strings.TrimSpace(string(out))
	rl, err := ringlimitSettings(cfg.nodeBin)
	if err != nil {
		return nil, err
	}
	r.Settings = map[string]string{
		"every server process": fmt.Sprintf("GOMAXPROCS=%d, OTEL_TRACES_EXPORTER=none; on 127.0.0.1 (Gubernator: 127.0.0.2 to .4, one daemon each), ports chosen free", cfg.gomaxprocs),
		"ringlimit":            "3 nodes (1 for the 1-node RLS run), --gossip-profile local, defaults otherwise: " + rl,
		"gubernator":           "3 daemons (this tool's -serve-gubernator: gubernator.SpawnDaemon configured from GUBER_* as cmd/gubernator does, memberlist node name = GUBER_INSTANCE_ID), member-list discovery, defaults otherwise (v2.13.0 config.go): GUBER_BATCH_WAIT 500µs, GUBER_BATCH_LIMIT 1000, GUBER_BATCH_TIMEOUT 500ms, GUBER_GLOBAL_SYNC_WAIT 100ms, GUBER_GLOBAL_BATCH_LIMIT 1000, GUBER_WORKER_COUNT = NumCPU, cache 50000; tracing off (OTEL_TRACES_EXPORTER=none)",
		"lyft ratelimit":       fmt.Sprintf("go install at its version (the dependencies of its own go.mod); 1 or 3 instances before one redis-server (--save \"\" --appendonly no), REDIS_SOCKET_TYPE=tcp, REDIS_POOL_SIZE=%d, REDIS_PIPELINE_WINDOW 0 (default: no pipelining), LOCAL_CACHE_SIZE_IN_BYTES 0, USE_STATSD=false, TRACING_ENABLED unset (false)", cfg.redisPool),
		"baseline":             "3 processes of this tool (-serve-baseline) answering RateLimiter/Check and RLS ShouldRateLimit with no decision",
		"load":                 fmt.Sprintf("one process, Go's default GOMAXPROCS; calls round robin over the nodes; %d keys uniform; single checks c=%d and c=1, %d checks per call c=%d, RLS c=%d; token bucket limit %d/s per key (never reached)", cfg.keys, cfg.conc, cfg.batchItems, cfg.batchConc, cfg.conc, throughputLim),
		"accuracy":             fmt.Sprintf("one key, limit %d per hour, %d calls of 1 hit, c=%d, round robin over 3 nodes", hotLimit, cfg.hotCalls, cfg.conc),
		"owner kill":           fmt.Sprintf("one key, limit %d per hour, 200 calls/s round robin over the live nodes (at most 32 in flight), SIGKILL of the key's owner at %d admitted; ends %s after the last failed or degraded answer, or %v after the kill; admissions counted before the kill, by the partition policy (degraded) and after it; one bucket = limit + refill over the run", hotLimit, hotLimit/2, "7.5s", cfg.killWait),
	}
	return r, nil
}

// binVersion returns the Go and module versions a binary was built with.
func binVersion(path, dep string) (string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("compare: %s: %w", path, err)
	}
	v := bi.Main.Path + " " + bi.Main.Version
	grpc := ""
	for _, d := range bi.Deps {
		if d.Path == dep {
			v = d.Path + " " + d.Version
		}
		if d.Path == "google.golang.org/grpc" {
			grpc = d.Version
		}
	}
	return fmt.Sprintf("%s (built with %s, grpc %s)", v, bi.GoVersion, grpc), nil
}

// ringlimitSettings returns the node's defaults that shape the figures, as
// its --help states them.
func ringlimitSettings(bin string) (string, error) {
	out, _ := exec.Command(bin, "--help").CombinedOutput() // --help exits 0; the text is what matters
	var parts []string
	for _, f := range []string{"mode", "flush-interval", "forward-window", "max-batch", "tick-interval", "request-timeout"} {
		m := regexp.MustCompile(`--` + f + `\s+\[\w+\]\s+\(default "([^"]*)"\)`).FindSubmatch(out)
		if m == nil {
			return "", fmt.Errorf("compare: %s --help does not show the default of --%s", bin, f)
		}
		parts = append(parts, "--"+f+" "+string(m[1]))
	}
	return strings.Join(parts, ", "), nil
}

func (r *report) add(rec runRecord) { r.Runs = append(r.Runs, rec) }

// find returns the median of workload on system, or nil.
func (r *report) find(workload, system string) *median {
	for i := range r.Medians {
		if r.Medians[i].Workload == workload && r.Medians[i].System == system {
			return &r.Medians[i]
		}
	}
	return nil
}

// summarise computes the medians over rounds and the targets.
func (r *report) summarise() {
	r.Medians = nil
	for _, rec := range r.Runs {
		if rec.Load == nil {
			continue
		}
		m := r.find(rec.Workload, rec.System)
		if m == nil {
			r.Medians = append(r.Medians, median{Workload: rec.Workload, System: rec.System})
			m = &r.Medians[len(r.Medians)-1]
		}
		m.Runs++
		m.Errors += rec.Load.RPCErrors + rec.Load.ItemErrors + rec.Load.Degraded
		m.LoadAvgs = append(m.LoadAvgs, rec.LoadAvg)
	}
	slices.SortStableFunc(r.Medians, func(a, b median) int {
		if c := slices.Index(workloadOrder, a.Workload) - slices.Index(workloadOrder, b.Workload); c != 0 {
			return c
		}
		return slices.Index(systemOrder, a.System) - slices.Index(systemOrder, b.System)
	})
	for i := range r.Medians {
		m := &r.Medians[i]
		var calls, dec, p50, p99, cpu, adm []float64
		for _, rec := range r.Runs {
			if rec.Load == nil || rec.Workload != m.Workload || rec.System != m.System {
				continue
			}
			calls, dec = append(calls, rec.Load.CallsPerSec), append(dec, rec.Load.DecisionsPerSec)
			p50, p99 = append(p50, rec.Load.P50ms), append(p99, rec.Load.P99ms)
			cpu, adm = append(cpu, rec.ServerCPUPerCallUs), append(adm, float64(rec.Load.Admitted))
		}
		m.CallsPerSec, m.DecisionsPerSec = medianOf(calls), medianOf(dec)
		m.P50ms, m.P99ms, m.CPUPerCallUs, m.Admitted = medianOf(p50), medianOf(p99), medianOf(cpu), medianOf(adm)
	}
	r.Targets = r.targets()
}

// workloadOrder and systemOrder are the order of the tables' rows.
var (
	workloadOrder = []string{wlSingle32, wlSingle1, wlBatch, wlRLS3, wlRLS1, wlHot}
	systemOrder   = []string{sysBaseline, sysRLOwner, sysRLCached, sysRLLeased, sysGubBatch, sysGubGlobal, sysLyft}
)

// medianOf returns the median of v (the mean of the middle two when even).
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratio returns the ratio of the median calls per second of (wa, a) to
// (wb, b), or 0 when either is missing.
func (r *report) ratio(wa, a, wb, b string) float64 {
	x, y := r.find(wa, a), r.find(wb, b)
	if x == nil || y == nil || y.CallsPerSec == 0 {
		return 0
	}
	return x.CallsPerSec / y.CallsPerSec
}

// targets are the performance targets of issue #19, item 3, as measured.
func (r *report) targets() []target {
	var t []target
	// atLeast adds the target when it was measured (got > 0) and returns
	// it, nil otherwise.
	atLeast := func(what string, want, got float64) *target {
		if got <= 0 {
			return nil
		}
		t = append(t, target{What: what, Want: fmt.Sprintf(">= %.2gx", want), Measured: got, Met: got >= want})
		return &t[len(t)-1]
	}
	// against is atLeast for a ratio of ringlimit's system rl to another
	// system's in workload wl, with what it asks of a limiter as a
	// fraction of the no-limiter baseline.
	against := func(what string, want float64, wl, rl, other string) {
		tg := atLeast(what, want, r.ratio(wl, rl, wl, other))
		if o := r.ratio(wl, other, wl, sysBaseline); tg != nil && o > 0 {
			tg.NeedsBaseline, tg.Baseline = want*o, r.ratio(wl, rl, wl, sysBaseline)
		}
	}
	atLeast("c=32 cached / baseline", 0.8, r.ratio(wlSingle32, sysRLCached, wlSingle32, sysBaseline))
	atLeast("c=32 owner / baseline", 0.5, r.ratio(wlSingle32, sysRLOwner, wlSingle32, sysBaseline))
	against("c=32 owner / Gubernator BATCHING", 3, wlSingle32, sysRLOwner, sysGubBatch)
	info := func(what string, got float64) { // a ratio the issue sets no target for
		if got > 0 {
			t = append(t, target{What: what, Want: "-", Measured: got, Met: true})
		}
	}
	info("c=32 cached / Gubernator GLOBAL", r.ratio(wlSingle32, sysRLCached, wlSingle32, sysGubGlobal))
	info("c=1 owner / Gubernator BATCHING", r.ratio(wlSingle1, sysRLOwner, wlSingle1, sysGubBatch))
	info("c=1 cached / Gubernator GLOBAL", r.ratio(wlSingle1, sysRLCached, wlSingle1, sysGubGlobal))
	against("100 checks: owner / Gubernator BATCHING", 10, wlBatch, sysRLOwner, sysGubBatch)
	against("100 checks: cached / Gubernator GLOBAL", 10, wlBatch, sysRLCached, sysGubGlobal)
	against("RLS, 1 node: ringlimit / Lyft", 3, wlRLS1, sysRLCached, sysLyft)
	against("RLS, 3 nodes: ringlimit cached / Lyft", 3, wlRLS3, sysRLCached, sysLyft)
	info("RLS, 3 nodes: ringlimit owner / Lyft", r.ratio(wlRLS3, sysRLOwner, wlRLS3, sysLyft))
	for _, sys := range []string{sysRLOwner, sysRLCached, sysRLLeased} {
		if x := r.find(wlSingle1, sys); x != nil {
			t = append(t, target{What: "c=1 p50 ms, " + sys, Want: "<= 0.25", Measured: x.P50ms, Met: x.P50ms <= 0.25})
		}
	}
	return t
}

// print writes the tables.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n== make compare, %s\n", r.Date)
	fmt.Fprintf(w, "machine: %s; %d round(s) of %s per throughput run\n", r.Machine, r.Rounds, r.Duration)
	for _, k := range sortedKeys(r.Versions) {
		fmt.Fprintf(w, "version  %-15s %s\n", k, r.Versions[k])
	}
	for _, k := range sortedKeys(r.Settings) {
		fmt.Fprintf(w, "setting  %-20s %s\n", k, r.Settings[k])
	}
	fmt.Fprintf(w, "\n== Throughput and latency: medians over rounds; x base = calls/s over the baseline's; load = 1-min load average at each run's start\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tsystem\tcalls/s\tchecks/s\tp50 ms\tp99 ms\tCPU us/call\tx base\terrors\tload\t")
	for _, m := range r.Medians {
		if m.Workload == wlHot {
			continue
		}
		base := r.find(m.Workload, sysBaseline)
		xb := "-"
		if base != nil && base.CallsPerSec > 0 {
			xb = fmt.Sprintf("%.2f", m.CallsPerSec/base.CallsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.3f\t%.2f\t%.0f\t%s\t%d\t%s\t\n", m.Workload, m.System, m.CallsPerSec, m.DecisionsPerSec,
			m.P50ms, m.P99ms, m.CPUPerCallUs, xb, m.Errors, loads(m.LoadAvgs))
	}
	tw.Flush()

	fmt.Fprintf(w, "\n== Targets of issue #19 (ratios of median calls/s)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		need := ""
		if t.NeedsBaseline > 0 {
			need = fmt.Sprintf("needs %.2fx baseline, ringlimit %.2fx", t.NeedsBaseline, t.Baseline)
			if t.NeedsBaseline >= 1 {
				need += " (beyond a server that decides nothing)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\n", t.What, t.Want, t.Measured, t.verdict("MISSED", ""), need)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n== Accuracy: %s (one bucket admits %d)\n", wlHot, hotLimit)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, h := range r.hotRows() {
		fmt.Fprintf(tw, "%s\tadmitted %s\terrors %d\tload %s\n", h.system, strings.Join(h.admitted, ", "), h.errors, strings.Join(h.loads, " "))
	}
	tw.Flush()

	fmt.Fprintf(w, "\n== %s\n", wlKill)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "system\tround\towner\tanswered again after\tbad answers (failed)\tdegraded allowed / denied\tadmitted before + degraded + after = total\tone bucket\texcess\tstate\tremaining / expected\tload\tnote")
	for _, rec := range r.Runs {
		k := rec.Kill
		if k == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d (%d)\t%d / %d\t%s\t%d\t+%d\t%s\t%d / %d\t%.1f\t%s\n", rec.System, rec.Round, k.Owner, k.again(),
			k.BadAnswers, k.Failed, k.AdmittedDegraded, k.DeniedDegraded, k.admittedSum(), k.Bucket, k.Excess,
			k.State, k.RemainingAt, k.ExpectedAt, rec.LoadAvg, k.Note)
	}
	tw.Flush()
}

// again returns the time until the system answered again after the kill.
func (k *killResult) again() string {
	if !k.Recovered {
		return fmt.Sprintf("not within %.0f s", k.AfterKillSec)
	}
	return fmt.Sprintf("%.2f s", k.OutageSec)
}

// admittedSum returns the admissions by phase and their total: before the
// kill + by the partition policy + after the kill = total.
func (k *killResult) admittedSum() string {
	return fmt.Sprintf("%d + %d + %d = %d", k.AdmittedBefore, k.AdmittedDegraded, k.AdmittedAfter, k.Admitted)
}

// hotRow is one system's hot-key runs, round by round.
type hotRow struct {
	system          string
	admitted, loads []string
	errors          int64
}

// hotRows returns the hot-key runs of every system that ran them.
func (r *report) hotRows() []hotRow {
	var rows []hotRow
	for _, sys := range systemsOf(r.Runs, wlHot) {
		h := hotRow{system: sys}
		for _, rec := range r.Runs {
			if rec.Workload == wlHot && rec.System == sys && rec.Load != nil {
				h.admitted = append(h.admitted, fmt.Sprint(rec.Load.Admitted))
				h.loads = append(h.loads, fmt.Sprintf("%.1f", rec.LoadAvg))
				h.errors += rec.Load.RPCErrors + rec.Load.ItemErrors + rec.Load.Degraded
			}
		}
		rows = append(rows, h)
	}
	return rows
}

// systemsOf returns the systems that ran workload, in order of first run.
func systemsOf(runs []runRecord, workload string) []string {
	var out []string
	for _, rec := range runs {
		if rec.Workload == workload && !slices.Contains(out, rec.System) {
			out = append(out, rec.System)
		}
	}
	return out
}

func loads(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, " ")
}

func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return k
}

// write writes the report as JSON to path.
func (r *report) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
