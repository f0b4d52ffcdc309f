package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/check"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// The fault checker runs the real nodes through seeded random fault
// schedules and checks every key's admissions over every span against the
// promise of the mode (checkfaults.go draws the schedules, this file runs
// them, shrink.go minimises a failing one):
//
//   - Strict (owner and leased mode with policy fail-closed): the token
//     bucket's envelope, capacity + rate × span, for every key and every
//     span of decisions (each admission at the instant a bucket took its
//     tokens), under any fault.
//   - Allowance (cached mode with the default policy, local-share): the
//     envelope plus the drift bound D of consistency.md once, plus one
//     envelope of the span and one D per fault whose window overlaps the
//     span (CheckSpec.allowance says why).
//
// A run uses the interleaving scheduler (Options.Interleave), and
// membership follows the faults (gossip's detection after a crash or a
// cut, the quorum rule's failed members).

// CheckMode is one mode the fault checker runs: the consistency mode, its
// partition policy, and which promise it is held to.
type CheckMode struct {
	// Mode is the nodes' default mode.
	Mode check.Mode
	// Policy is the partition policy ("fail-closed", "local-share", ...).
	Policy string
	// Strict holds the mode to the token bucket's envelope; otherwise to the
	// envelope plus one allowance per fault.
	Strict bool
	// LeaseSlack widens every span by the lease TTL: leased mode's bound
	// as consistency.md documents it today, C + r·(t + LeaseTTL) (a token
	// may be drained up to LeaseTTL before it is spent). Issue #15 asks for
	// the envelope without it.
	LeaseSlack bool
}

// String returns "mode/policy", and "+ttl" with LeaseSlack.
func (m CheckMode) String() string {
	s := m.Mode.String() + "/" + m.Policy
	if m.LeaseSlack {
		s += "+ttl"
	}
	return s
}

// CheckModes returns the modes the fault checker runs by default: owner
// and leased mode with fail-closed, held to the envelope (issue #15's
// promise), and the default mode, cached with local-share, held to its
// allowance per fault.
func CheckModes() []CheckMode {
	return []CheckMode{
		{Mode: check.ModeOwner, Policy: "fail-closed", Strict: true},
		{Mode: check.ModeLeased, Policy: "fail-closed", Strict: true},
		{Mode: check.ModeCached, Policy: "local-share"},
	}
}

// ParseCheckModes parses "owner/fail-closed,cached/local-share": a mode and
// a policy each, and "+ttl" for LeaseSlack; a fail-closed owner or leased
// mode is strict. Empty means CheckModes.
func ParseCheckModes(s string) ([]CheckMode, error) {
	if strings.TrimSpace(s) == "" {
		return CheckModes(), nil
	}
	var out []CheckMode
	for _, f := range splitList(s) {
		ms, ps, ok := strings.Cut(f, "/")
		ps, slack := strings.CutSuffix(ps, "+ttl")
		m, err := check.ParseMode(ms)
		if !ok || err != nil || m == check.ModeDefault || m == check.ModeLocal {
			return nil, fmt.Errorf("sim: check mode %q: want owner, cached or leased, a slash and a policy", f)
		}
		if _, err := check.ParsePolicy(ps); err != nil {
			return nil, fmt.Errorf("sim: check mode %q: %w", f, err)
		}
		out = append(out, CheckMode{Mode: m, Policy: ps, Strict: m != check.ModeCached && ps == "fail-closed", LeaseSlack: slack})
	}
	return out, nil
}

// CheckSpec is what every schedule of a fault check runs: the cluster's
// size, its traffic and its limit. DefaultCheckSpec documents each value.
type CheckSpec struct {
	// MinNodes and MaxNodes bound the initial cluster size.
	MinNodes, MaxNodes int
	// Duration is the simulated traffic time of one schedule.
	Duration time.Duration
	// MaxFaults bounds the faults of one schedule (at least one).
	MaxFaults int
	// Keys is the number of keys, all under Limit, drawn uniformly; Rate the
	// requests per second, cluster-wide.
	Keys int
	Rate float64
	// Limit is every key's limit.
	Limit LimitSpec
	// Interleave is the interleaving scheduler's window (Options.Interleave).
	Interleave time.Duration
	// MaxOffset bounds the clock offsets a schedule may give nodes (Fault
	// kind "offset", the simulator's "clock" event); zero draws none. The
	// default is the nodes' bound, sync.Config.MaxClockOffset: the check
	// allows the bound's documented effect (clockAllowance), so a larger
	// MaxOffset tests that the checker sees what the bound does not cover.
	MaxOffset time.Duration
	// Notify is how long gossip takes to tell a member of a join, a
	// graceful leave or a healed link (Membership.Notify); zero keeps the
	// simulator's default (200 ms). A larger one tests what waits on the
	// members learning of a joiner (sync's join hold, HandoffWait).
	Notify time.Duration
	// NotifyMax, when not zero, gives each schedule its own gossip delay
	// (Schedule.Notify), uniform in [200 ms, NotifyMax] and drawn from the
	// schedule's seed on a stream of its own: the faults are the seed's
	// as without it, and a schedule read back replays its delay.
	NotifyMax time.Duration
	// Reorder, when not zero, gives every link an exponential jitter of
	// this mean and lets it deliver out of order (Network.Reorder): a
	// one-hop message may then arrive after a chain of two that started
	// later. Zero keeps the simulator's links: FIFO, 200 µs of uniform
	// jitter on 500 µs.
	Reorder time.Duration
}

