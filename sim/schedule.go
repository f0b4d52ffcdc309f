package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// streamSchedule is the stream of the generator that draws a fault
// checker's schedule from its seed (the run itself draws from the streams
// of cluster.go, with the same seed).
const streamSchedule = 5

// streamNotify is the stream of the generator that draws a schedule's
// gossip delay (CheckSpec.NotifyMax): apart from streamSchedule, so a
// seed's faults are the same with or without it.
const streamNotify = 6

// minNotify is the least gossip delay drawn (CheckSpec.NotifyMax): the
// simulator's default.
const minNotify = 200 * time.Millisecond

// Fault is one fault of a fault checker's schedule.
//
// Kind is one of:
//   - "partition": Group on one side, the other nodes on the other, both
//     ways, for For; then every link heals.
//   - "isolate": Node cut from every other node, both ways, for For.
//   - "cut": the one-way link From -> To cut for For.
//   - "flap": Node isolated for Every, reconnected for Every, and again,
//     for For.
//   - "restart": Node crashes (or, Graceful, leaves with hand-off) and
//     starts again For later with empty state.
//   - "kill": Node crashes for good.
//   - "leave": Node leaves gracefully for good.
//   - "join": a new node joins.
//   - "offset": Node's clock steps to Offset ahead (negative: behind) of
//     the simulation's, and For later steps back to it (the simulator's
//     "clock" event, twice): one step forward and one back, whatever the
//     sign.
//
// Node and From name a node ("n2") or say "owner": the owner of key 0 when
// the fault fires.
type Fault struct {
	At       Duration `json:"at"`
	Kind     string   `json:"kind"`
	Node     string   `json:"node,omitempty"`
	From     string   `json:"from,omitempty"`
	To       string   `json:"to,omitempty"`
	Group    []string `json:"group,omitempty"`
	For      Duration `json:"for,omitempty"`
	Every    Duration `json:"every,omitempty"`
	Graceful bool     `json:"graceful,omitempty"`
	Offset   Duration `json:"offset,omitempty"`
}

// String renders f in one phrase: "isolate owner at 3.2s for 2s".
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	switch f.Kind {
	case "partition":
		fmt.Fprintf(&b, " %s|rest", strings.Join(f.Group, ","))
	case "cut":
		fmt.Fprintf(&b, " %s->%s", f.From, f.To)
	case "join":
	default:
		b.WriteString(" " + f.Node)
	}
	if f.Graceful {
		b.WriteString(" graceful")
	}
	fmt.Fprintf(&b, " at %v", f.At)
	switch f.Kind {
	case "restart":
		fmt.Fprintf(&b, " down %v", f.For)
	case "flap":
		fmt.Fprintf(&b, " every %v for %v", f.Every, f.For)
	case "offset":
		fmt.Fprintf(&b, " by %v for %v", f.Offset, f.For)
	case "partition", "isolate", "cut":
		fmt.Fprintf(&b, " for %v", f.For)
	}
	return b.String()
}

// Schedule is one run of the fault checker: the cluster and the network
// it draws, and its faults. The same Schedule gives the same run, byte
// for byte.
type Schedule struct {
	// Seed seeds the schedule's draw and the run.
	Seed uint64 `json:"seed"`
	// Nodes is the initial cluster size.
	Nodes int `json:"nodes"`
	// Silent: a send across a cut or to a node that is down is dropped
	// without a report (iptables DROP), so the sender notices only its
	// timeouts; otherwise it is told (a refused connection, a deadline).
	Silent bool `json:"silent,omitempty"`
	// Detect is gossip's failure detection delay.
	Detect Duration `json:"detect"`
	// Notify, when not zero, is how long gossip takes to tell a member of
	// a join, a graceful leave or a healed link in this schedule, drawn
	// from the seed (CheckSpec.NotifyMax); zero: CheckSpec.Notify.
	Notify Duration `json:"notify,omitempty"`
	// Faults are the faults, by time.
	Faults []Fault `json:"faults"`
}

// String renders s in one line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, detect %v", s.Seed, s.Nodes, s.Detect)
	if s.Notify > 0 {
		fmt.Fprintf(&b, ", notify %v", s.Notify)
	}
	if s.Silent {
		b.WriteString(", silent network")
	}
	if len(s.Faults) == 0 {
		b.WriteString("; no fault")
	}
	for _, f := range s.Faults {
		b.WriteString("; " + f.String())
	}
	return b.String()
}

