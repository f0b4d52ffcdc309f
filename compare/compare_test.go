package main

import (
	"context"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestQuantileAndMedian(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0.01, 1}, {1, 10}} {
		if got := quantile(ds, tc.q); got != tc.want {
			t.Errorf("quantile(1..10, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile(empty) = %v, want 0", got)
	}
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := medianOf(tc.v); got != tc.want {
			t.Errorf("medianOf(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// serveTestBaseline serves the baseline on a loopback port chosen by the
// OS until the test ends.
func serveTestBaseline(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newBaselineGRPC()
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(ln) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return ln.Addr().String()
}

func TestRunLoadStopsAtTheCallBudget(t *testing.T) {
	a := serveTestBaseline(t)
	cs, err := dial([]string{a, a})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.close()
	wl := workload{name: "t", items: 3, keys: 10, limit: 5, period: time.Second}
	spec := loadSpec{concurrency: 4, maxCalls: 101, duration: time.Minute, callTimeout: 5 * time.Second}
	res := runLoad(context.Background(), spec, func(w int) caller {
		return ringlimitCaller(cs, wl, ringlimitv1.Mode_MODE_OWNER, uint64(w))
	})
	if res.Calls != 101 || res.RPCErrors != 0 || res.Admitted != 303 || res.Rejected != 0 || res.ItemErrors != 0 {
		t.Fatalf("got %d calls, %d failed, %d admitted, %d rejected, %d item errors; want 101, 0, 303, 0, 0",
			res.Calls, res.RPCErrors, res.Admitted, res.Rejected, res.ItemErrors)
	}
	if res.P50ms <= 0 || res.P50ms > res.P99ms || res.CallsPerSec <= 0 {
		t.Errorf("p50 %v ms, p99 %v ms, %v calls/s: want 0 < p50 <= p99 and a positive rate", res.P50ms, res.P99ms, res.CallsPerSec)
	}
}

func TestRunLoadStopsAtItsDuration(t *testing.T) {
	a := serveTestBaseline(t)
	cs, err := dial([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.close()
	spec := loadSpec{concurrency: 2, maxCalls: 1 << 40, duration: 200 * time.Millisecond, callTimeout: 5 * time.Second}
	res := runLoad(context.Background(), spec, func(w int) caller { return rlsCaller(cs, rlsDomain, 10, uint64(w)) })
	if res.ElapsedSec > 5 {
		t.Errorf("a run of 200ms lasted %.1fs", res.ElapsedSec)
	}
	if res.Calls == 0 || res.RPCErrors != 0 || res.Admitted != res.Calls {
		t.Errorf("got %d calls, %d failed, %d admitted: want every call admitted (RLS OK), none failed", res.Calls, res.RPCErrors, res.Admitted)
	}
}

// fakeNodes is a one-bucket limiter behind three fake nodes. After the
// owner is killed, the first bad calls fail, or are answered by a partition
// policy that allows share of them and denies the rest; then the survivors
// answer from a bucket that kept its state (charged with the policy's
// admissions, or not), or from a fresh one.
type fakeNodes struct {
	mu       sync.Mutex // guards the fields below
	c        *cluster
	ownerIdx int
	limit    int64
	used     int64
	bad      int   // calls after the kill still to answer badly
	degrade  bool  // a bad answer on a survivor is degraded, not failed
	share    int64 // degraded answers still to allow
	charge   bool  // the policy's admissions are charged to the bucket
	reset    bool  // the survivors start a fresh bucket
	failing  bool
	answered int
	// What was answered after the kill, bad or degraded, and how.
	badGiven, failedGiven          int
	degAllowed, degDenied, limiter int64 // limiter: admitted, not degraded, over the whole run
}

func (f *fakeNodes) owner(context.Context) (int, error) { return f.ownerIdx, nil }

func (f *fakeNodes) call(_ context.Context, node int, hits int64) answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answered++
	if f.c.nodes[f.ownerIdx].exited() {
		if !f.failing && f.bad > 0 {
			f.failing = true
			if f.reset {
				f.used = 0
			}
		}
		if f.bad > 0 || node == f.ownerIdx { // a call bound for the owner when it died fails too
			f.bad = max(f.bad-1, 0)
			f.badGiven++
			switch {
			case !f.degrade || node == f.ownerIdx:
				f.failedGiven++
				return answer{failed: true}
			case f.share > 0:
				f.share--
				f.degAllowed++
				if f.charge {
					f.used += hits
				}
				return answer{degraded: true, admitted: true}
			}
			f.degDenied++
			return answer{degraded: true}
		}
	}
	if f.used+hits > f.limit {
		return answer{remaining: f.limit - f.used}
	}
	f.used += hits
	f.limiter++
	return answer{admitted: true, remaining: f.limit - f.used}
}

// sleepers starts n processes that wait to be stopped, as the fake nodes.
func sleepers(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{procs: &procSet{logDir: t.TempDir()}}
	for i := range n {
		p, err := c.procs.start("sleep", "sleep", []string{"60"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes, c.ids = append(c.nodes, p), append(c.ids, string(rune('a'+i)))
	}
	t.Cleanup(c.stop)
	return c
}

// TestRunKill runs owner kills against fake nodes and checks that every
// answer is counted by phase and outcome: the partition policy's degraded
// answers by whether they allowed the hit, and what they allowed counted
// against the bucket.
func TestRunKill(t *testing.T) {
	for _, tc := range []struct {
		name            string
		f               *fakeNodes
		wantState       string
		minExcess       int64
		maxExcess       int64
		wantDegAllowed  int64
		wantDegDenied   int64
		wantFailedAtMin int
	}{
		{"state kept", &fakeNodes{bad: 20}, "kept", 0, 0, 0, 0, 20},
		{"fresh bucket", &fakeNodes{bad: 20, reset: true}, "reset", 60, 1 << 30, 0, 0, 20},
		{"degraded, charged", &fakeNodes{bad: 40, degrade: true, share: 30, charge: true}, "kept", 0, 0, 30, 10, 0},
		// The policy's 30 admissions are not charged: the bucket admits
		// its 200 after them, 30 over.
		{"degraded, not charged", &fakeNodes{bad: 40, degrade: true, share: 30}, "reset", 30, 30, 30, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sleepers(t, 3)
			f := tc.f
			// A small bucket, so that the run spends it after the kill
			// within settle even on a loaded machine, and a period so
			// long that it refills nothing over the run.
			f.c, f.ownerIdx, f.limit = c, 1, 200
			spec := killSpec{limit: 200, period: 1000 * time.Hour, killAt: 100, rate: 2000, settle: 1500 * time.Millisecond,
				wait: 20 * time.Second, maxCalls: 20000, timeout: time.Second}
			res, err := runKill(context.Background(), c, f, spec)
			if err != nil {
				t.Fatal(err)
			}
			if !c.nodes[1].exited() || c.nodes[0].exited() || c.nodes[2].exited() {
				t.Fatalf("want only the owner (node 1) killed")
			}
			if res.Owner != "b" || !res.Recovered || res.State != tc.wantState || res.BadAnswers != f.badGiven || res.Failed != f.failedGiven ||
				f.failedGiven < tc.wantFailedAtMin || f.badGiven < 20 {
				t.Errorf("owner %q, recovered %v, state %q, %d bad answers (%d failed); want b, true, %q, %d (at least 20) (%d, at least %d) (%+v)",
					res.Owner, res.Recovered, res.State, res.BadAnswers, res.Failed, tc.wantState, f.badGiven, f.failedGiven, tc.wantFailedAtMin, res)
			}
			if res.AdmittedDegraded != tc.wantDegAllowed || res.DeniedDegraded != tc.wantDegDenied ||
				f.degAllowed != tc.wantDegAllowed || f.degDenied != tc.wantDegDenied {
				t.Errorf("degraded: %d allowed, %d denied counted, %d and %d answered; want %d and %d",
					res.AdmittedDegraded, res.DeniedDegraded, f.degAllowed, f.degDenied, tc.wantDegAllowed, tc.wantDegDenied)
			}
			// The kill comes once 100 admissions are in; calls in flight
			// (at most 32) may add to those before it.
			if res.AdmittedBefore < 100 || res.AdmittedBefore > 132 || res.AdmittedBefore+res.AdmittedAfter != f.limiter ||
				res.Admitted != res.AdmittedBefore+res.AdmittedDegraded+res.AdmittedAfter {
				t.Errorf("admitted %d before the kill (want 100 to 132) + %d degraded + %d after = %d; the limiter admitted %d",
					res.AdmittedBefore, res.AdmittedDegraded, res.AdmittedAfter, res.Admitted, f.limiter)
			}
			if res.Bucket != 200 || res.Excess != max(res.Admitted-200, 0) || res.Excess < tc.minExcess || res.Excess > tc.maxExcess {
				t.Errorf("excess %d over one bucket of %d (admitted %d), want 200 and %d to %d", res.Excess, res.Bucket, res.Admitted, tc.minExcess, tc.maxExcess)
			}
			if res.Calls != f.answered || res.Calls > spec.maxCalls {
				t.Errorf("%d calls recorded, %d answered, bound %d", res.Calls, f.answered, spec.maxCalls)
			}
		})
	}
}

// TestTallyKill counts a kill run's calls over fixed instants: each
// admission in one phase (before the kill, degraded, after), the degraded
// answers by outcome wherever they fall, the bad answers after the kill,
// and the total against one bucket with its refill over the run.
func TestTallyKill(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	rec := func(start, end int, a answer) callRecord {
		return callRecord{start: ms(start), end: ms(end), answer: a}
	}
	ok := answer{admitted: true}
	recs := []callRecord{ // out of order, as answers end
		rec(1, 2, answer{admitted: true, remaining: 3}),
		rec(0, 1, answer{admitted: true, remaining: 4}),
		rec(2, 3, answer{remaining: 0}),                   // denied by the limiter
		rec(3, 4, answer{degraded: true, admitted: true}), // degraded before the kill: counted as degraded, not bad
		rec(4, 6, answer{failed: true}),                   // the kill at 5
		rec(6, 7, answer{degraded: true, admitted: true}),
		rec(7, 8, answer{degraded: true}),
		rec(8, 9, answer{degraded: true, admitted: true}),
		rec(10, 11, answer{admitted: true, remaining: 1}), // the first good answer after the last bad one (9)
		rec(11, 12, ok),
		rec(12, 13, ok),
		rec(13, 14, answer{remaining: 0}),
	}
	// limit 5 per 10 s over a run of 2 s: one bucket admits 5 + 1.
	spec := killSpec{limit: 5, period: 10 * time.Second}
	var res killResult
	tallyKill(&res, spec, recs, t0, ms(5), ms(9), t0.Add(2*time.Second))
	got := []int64{res.AdmittedBefore, res.AdmittedDegraded, res.DeniedDegraded, res.AdmittedAfter, res.Admitted, res.Bucket, res.Excess,
		int64(res.BadAnswers), int64(res.Failed), res.RemainingAt, res.ExpectedAt, int64(res.Calls)}
	want := []int64{2, 3, 1, 3, 8, 6, 2, 4, 1, 1, 0, 12}
	if !slices.Equal(got, want) || res.State != "kept" || res.OutageSec != 0.004 || res.RunSec != 2 {
		t.Errorf("before, degraded allowed, denied, after, total, bucket, excess, bad, failed, remaining, expected, calls = %v, want %v; "+
			"state %q, outage %v s, run %v s; want kept, 0.004, 2", got, want, res.State, res.OutageSec, res.RunSec)
	}

	// No kill: every admission is before it, the state unknown.
	res = killResult{}
	tallyKill(&res, spec, recs[:3], t0, time.Time{}, time.Time{}, ms(3))
	if res.AdmittedBefore != 2 || res.Admitted != 2 || res.Bucket != 5 || res.BadAnswers != 0 || res.State != "unknown" {
		t.Errorf("no kill: %+v; want 2 admitted before, 2 in all, bucket 5, no bad answer, state unknown", res)
	}
}

func TestOneBucket(t *testing.T) {
	for _, tc := range []struct {
		limit        int64
		period, span time.Duration
		want         int64
	}{
		{1000, time.Hour, 0, 1000},
		{1000, time.Hour, 36 * time.Second, 1010},
		{1000, time.Hour, 35 * time.Second, 1009}, // 9.7 tokens: rounded down
		{5, 10 * time.Second, 2 * time.Second, 6},
	} {
		if got := oneBucket(tc.limit, tc.period, tc.span); got != tc.want {
			t.Errorf("oneBucket(%d, %v, %v) = %d, want %d", tc.limit, tc.period, tc.span, got, tc.want)
		}
	}
}

func TestStopAllStopsEveryProcessByPID(t *testing.T) {
	s := &procSet{logDir: t.TempDir()}
	var ps []*proc
	for range 3 {
		p, err := s.start("sleep", "sleep", []string{"60"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if s.cpuTicks() < 0 {
		t.Fatal("negative CPU time")
	}
	s.stopAll(5 * time.Second)
	for i, p := range ps {
		if !p.exited() {
			t.Errorf("process %d (PID %d) still running after stopAll", i, p.pid())
		}
	}
}

func TestTargetsAreRatiosOfMedians(t *testing.T) {
	rep := &report{}
	add := func(round int, wl, sys string, calls, p50 float64) {
		rep.add(runRecord{Round: round, Workload: wl, System: sys, Load: &loadResult{CallsPerSec: calls, P50ms: p50}})
	}
	for r, f := range []float64{1, 3, 2} { // medians: the middle round
		add(r, wlSingle32, sysBaseline, 10000*f, 0.5)
		add(r, wlSingle32, sysRLCached, 9000*f, 0.5)
		add(r, wlSingle32, sysRLOwner, 4000*f, 0.5)
		add(r, wlSingle32, sysGubBatch, 2000*f, 0.5)
		add(r, wlSingle32, sysGubGlobal, 2000*f, 0.5)
		add(r, wlSingle1, sysRLOwner, 1000, 0.2+0.1*f)
	}
	rep.summarise()
	want := map[string]struct {
		v   float64
		met bool
	}{
		"c=32 cached / baseline":           {0.9, true},
		"c=32 owner / baseline":            {0.4, false},
		"c=32 owner / Gubernator BATCHING": {2, false},
		"c=32 cached / Gubernator GLOBAL":  {4.5, true},
		"c=1 p50 ms, ringlimit owner":      {0.4, false},
	}
	if len(rep.Targets) != len(want) {
		t.Fatalf("got %d targets (%+v), want %d", len(rep.Targets), rep.Targets, len(want))
	}
	for _, tg := range rep.Targets {
		w, ok := want[tg.What]
		if !ok || tg.Met != w.met || tg.Measured < w.v-1e-9 || tg.Measured > w.v+1e-9 {
			t.Errorf("target %q: measured %v, met %v; want %v, %v", tg.What, tg.Measured, tg.Met, w.v, w.met)
		}
		// Only the ratio to Gubernator has a baseline to weigh it by: 3x
		// BATCHING's 4000 calls/s asks for 0.6 of the baseline's 20000,
		// where owner mode reached 0.4.
		wantNeed, wantGot := 0.0, 0.0
		if tg.What == "c=32 owner / Gubernator BATCHING" {
			wantNeed, wantGot = 0.6, 0.4
		}
		if math.Abs(tg.NeedsBaseline-wantNeed) > 1e-9 || math.Abs(tg.Baseline-wantGot) > 1e-9 {
			t.Errorf("target %q: needs %v x baseline, reached %v; want %v, %v", tg.What, tg.NeedsBaseline, tg.Baseline, wantNeed, wantGot)
		}
	}
}

// TestTargetBeyondBaseline: a target that asks for more than the
// no-limiter baseline reached says so, in the table and in the markdown.
func TestTargetBeyondBaseline(t *testing.T) {
	rep := &report{Rounds: 1}
	rep.add(runRecord{Round: 1, Workload: wlRLS1, System: sysBaseline, Load: &loadResult{CallsPerSec: 30000}})
	rep.add(runRecord{Round: 1, Workload: wlRLS1, System: sysRLCached, Load: &loadResult{CallsPerSec: 27000}})
	rep.add(runRecord{Round: 1, Workload: wlRLS1, System: sysLyft, Load: &loadResult{CallsPerSec: 11000}})
	rep.summarise()
	if len(rep.Targets) != 1 {
		t.Fatalf("targets %+v, want the RLS one only", rep.Targets)
	}
	if tg := rep.Targets[0]; math.Abs(tg.NeedsBaseline-1.1) > 1e-9 || math.Abs(tg.Baseline-0.9) > 1e-9 || tg.Met {
		t.Fatalf("target %+v: want needs 1.1, reached 0.9, missed", tg)
	}
	var text, md strings.Builder
	rep.print(&text)
	if !strings.Contains(text.String(), "needs 1.10x baseline, ringlimit 0.90x (beyond a server that decides nothing)") {
		t.Errorf("table does not weigh the target by the baseline:\n%s", text.String())
	}
	rep.markdown(&md)
	if !strings.Contains(md.String(), "| RLS, 1 node: ringlimit / Lyft | >= 3x | 2.45 | 1.10 | 0.90 | **missed** |") {
		t.Errorf("markdown does not weigh the target by the baseline:\n%s", md.String())
	}
}

func TestMarkdownRoundTrip(t *testing.T) {
	rep := &report{Rounds: 1, Versions: map[string]string{"ringlimit": "v"}, Settings: map[string]string{"load": "a | b"}}
	rep.add(runRecord{Round: 1, Workload: wlSingle32, System: sysBaseline, Load: &loadResult{CallsPerSec: 20000, DecisionsPerSec: 20000}})
	rep.add(runRecord{Round: 1, Workload: wlSingle32, System: sysRLCached, Load: &loadResult{CallsPerSec: 15000, DecisionsPerSec: 15000}})
	rep.add(runRecord{Round: 1, Workload: wlKill, System: sysRLOwner, Kill: &killResult{Recovered: true, OutageSec: 0.9, BadAnswers: 300, Failed: 4,
		AdmittedBefore: 500, AdmittedDegraded: 250, DeniedDegraded: 46, AdmittedAfter: 260, Admitted: 1010, Bucket: 1008, Excess: 2, State: "kept"}})
	rep.summarise()
	path := t.TempDir() + "/r.json"
	if err := rep.write(path); err != nil {
		t.Fatal(err)
	}
	back, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	back.markdown(&b)
	for _, want := range []string{
		"| 1 check per call, c=32 | ringlimit cached | 15,000 | 15,000 |",
		"| 0.75 |", // x baseline
		"| c=32 cached / baseline | >= 0.8x | 0.75 | - | - | **missed** |",
		"| ringlimit owner | 0.90 s | 300 (4) | 250 / 46 | 500 + 250 + 260 = 1010 | 1008 | +2 | kept |",
		"| load | a \\| b |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestSlotsOfKillOnly(t *testing.T) {
	names := func(cfg *config) string {
		var n []string
		for _, s := range slotsOf(cfg) {
			n = append(n, s.name)
		}
		return strings.Join(n, " ")
	}
	for _, tc := range []struct {
		only     string
		killOnly bool
		want     string
	}{
		{"", false, "baseline ringlimit ringlimit-1 gubernator lyft-1 lyft-3"},
		{"", true, "ringlimit gubernator"},
		{"^ringlimit$", true, "ringlimit"},
		{"^ringlimit", false, "ringlimit ringlimit-1"},
		{"lyft", true, ""},
	} {
		cfg := &config{killOnly: tc.killOnly}
		if tc.only != "" {
			cfg.only = regexp.MustCompile(tc.only)
		}
		if got := names(cfg); got != tc.want {
			t.Errorf("-only %q, -kill-only %v: slots %q, want %q", tc.only, tc.killOnly, got, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-no-kill", "-kill-only"}, io.Discard); err == nil {
		t.Error("-no-kill -kill-only: no error, want one")
	}
}
