package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestEnvelopeWorst steps the envelope check over fixed admissions of a
// key of 10 per second, burst 10: the worst span, its hits and its bound.
func TestEnvelopeWorst(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: time.Second}
	env := newEnvelope(l, 0)
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	burst := func(at int64, n int) []admission {
		var out []admission
		for range n {
			out = append(out, admission{at: at, hits: 1})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		adm  []admission
		// admitted and over are the worst span's hits and excess.
		admitted int64
		over     float64
	}{
		{"a full bucket at once", burst(0, 10), 10, 0},
		{"one more than the bucket", burst(0, 11), 11, 1},
		{"bucket, then the refill of 1s", append(burst(0, 10), burst(ms(1000), 10)...), 10, 0},
		{"bucket, then one more than 1s of refill", append(burst(0, 10), burst(ms(1000), 11)...), 21, 1},
		{"bucket, then 1 hit 50ms later", append(burst(0, 10), admission{at: ms(50), hits: 1}), 11, 0.5},
		{"bucket, then 1 hit 100ms later", append(burst(0, 10), admission{at: ms(100), hits: 1}), 10, 0},
		{"a late span", append([]admission{{at: 0, hits: 1}}, burst(ms(5000), 12)...), 12, 2},
	} {
		x := env.worst(0, tc.adm)
		if x.Admitted != tc.admitted || math.Abs(x.Over-tc.over) > 1e-9 {
			t.Errorf("%s: got %d admitted in %v..%v, over %.3f; want %d, over %.3f", tc.name,
				x.Admitted, x.From, x.To, x.Over, tc.admitted, tc.over)
		}
	}
}

// TestEnvelopeWorstMatchesEveryPair: the one-pass envelope check finds the
// same largest excess as trying every pair of admissions.
func TestEnvelopeWorstMatchesEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 7, Period: 3 * time.Second, Burst: 5}
	env := newEnvelope(l, int64(time.Millisecond))
	for trial := range 300 {
		var adm []admission
		at := int64(0)
		for range 1 + rng.IntN(60) {
			at += rng.Int64N(int64(400 * time.Millisecond))
			adm = append(adm, admission{at: at, hits: 1 + rng.Int64N(3)})
		}
		a := env.worst(0, adm)
		b := worstWith(0, adm, func(from, to int64) float64 { return env.bound(to - from) })
		if d := a.Over - b.Over; d > 1e-9 || d < -1e-9 {
			t.Fatalf("trial %d: one pass %+.4f (%v..%v), every pair %+.4f (%v..%v)", trial, a.Over, a.From, a.To, b.Over, b.From, b.To)
		}
	}
}

// checkSpecShort is the make-test fault checker: the default spec with
// 12 s of traffic.
func checkSpecShort() CheckSpec {
	s := DefaultCheckSpec()
	s.Duration = 12 * time.Second
	return s
}