// DefaultCheckSpec returns the fault checker's defaults: 3 to 7 nodes, 20 s
// of traffic, up to 4 faults; 6 keys of 50 per 5 s (the e2e key),
// 120 requests a second over them, so every key is asked about twice its
// refill and its envelope is reached; the interleave window of 1 ms; clock
// offsets within the nodes' bound (sync.Config.MaxClockOffset, 500 ms).
func DefaultCheckSpec() CheckSpec {
	return CheckSpec{
		MinNodes: 3, MaxNodes: 7,
		Duration:  20 * time.Second,
		MaxFaults: 4,
		Keys:      6, Rate: 120,
		Limit:      LimitSpec{Algorithm: "token_bucket", Limit: 50, Period: Duration(5 * time.Second)},
		Interleave: time.Millisecond,
		MaxOffset:  rlsync.DefaultConfig().MaxClockOffset,
	}
}

// Validate reports the first invalid field.
func (s CheckSpec) Validate() error {
	switch {
	case s.MinNodes < 2 || s.MaxNodes < s.MinNodes || s.MaxNodes > MaxNodes:
		return fmt.Errorf("%w: check nodes %d to %d: want 2 <= min <= max <= %d", ErrScenario, s.MinNodes, s.MaxNodes, MaxNodes)
	case s.Duration < 10*time.Second:
		return fmt.Errorf("%w: check duration %v: want at least 10s", ErrScenario, s.Duration)
	case s.MaxFaults < 1:
		return fmt.Errorf("%w: check max faults %d: want at least 1", ErrScenario, s.MaxFaults)
	case s.Keys < 1 || s.Rate <= 0:
		return fmt.Errorf("%w: check keys %d and rate %v must be positive", ErrScenario, s.Keys, s.Rate)
	case s.Interleave < 0 || s.MaxOffset < 0 || s.Notify < 0 || s.NotifyMax < 0 || s.Reorder < 0:
		return fmt.Errorf("%w: check interleave, max offset, notify, notify max and reorder must not be negative", ErrScenario)
	}
	l := s.Limit
	if l.Algorithm == "" {
		l.Algorithm = "token_bucket"
	}
	if l.Algorithm != "token_bucket" {
		return fmt.Errorf("%w: check limit %q: the envelope is the token bucket's", ErrScenario, l.Algorithm)
	}
	_, err := l.Bucket()
	return err
}

// CheckResult is the outcome of one schedule under one mode.
type CheckResult struct {
	// Mode is the CheckMode's String; Schedule the schedule run.
	Mode     string   `json:"mode"`
	Schedule Schedule `json:"schedule"`
	// Worst is the key and span with the largest excess over its bound.
	Worst Excess `json:"worst"`
	// Violations lists, per key that left its bound, its worst span.
	Violations []Excess `json:"violations,omitempty"`
	// Envelope is the key and span with the largest excess over the token
	// bucket's envelope alone, whatever the mode's bound; Faults counts
	// the fault windows (allowance) that overlap its span.
	Envelope Excess `json:"envelope"`
	Faults   int    `json:"faults"`
	// Admitted and Ideal are the run's hits admitted and the ideal
	// limiter's; Degraded the answers decided by the partition policy.
	Admitted, Ideal, Degraded int64
	// Anomalies counts done callbacks a Node called twice (a bug when
	// nonzero): a failure too.
	Anomalies int64 `json:"anomalies,omitempty"`
}

// Failed reports whether the schedule broke the mode's promise.
func (r *CheckResult) Failed() bool { return len(r.Violations) > 0 || r.Anomalies > 0 }

// Check runs schedule s under mode m and checks every key over every span.
func Check(spec CheckSpec, m CheckMode, s Schedule) (*CheckResult, error) {
	return runCheck(spec, m, s, nil, 0)
}

// CheckTrace is Check that also writes the story of one key (an index of
// the workload's keys, "k2" is 2) to w as the run goes (Cluster.SetTrace):
// the method of consistency.md's "Not met yet", replaying a minimal
// schedule with a trace of one key's owners.
func CheckTrace(spec CheckSpec, m CheckMode, s Schedule, key int, w io.Writer) (*CheckResult, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: trace of k%d: no writer", ErrScenario, key)
	}
	return runCheck(spec, m, s, w, key)
}