// NewSchedule draws the schedule of seed: a cluster size in
// [MinNodes, MaxNodes], a silent or a reporting network, a detection
// delay of 0.5 to 3 s, and 1 to MaxFaults faults of every kind, each
// starting after 1 s and ending at least 2 s before the traffic does. At
// most Nodes − 2 nodes go for good (kill, leave). Half the faults that
// pick a node pick key 0's owner.
func NewSchedule(spec CheckSpec, seed uint64) Schedule {
	rng := rand.New(rand.NewPCG(seed, streamSchedule))
	s := Schedule{Seed: seed}
	s.Nodes = spec.MinNodes + rng.IntN(spec.MaxNodes-spec.MinNodes+1)
	s.Silent = rng.IntN(2) == 0
	s.Detect = Duration(500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
	dur := spec.Duration
	ms := func(lo, hi time.Duration) Duration {
		return Duration(lo + time.Duration(rng.Int64N(int64(hi-lo)/int64(time.Millisecond)+1))*time.Millisecond)
	}
	name := func() string { return nodeName(rng.IntN(s.Nodes)) }
	target := func() string {
		if rng.IntN(2) == 0 {
			return "owner"
		}
		return name()
	}
	kinds := []string{"partition", "partition", "isolate", "isolate", "cut", "flap", "restart", "restart", "kill", "leave", "join"}
	if spec.MaxOffset > 0 {
		kinds = append(kinds, "offset")
	}
	gone := 0
	n := 1 + rng.IntN(spec.MaxFaults)
	for range n {
		f := Fault{Kind: kinds[rng.IntN(len(kinds))]}
		f.At = ms(time.Second, dur-8*time.Second)
		last := dur - 2*time.Second - f.At.D() // the latest end
		f.For = ms(500*time.Millisecond, min(6*time.Second, last))
		if (f.Kind == "kill" || f.Kind == "leave") && gone >= s.Nodes-2 {
			f.Kind = "restart"
		}
		switch f.Kind {
		case "partition":
			perm := rng.Perm(s.Nodes)
			k := 1 + rng.IntN(s.Nodes-1)
			for _, i := range perm[:k] {
				f.Group = append(f.Group, nodeName(i))
			}
			slices.SortFunc(f.Group, func(a, b string) int { return nodeNum(a) - nodeNum(b) })
		case "isolate":
			f.Node = target()
		case "cut":
			f.From, f.To = target(), name()
			for f.To == f.From {
				f.To = name()
			}
		case "flap":
			f.Node = target()
			f.Every = ms(300*time.Millisecond, 1500*time.Millisecond)
		case "restart":
			f.Node = target()
			f.Graceful = rng.IntN(2) == 0
		case "kill", "leave":
			f.Node = target()
			f.For = 0
			gone++
		case "join":
			f.For = 0
		case "offset":
			f.Node = name() // a name: the step back must reach the same node
			f.Offset = Duration(rng.Int64N(2*int64(spec.MaxOffset)+1) - int64(spec.MaxOffset))
		}
		s.Faults = append(s.Faults, f)
	}
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	if spec.NotifyMax > 0 {
		// Uniform in [minNotify, NotifyMax], whole milliseconds.
		nr := rand.New(rand.NewPCG(seed, streamNotify))
		lo := min(minNotify, spec.NotifyMax)
		s.Notify = Duration(lo + time.Duration(nr.Int64N(int64(spec.NotifyMax-lo)/int64(time.Millisecond)+1))*time.Millisecond)
	}
	return s
}

// nodeNum returns the number of node name "n3", 3.
func nodeNum(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "n"))
	return n
}

// Scenario returns the simulator scenario that runs s under mode m: spec's
// cluster, traffic and limit, s's network and faults as a timeline.
func (s Schedule) Scenario(spec CheckSpec, m CheckMode) (Scenario, error) {
	sc := Scenario{
		Name:        fmt.Sprintf("check-%d", s.Seed),
		Description: "fault checker schedule " + s.String(),
		Nodes:       s.Nodes,
		Duration:    Duration(spec.Duration),
		Limit:       spec.Limit,
		Workload:    Workload{Rate: spec.Rate, Keys: spec.Keys, Dist: "uniform"},
		Network:     Network{Silent: s.Silent},
		Membership:  Membership{Detect: s.Detect, Notify: Duration(spec.Notify)},
		Sync:        SyncSpec{Policy: m.Policy},
	}
	if s.Notify > 0 {
		sc.Membership.Notify = s.Notify
	}
	if spec.Reorder > 0 {
		sc.Network.Jitter, sc.Network.JitterDist, sc.Network.Reorder = Duration(spec.Reorder), "exp", true
	}
	for _, f := range s.Faults {
		heal := Event{At: f.At + f.For, Action: "heal"}
		switch f.Kind {
		case "partition":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "partition", Groups: [][]string{f.Group}}, heal)
		case "isolate":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "isolate", Node: f.Node}, heal)
		case "cut":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "cut", From: f.From, To: f.To}, heal)
		case "flap":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "flap", Node: f.Node, Every: f.Every, Until: f.At + f.For})
		case "restart":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "restart", Node: f.Node, Down: f.For, Graceful: f.Graceful})
		case "kill":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "crash", Node: f.Node})
		case "leave":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "leave", Node: f.Node})
		case "join":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "join"})
		case "offset":
			sc.Events = append(sc.Events, Event{At: f.At, Action: "clock", Node: f.Node, Offset: f.Offset},
				Event{At: f.At + f.For, Action: "clock", Node: f.Node})
		default:
			return Scenario{}, fmt.Errorf("%w: schedule %d: unknown fault %q", ErrScenario, s.Seed, f.Kind)
		}
	}
	slices.SortStableFunc(sc.Events, func(a, b Event) int { return int(a.At - b.At) })
	sc = sc.WithDefaults()
	return sc, sc.Validate()
}

// Shrink returns the smallest schedule that still fails under m, drawn
// from s (which failed, with result r) by dropping faults one at a time
// while the run still fails, and its result. The seed stays: the traffic
// and the network's draws start from the same streams.
func Shrink(spec CheckSpec, m CheckMode, s Schedule, r *CheckResult) (Schedule, *CheckResult, error) {
	for changed := true; changed; {
		changed = false
		for i := range s.Faults {
			t := s
			t.Faults = slices.Delete(slices.Clone(s.Faults), i, i+1)
			rt, err := Check(spec, m, t)
			if err != nil {
				return s, r, err
			}
			if rt.Failed() {
				s, r, changed = t, rt, true
				break
			}
		}
	}
	return s, r, nil
}