// TestCheckReproducible: a seed gives the same schedule and the same
// result, byte for byte, clock offsets included; two seeds give two schedules.
func TestCheckReproducible(t *testing.T) {
	spec := checkSpecShort()
	m := CheckModes()[2]
	run := func(seed uint64) []byte {
		r, err := Check(spec, m, NewSchedule(spec, seed))
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, seed := range []uint64{3, 4} { // seed 4 steps a clock
		if a, b := run(seed), run(seed); !bytes.Equal(a, b) {
			t.Errorf("seed %d: two runs differ:\n%s\n%s", seed, a, b)
		}
	}
	if a, b := NewSchedule(spec, 3), NewSchedule(spec, 4); a.String() == b.String() {
		t.Errorf("seeds 3 and 4 draw the same schedule: %v", a)
	}
}

// TestSchedulesDrawEveryFault: 200 seeds draw every kind of fault, a
// silent network and a reporting one, and every cluster size.
func TestSchedulesDrawEveryFault(t *testing.T) {
	spec := checkSpecShort()
	seen := map[string]int{}
	sizes := map[int]bool{}
	for seed := range uint64(200) {
		s := NewSchedule(spec, seed)
		sizes[s.Nodes] = true
		seen["silent="+map[bool]string{true: "yes", false: "no"}[s.Silent]]++
		for _, f := range s.Faults {
			seen[f.Kind]++
			if f.At < sec(1) || f.At+f.For > Duration(spec.Duration)-sec(2) {
				t.Errorf("seed %d: %v outside [1s, %v]", seed, f, spec.Duration-2*time.Second)
			}
			if f.Offset > Duration(spec.MaxOffset) || f.Offset < -Duration(spec.MaxOffset) {
				t.Errorf("seed %d: %v beyond ±%v", seed, f, spec.MaxOffset)
			}
		}
		if _, err := s.Scenario(spec, CheckModes()[0]); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
	for _, k := range []string{"partition", "isolate", "cut", "flap", "restart", "kill", "leave", "join", "offset", "silent=yes", "silent=no"} {
		if seen[k] == 0 {
			t.Errorf("200 seeds drew no %s", k)
		}
	}
	if len(sizes) != spec.MaxNodes-spec.MinNodes+1 {
		t.Errorf("200 seeds drew cluster sizes %v, want every one of %d to %d", sizes, spec.MinNodes, spec.MaxNodes)
	}
}

// TestShrinkFindsMinimalSchedule: local mode, held to the envelope, leaves
// it with no fault at all (every node decides alone), so shrinking a
// failing schedule drops every fault; the result still fails and says so.
func TestShrinkFindsMinimalSchedule(t *testing.T) {
	spec := checkSpecShort()
	m := CheckMode{Mode: check.ModeLocal, Policy: "fail-open", Strict: true}
	s := NewSchedule(spec, 6)
	if len(s.Faults) < 2 {
		t.Fatalf("seed 6 draws %d faults; the test wants several", len(s.Faults))
	}
	r, err := Check(spec, m, s)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Failed() {
		t.Fatalf("seed 6: local mode kept the envelope of one bucket: %+v", r.Worst)
	}
	min, mr, err := Shrink(spec, m, s, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(min.Faults) != 0 || !mr.Failed() {
		t.Errorf("seed 6: shrunk to %v (failed %v); want no fault left, still failing", min, mr.Failed())
	}
	var b bytes.Buffer
	if err := WriteFailure(&b, s, mr); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "seed 6") || !strings.Contains(out, "no fault") {
		t.Errorf("the failure report lacks the seed or the schedule:\n%s", out)
	}
}

// TestFaultCheckCachedWithinAllowance is the make-test set of the fault
// checker for the default mode (cached, local-share): 40 schedules, each
// key over each span within the envelope plus one allowance per fault
// (CheckSpec.allowance). make sim-check runs 1,000.
// TestFaultCheckReorderingLinks: owner and leased mode (fail-closed) keep
// the envelope when every link delivers out of order (CheckSpec.Reorder,
// exponential jitter of mean 5 ms): a one-hop message, such as a
// taker's hand-off, may then arrive after a chain of two that started
// later, such as a lift and the echo it allows.
func TestFaultCheckReorderingLinks(t *testing.T) {
	t.Parallel()
	spec := checkSpecShort()
	spec.Reorder = 5 * time.Millisecond
	sc, err := NewSchedule(spec, 1).Scenario(spec, CheckModes()[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := sc.Network; !n.Reorder || n.JitterDist != "exp" || n.Jitter.D() != spec.Reorder {
		t.Fatalf("network %+v: want reordering links, exponential jitter of mean %v", n, spec.Reorder)
	}
	checkShortSpec(t, spec, CheckModes()[:2], seeds(20))
}

func TestFaultCheckCachedWithinAllowance(t *testing.T) {
	t.Parallel()
	checkShort(t, []CheckMode{CheckModes()[2]}, seeds(40))
}

// TestFaultCheckNoFaultKeepsEnvelope: with no fault but the schedules'
// clock offsets within the bound, owner and leased mode (fail-closed) keep
// every key within the token bucket's envelope over every span (plus the
// bound's effect, clockAllowance), under the interleaving scheduler.
// (Leased mode left the envelope by up to 1.4 hits with no fault, seeds 2,
// 4, 6 and 7, and was held to C + r·(t + LeaseTTL) here: a grant drained
// before a span was spent in it while the owner's bucket refilled. The
// owner now holds the bucket to capacity minus its live grants,
// sync/leasecap.go.)
func TestFaultCheckNoFaultKeepsEnvelope(t *testing.T) {
	t.Parallel()
	spec := checkSpecShort()
	leased := CheckModes()[1]
	offsets, worst := 0, math.Inf(-1)
	for _, m := range []CheckMode{CheckModes()[0], leased} {
		for seed := uint64(1); seed <= uint64(seeds(40)); seed++ {
			s := NewSchedule(spec, seed)
			s.Faults = slices.DeleteFunc(s.Faults, func(f Fault) bool { return f.Kind != "offset" })
			offsets += len(s.Faults)
			r := requireHeld(t, spec, m, s)
			if len(s.Faults) > 0 && r.Envelope.Over > worst {
				worst = r.Envelope.Over
			}
		}
	}
	if offsets == 0 {
		t.Error("seeds 1 to 40 drew no clock offset")
	}
	t.Logf("%d clock offsets within ±%v over both modes; with offsets, at most %+.2f hits over the envelope alone (the clock allowance: up to %.0f per offset)",
		offsets, spec.MaxOffset, worst, float64(spec.Limit.Limit)/spec.Limit.Period.D().Seconds()*2*spec.MaxOffset.Seconds())
}

// TestFaultCheckHandoffsKeepEnvelope: owner mode with fail-closed keeps
// every key within the envelope (plus the clock bound's effect,
// clockAllowance) through joins, graceful leaves, one-way cuts and clock
// offsets within the bound (the schedules of seeds 1 to 100 with their
// other faults dropped): hand-offs move keys with their state, a one-way
// cut removes nobody, and cluster time absorbs the offsets. (make
// sim-check: no failure of owner mode shrinks to one of these alone.)
func TestFaultCheckHandoffsKeepEnvelope(t *testing.T) {
	t.Parallel()
	spec := checkSpecShort()
	m := CheckModes()[0]
	ran := 0
	for seed := uint64(1); seed <= uint64(seeds(100)); seed++ {
		s := NewSchedule(spec, seed)
		s.Faults = slices.DeleteFunc(s.Faults, func(f Fault) bool {
			return f.Kind != "join" && f.Kind != "leave" && f.Kind != "cut" && f.Kind != "offset"
		})
		if len(s.Faults) == 0 {
			continue
		}
		ran++
		requireHeld(t, spec, m, s)
	}
	if ran < seeds(100)/5 {
		t.Errorf("only %d of %d seeds drew a join, a leave, a cut or an offset", ran, seeds(100))
	}
	t.Logf("%d schedules of joins, graceful leaves, one-way cuts and clock offsets", ran)
}

// TestFaultCheckSeesOffsetsBeyondBound: the checker is not blind to the
// clock. Schedules whose offsets go up to 30 minutes, far beyond the nodes'
// bound of 500 ms (their other faults dropped), break owner mode's
// envelope: a node's clock stepping forward by more than the bound refills
// the keys it owns by more than clockAllowance allows, and the check says
// so. The same seeds with offsets within the bound keep it
// (TestFaultCheckNoFaultKeepsEnvelope).
func TestFaultCheckSeesOffsetsBeyondBound(t *testing.T) {
	spec := checkSpecShort()
	spec.MaxOffset = 30 * time.Minute
	m := CheckModes()[0]
	ran, failed := 0, 0
	worst := Excess{}
	for seed := uint64(1); seed <= uint64(seeds(100)); seed++ {
		s := NewSchedule(spec, seed)
		s.Faults = slices.DeleteFunc(s.Faults, func(f Fault) bool { return f.Kind != "offset" })
		if len(s.Faults) == 0 {
			continue
		}
		ran++
		r, err := Check(spec, m, s)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed() {
			failed++
		}
		if r.Worst.Over > worst.Over {
			worst = r.Worst
		}
	}
	t.Logf("%d of %d schedules of offsets up to ±30m failed; worst %+.2f hits over (%d in %v..%v, bound %.2f)",
		failed, ran, worst.Over, worst.Admitted, worst.From, worst.To, worst.Bound)
	if ran < seeds(100)/10 || failed*2 < ran {
		t.Errorf("%d of %d schedules with offsets beyond the bound failed; want at least half of at least %d", failed, ran, seeds(100)/10)
	}
}

// TestFailClosedEnvelopeUnderFaults is issue #15's promise (item 3) under
// the fault checker: owner and leased mode with policy fail-closed keep
// every key within the token bucket's envelope over every span, under
// every schedule of seeds 1 to 40. The promise is not met yet: the seeds
// in knownOverEnvelope still leave it (docs/consistency.md, "Fencing and
// charging", "Not met yet"; docs/reliability.md, "Open faults"), and
// `make sim-check` runs the promise itself over 1,000 schedules per mode,
// failing while any leaves it. This test holds the line meanwhile: it
// fails on any other seed that leaves the envelope (with its minimal
// schedule), on a known seed that goes further over than recorded, and
// on a known seed that now keeps the envelope (take it off the list).
func TestFailClosedEnvelopeUnderFaults(t *testing.T) {
	t.Parallel()
	// knownOverEnvelope is, by mode and seed, how far over the envelope
	// the seed's schedule goes today (the worst key's worst span, in hits).
	// Owner seed 15, one silent partition of 7 nodes (3|4), was +2.74; it
	// keeps the envelope since an owner whose backup target was reported
	// failed waits Config.FenceHold before a new target's acknowledgements
	// count (sync/fence.go, resetFences). Leased seed
	// 2 (the owner flapping, then restarting, with leases out) was +1.43,
	// then +5.43 once leases were granted again after an empty grant; it
	// keeps the envelope since a lease that cannot cover a check sends it
	// to the owner (sync/lease.go) and a restarted owner's probe alone
	// drains its held backup's reserve (sync/backup.go). Seed 19, the
	// LeaseTTL slack with no fault, keeps it since the owner caps its
	// bucket by its live grants (sync/leasecap.go).
	//
	// Owner seed 27 (+0.0044) left it once confirmed takeovers
	// (sync/confirm.go) moved the timing of its checks: every hit of the
	// key k3 in the span was decided by one owner on one bucket, two of
	// them just before the span, whose answers reached their clients
	// inside it (an artefact of the measure, not a second owner); it keeps
	// the envelope again since the ownership lease (sync/ownerlease.go)
	// moved that timing once more.
	knownOverEnvelope := map[string]map[uint64]float64{
		"owner/fail-closed":  {},
		"leased/fail-closed": {},
	}
	modes := CheckModes()[:2]
	spec := checkSpecShort()
	rs, err := CheckSeeds(spec, modes, 1, seeds(40), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		known, isKnown := knownOverEnvelope[r.Mode][r.Schedule.Seed]
		switch {
		case isKnown && !r.Failed():
			t.Errorf("%s seed %d now keeps the envelope: take it off knownOverEnvelope", r.Mode, r.Schedule.Seed)
		case isKnown && r.Worst.Over > known+0.01:
			t.Errorf("%s seed %d: %+.2f hits over the envelope, recorded %+.2f", r.Mode, r.Schedule.Seed, r.Worst.Over, known)
		case isKnown:
			t.Logf("%s seed %d: %+.2f hits over the envelope (known, issue #15 item 3)", r.Mode, r.Schedule.Seed, r.Worst.Over)
		case r.Failed():
			reportFailure(t, spec, modes, r)
		}
	}
}

// checkShort runs n schedules of each mode and fails with each failed
// seed's minimal schedule.
func checkShort(t *testing.T, modes []CheckMode, n int) {
	t.Helper()
	checkShortSpec(t, checkSpecShort(), modes, n)
}

// checkShortSpec is checkShort with spec.
func checkShortSpec(t *testing.T, spec CheckSpec, modes []CheckMode, n int) {
	t.Helper()
	rs, err := CheckSeeds(spec, modes, 1, n, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !r.Failed() {
			continue
		}
		reportFailure(t, spec, modes, r)
	}
	var b bytes.Buffer
	if err := WriteCheckSummary(&b, Summarize(modes, rs)); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
}

// reportFailure fails t with r's seed and its minimal schedule.
func reportFailure(t *testing.T, spec CheckSpec, modes []CheckMode, r *CheckResult) {
	t.Helper()
	var m CheckMode
	for _, x := range modes {
		if x.String() == r.Mode {
			m = x
		}
	}
	_, min, err := Shrink(spec, m, r.Schedule, r)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFailure(&b, r.Schedule, min); err != nil {
		t.Fatal(err)
	}
	t.Errorf("%s", b.String())
}

// seeds returns n, the schedules a test of the checker runs, or a fifth of
// them under the race detector, which slows the simulator about tenfold:
// make race looks for data races, which the fewer schedules reach as well,
// and make test runs them all.
func seeds(n int) int {
	if raceEnabled {
		return max(1, n/5)
	}
	return n
}

// raceCut returns xs, the cases of a test, or every fifth of them (the
// first among them) under the race detector, for the reason of seeds: each
// case is a simulation on one goroutine (or a comparison of a few that
// share nothing), in which the race detector has nothing to look at that
// the first case does not show it too, and make test runs them all.
func raceCut[T any](xs []T) []T {
	if !raceEnabled {
		return xs
	}
	var cut []T
	for i := 0; i < len(xs); i += 5 {
		cut = append(cut, xs[i])
	}
	return cut
}

// TestNotifyMaxDrawnPerSchedule: with CheckSpec.NotifyMax each schedule
// draws its gossip delay in [200 ms, NotifyMax] from its seed, on a stream
// of its own (the faults are the seed's as without it), the scenario
// runs with it, and it survives the schedule's JSON, so a failure replays.
func TestNotifyMaxDrawnPerSchedule(t *testing.T) {
	spec := DefaultCheckSpec()
	spec.NotifyMax = 3 * time.Second
	seen := map[Duration]bool{}
	for seed := uint64(1); seed <= 50; seed++ {
		s := NewSchedule(spec, seed)
		plain := NewSchedule(DefaultCheckSpec(), seed)
		if d := s.Notify.D(); d < 200*time.Millisecond || d > spec.NotifyMax {
			t.Fatalf("seed %d: notify %v, want within [200ms, %v]", seed, d, spec.NotifyMax)
		}
		seen[s.Notify] = true
		s.Notify = 0
		if !reflect.DeepEqual(s, plain) {
			t.Fatalf("seed %d: schedule %v, want the seed's faults %v", seed, s, plain)
		}
	}
	if len(seen) < 40 {
		t.Errorf("%d distinct delays in 50 seeds, want them drawn", len(seen))
	}
	s := NewSchedule(spec, 910)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Schedule
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	sc, err := back.Scenario(DefaultCheckSpec(), CheckMode{Mode: check.ModeOwner, Policy: "fail-closed"})
	if err != nil {
		t.Fatal(err)
	}
	if back.Notify != s.Notify || sc.Membership.Notify != s.Notify {
		t.Errorf("read back: notify %v, scenario's %v, want %v", back.Notify, sc.Membership.Notify, s.Notify)
	}
}