// runCheck is Check, traced to w when w is not nil.
func runCheck(spec CheckSpec, m CheckMode, s Schedule, w io.Writer, key int) (*CheckResult, error) {
	sc, err := s.Scenario(spec, m)
	if err != nil {
		return nil, err
	}
	c, err := NewCluster(sc, Variant{Mode: m.Mode}, s.Seed)
	if err != nil {
		return nil, err
	}
	if err := c.SetInterleave(spec.Interleave); err != nil {
		return nil, err
	}
	if w != nil {
		if err := c.SetTrace(w, key); err != nil {
			return nil, err
		}
	}
	c.adm = newAdmissionLog(sc.Workload.Keys)
	r, err := c.Run(nil)
	if err != nil {
		return nil, err
	}
	cfg, err := sc.Sync.Config("n1", m.Mode, 0)
	if err != nil {
		return nil, err
	}
	p := r.Phase("all")
	res := &CheckResult{Mode: m.String(), Schedule: s, Admitted: p.Admitted, Ideal: p.Ideal,
		Degraded: p.Degraded, Anomalies: r.Anomalies}
	// The log holds each admission at the instant its bucket took the
	// tokens (Cluster.admitted), not at its answer: the envelope needs no
	// lag for the answer's way back. With LeaseSlack, a token may be
	// drained up to LeaseTTL before it is spent.
	var lag int64
	if m.LeaseSlack {
		lag = int64(cfg.LeaseTTL)
	}
	env := newEnvelope(c.limit, lag)
	var bound func(from, to int64) float64
	if !m.Strict {
		bound = spec.allowance(sc, s, cfg, env)
	}
	if clk := s.clockAllowance(sc, cfg, env); clk != nil {
		if bound == nil {
			bound = func(from, to int64) float64 { return env.bound(to - from) }
		}
		base := bound
		bound = func(from, to int64) float64 { return base(from, to) + clk(from, to) }
	}
	for k, adm := range c.adm.sorted() {
		var x Excess
		if bound == nil {
			x = env.worst(k, adm)
		} else {
			x = worstWith(k, adm, bound)
		}
		if k == 0 || x.Over > res.Worst.Over {
			res.Worst = x
		}
		if x.Over > 0 {
			res.Violations = append(res.Violations, x)
		}
		if e := env.worst(k, adm); k == 0 || e.Over > res.Envelope.Over {
			res.Envelope = e
		}
	}
	for _, w := range s.windows(sc, cfg) {
		if w[0] <= int64(res.Envelope.To) && w[1] >= int64(res.Envelope.From) {
			res.Faults++
		}
	}
	return res, nil
}

// allowance returns cached mode's bound over the span [from, to] of a run
// of schedule s (consistency.md): the envelope, plus the drift bound
//
//	D = f·C + r·(F + δ) + N·h
//
// (the nodes' unseen hits, N the most members the run has, h the largest
// request), plus, for each fault whose window overlaps the span, one more
// envelope of the span and one more D. A fault's window runs from its start
// to its end plus the time the cluster takes to notice and repair it
// (faultTail). Why one envelope per fault: while a node cannot reach a
// key's owner, local-share decides the key on a bucket of limit and burst
// divided by the members the node sees (or its baseline, on a minority
// side), started from its view; the nodes cut off from one owner hold
// shares adding up to at most one bucket, and each fault cuts one more set
// of nodes from an owner (a partition into g groups cuts g−1: the schedules
// split in two).
func (spec CheckSpec) allowance(sc Scenario, s Schedule, cfg rlsync.Config, env envelope) func(from, to int64) float64 {
	members := sc.Nodes
	for _, f := range s.Faults {
		if f.Kind == "join" {
			members++
		}
	}
	rate := float64(env.limit) / float64(env.period) // hits per nanosecond
	// δ, the round trip: each way one link, one interleave window (a
	// message applied late) and one tick (a reply sent with the next
	// batch); with LeaseSlack, LeaseTTL more each way.
	oneWay := int64(sc.Network.Latency+sc.Network.Jitter) + int64(spec.Interleave) + int64(cfg.TickInterval) + env.lag
	d := cfg.SyncFraction*float64(env.capacity) +
		rate*float64(cfg.FlushInterval+time.Duration(2*oneWay)) +
		float64(members)*float64(sc.Workload.MaxHits)
	wins := s.windows(sc, cfg)
	return func(from, to int64) float64 {
		b := env.bound(to-from) + d
		for _, w := range wins {
			if w[0] <= to && w[1] >= from {
				b += env.bound(to-from) + d
			}
		}
		return b
	}
}

