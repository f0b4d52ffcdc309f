package main

import (
	"context"
	"net"
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
// owner is killed, the first bad calls fail; then the survivors answer from
// a bucket that kept its state, or from a fresh one.
type fakeNodes struct {
	mu       sync.Mutex // guards the fields below
	c        *cluster
	ownerIdx int
	limit    int64
	used     int64
	bad      int  // calls after the kill still to fail
	reset    bool // the survivors start a fresh bucket
	failing  bool
	answered int
	badGiven int // bad answers returned after the kill
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
			return answer{bad: true}
		}
	}
	if f.used+hits > f.limit {
		return answer{remaining: f.limit - f.used}
	}
	f.used += hits
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

func TestRunKill(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reset     bool
		wantState string
		minExcess int64
	}{
		{"state kept", false, "kept", 0},
		{"fresh bucket", true, "reset", 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sleepers(t, 3)
			f := &fakeNodes{c: c, ownerIdx: 1, limit: 1000, bad: 20, reset: tc.reset}
			spec := killSpec{limit: 1000, period: time.Hour, killAt: 500, rate: 2000, settle: 1500 * time.Millisecond,
				wait: 20 * time.Second, maxCalls: 20000, timeout: time.Second}
			res, err := runKill(context.Background(), c, f, spec)
			if err != nil {
				t.Fatal(err)
			}
			if !c.nodes[1].exited() || c.nodes[0].exited() || c.nodes[2].exited() {
				t.Fatalf("want only the owner (node 1) killed")
			}
			if res.Owner != "b" || !res.Recovered || res.State != tc.wantState || res.BadAnswers != f.badGiven || f.badGiven < 20 {
				t.Errorf("owner %q, recovered %v, state %q, %d bad answers; want b, true, %q, %d (at least 20) (%+v)",
					res.Owner, res.Recovered, res.State, res.BadAnswers, tc.wantState, f.badGiven, res)
			}
			if res.Excess < tc.minExcess || (!tc.reset && res.Excess != 0) {
				t.Errorf("excess %d over one bucket (admitted %d), want at least %d, and 0 when the state is kept", res.Excess, res.Admitted, tc.minExcess)
			}
			if res.Calls != f.answered || res.Calls > spec.maxCalls {
				t.Errorf("%d calls recorded, %d answered, bound %d", res.Calls, f.answered, spec.maxCalls)
			}
		})
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
	}
}

func TestMarkdownRoundTrip(t *testing.T) {
	rep := &report{Rounds: 1, Versions: map[string]string{"ringlimit": "v"}, Settings: map[string]string{"load": "a | b"}}
	rep.add(runRecord{Round: 1, Workload: wlSingle32, System: sysBaseline, Load: &loadResult{CallsPerSec: 20000, DecisionsPerSec: 20000}})
	rep.add(runRecord{Round: 1, Workload: wlSingle32, System: sysRLCached, Load: &loadResult{CallsPerSec: 15000, DecisionsPerSec: 15000}})
	rep.add(runRecord{Round: 1, Workload: wlKill, System: sysRLOwner, Kill: &killResult{Recovered: true, OutageSec: 0.9, State: "kept", Admitted: 1010, Excess: 10}})
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
		"| c=32 cached / baseline | >= 0.8x | 0.75 | **missed** |",
		"| ringlimit owner | 0.90 s | 0 | kept |",
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