// faultTail is how long after a fault ends its effect may last: failure
// detection and its spread (the views heal after Notify), the owner marked
// unreachable (RequestTimeout, then UnreachableAfter), and the hand-off
// wait of a node that gains keys back.
func faultTail(sc Scenario, cfg rlsync.Config) int64 {
	m := sc.Membership
	return int64(m.Detect+max(0, m.Spread)+m.Notify) + int64(cfg.RequestTimeout+cfg.UnreachableAfter+cfg.HandoffWait)
}

// windows returns the window of every fault episode of s, in nanoseconds:
// [start, end + tail]. A flap is one episode per isolation. A clock offset
// cuts no node from an owner: clockAllowance accounts for it instead.
func (s Schedule) windows(sc Scenario, cfg rlsync.Config) [][2]int64 {
	tail := faultTail(sc, cfg)
	var out [][2]int64
	for _, f := range s.Faults {
		at, end := int64(f.At), int64(f.At+f.For)
		switch f.Kind {
		case "flap":
			for t := at; t < end; t += 2 * int64(f.Every) {
				out = append(out, [2]int64{t, min(t+int64(f.Every), end) + tail})
			}
		case "kill", "leave", "join":
			out = append(out, [2]int64{at, at + tail})
		case "offset":
		default:
			out = append(out, [2]int64{at, end + tail})
		}
	}
	return out
}

// clockAllowance returns what the clock bound adds over the span [from, to]
// of a run of s, or nil when s gives no clock offset: consistency.md
// ("Clocks", "The effect of the bound"). A node's clock stepping forward by
// o is time passing for its keys, which refill by r·o once (a step back is
// taken out of its correction); until the node and its peers have measured
// the step again, their cluster times differ by up to the bound B
// (cfg.MaxClockOffset), and a state that moves between two of them gains
// at most r·B once per move. So each offset fault whose window overlaps the
// span adds r·(|o| + B), |o| capped at B: the one step forward and one move
// (a key's state moves at most once across one step: the hand-off or
// failover the run's other faults cause are accounted for by theirs). An
// offset beyond B is not covered: the check then sees its effect (at the
// defaults, r·(|o| + B) is 10 hits; |o| = 30 min refills a 50-hit bucket).
// The window runs from the step forward to the step back plus clockSettle
// and the tail of a fault (faultTail).
func (s Schedule) clockAllowance(sc Scenario, cfg rlsync.Config, env envelope) func(from, to int64) float64 {
	rate := float64(env.limit) / float64(env.period) // hits per nanosecond
	type win struct {
		from, to int64
		add      float64
	}
	var wins []win
	tail := faultTail(sc, cfg) + int64(clockSettle)
	for _, f := range s.Faults {
		if f.Kind != "offset" || f.Offset == 0 {
			continue
		}
		o := min(abs64(int64(f.Offset)), int64(cfg.MaxClockOffset)) // beyond the bound: not covered
		wins = append(wins, win{int64(f.At), int64(f.At+f.For) + tail, rate * float64(o+int64(cfg.MaxClockOffset))})
	}
	if len(wins) == 0 {
		return nil
	}
	return func(from, to int64) float64 {
		var b float64
		for _, w := range wins {
			if w.from <= to && w.to >= from {
				b += w.add
			}
		}
		return b
	}
}

// clockSettle is how long after a clock step its peers' measures of the
// node may lag (consistency.md: the minimum over two 10 s windows).
const clockSettle = 20 * time.Second

// hasOffsets reports whether s gives a node a clock offset.
func (s Schedule) hasOffsets() bool {
	return slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == "offset" && f.Offset != 0 })
}

// CheckSeeds runs the schedules of seeds first, first+1, ..., first+n−1
// under each mode, parallel at a time (at least one), and returns the
// results by mode, then seed. done, if not nil, is called on the caller's
// goroutine after each run with the runs finished so far. The results do
// not depend on parallel.
func CheckSeeds(spec CheckSpec, modes []CheckMode, first uint64, n, parallel int, done func(finished, total int)) ([]*CheckResult, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	total := len(modes) * n
	out := make([]*CheckResult, total)
	errs := make([]error, total)
	jobs := make(chan int)
	fin := make(chan struct{}, total)
	parallel = max(1, min(parallel, total))
	for range parallel {
		go func() {
			for i := range jobs {
				s := NewSchedule(spec, first+uint64(i%n))
				out[i], errs[i] = Check(spec, modes[i/n], s)
				fin <- struct{}{}
			}
		}()
	}
	go func() {
		for i := range total {
			jobs <- i
		}
		close(jobs)
	}()
	for k := range total {
		<-fin
		if done != nil {
			done(k+1, total)
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sim: check %v, seed %d: %w", modes[i/n], first+uint64(i%n), err)
		}
	}
	return out, nil
}
