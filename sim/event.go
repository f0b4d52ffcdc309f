package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Event is one entry of a scenario's timeline.
//
// Node selectors (Node, From, To) name a node ("n3"), or say "owner" (the
// owner, on the ring of the nodes up at that instant, of the hottest key,
// key 0) or "random" (a node drawn from the seeded generator). To also takes
// "*" (every other node).
type Event struct {
	// At is when the event fires, from the start of the run.
	At Duration `json:"at"`
	// Action is one of:
	//   - "partition": cut every link, both ways, between Groups (lists of
	//     node names; nodes in no group form one more group), or, without
	//     Groups, between the first Split of the nodes (default 0.5) and the
	//     rest.
	//   - "isolate": cut Node from every other node, both ways.
	//   - "cut": cut the one-way link From -> To (asymmetric partition).
	//   - "flap": isolate Node for Every, reconnect it for Every, and again,
	//     until Until.
	//   - "heal": restore every link.
	//   - "crash": Node stops at once, without hand-off.
	//   - "restart": Node stops (after a graceful leave when Graceful) and
	//     starts again Down later, with a new incarnation and empty state.
	//   - "leave": Node leaves gracefully (hand-off) and does not come back.
	//   - "join": a new node joins.
	//   - "rolling-restart": every initial node in turn, Every apart, is
	//     restarted as by "restart".
	//   - "churn": every Every until Until, a random node leaves (crashing and
	//     leaving gracefully in turn) and a new node joins Down later.
	//   - "clock": from then on Node's clock reads Offset ahead of the
	//     simulation's (behind if negative): the time it is given, not the
	//     time its messages take. At 0 the node never saw another clock; later,
	//     the change is a step of its clock (backwards if Offset decreased).
	Action string `json:"action"`
	// Node, From and To select nodes; see the type's comment.
	Node string `json:"node,omitempty"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Groups and Split describe a partition.
	Groups [][]string `json:"groups,omitempty"`
	Split  float64    `json:"split,omitempty"`
	// Every is the period of flap, rolling-restart and churn.
	Every Duration `json:"every,omitempty"`
	// Until ends flap and churn.
	Until Duration `json:"until,omitempty"`
	// Down is how long a restarted node stays down; for churn, the time
	// between a leave and the next join. Default 2s.
	Down Duration `json:"down,omitempty"`
	// Graceful makes restart and rolling-restart leave gracefully first.
	Graceful bool `json:"graceful,omitempty"`
	// Offset is the clock offset a "clock" event gives Node.
	Offset Duration `json:"offset,omitempty"`
}

// actions lists the actions of Event.
func actions() []string {
	return []string{"partition", "isolate", "cut", "flap", "heal", "crash", "restart", "leave",
		"join", "rolling-restart", "churn", "clock"}
}

// isCut reports whether the action leaves links cut until a heal.
func isCut(action string) bool {
	return action == "partition" || action == "isolate" || action == "cut"
}

// validSelector reports whether s selects a node of a cluster that starts
// with n nodes (later joiners are named beyond n and accepted too).
func validSelector(s string, star bool) bool {
	switch {
	case s == "owner" || s == "random":
		return true
	case s == "*" || s == "":
		return star
	}
	i, ok := nodeIndex(s)
	return ok && i >= 0
}

// nodeName returns the name of the node with index i: "n1" for 0.
func nodeName(i int) string { return "n" + strconv.Itoa(i+1) }

// nodeIndex parses a node name.
func nodeIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "n")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 1 {
		return 0, false
	}
	return i - 1, true
}

func (e Event) validate(s *Scenario) error {
	if !slices.Contains(actions(), e.Action) {
		return fmt.Errorf("unknown action %q (want one of %s)", e.Action, strings.Join(actions(), ", "))
	}
	if e.At < 0 || e.At > s.Duration {
		return fmt.Errorf("%s at %v: outside the run [0, %v]", e.Action, e.At, s.Duration)
	}
	switch e.Action {
	case "isolate", "flap", "crash", "restart", "leave", "clock":
		if !validSelector(e.Node, false) {
			return fmt.Errorf("%s: bad node %q", e.Action, e.Node)
		}
	case "cut":
		if !validSelector(e.From, false) || !validSelector(e.To, true) {
			return fmt.Errorf("cut: bad from %q or to %q", e.From, e.To)
		}
	case "partition":
		if e.Split < 0 || e.Split >= 1 {
			return fmt.Errorf("partition: split %v not in [0, 1)", e.Split)
		}
		for _, g := range e.Groups {
			for _, name := range g {
				if _, ok := nodeIndex(name); !ok {
					return fmt.Errorf("partition: bad node %q", name)
				}
			}
		}
	}
	switch e.Action {
	case "flap", "rolling-restart", "churn":
		if e.Every <= 0 {
			return fmt.Errorf("%s: every must be positive", e.Action)
		}
	}
	if (e.Action == "flap" || e.Action == "churn") && e.Until <= e.At {
		return fmt.Errorf("%s: until %v must be after at %v", e.Action, e.Until, e.At)
	}
	if e.Down < 0 {
		return fmt.Errorf("%s: down must not be negative", e.Action)
	}
	return nil
}

// Interval is a span of simulated time from the start of the run.
type Interval struct {
	// Start and End bound the span, from the start of the run: [Start, End).
	Start Duration `json:"start"`
	End   Duration `json:"end"`
}

// Disruption returns the span from the first event to the last recovery (a
// heal, the end of flapping, a restarted node's return, the last churn), or
// ok false for a scenario without events. A cut that is never healed lasts
// to the end of the run.
func (s Scenario) Disruption() (iv Interval, ok bool) {
	if len(s.Events) == 0 {
		return Interval{}, false
	}
	evs := slices.Clone(s.Events)
	slices.SortStableFunc(evs, func(a, b Event) int { return int(a.At - b.At) })
	iv.Start = evs[0].At
	open := false
	for _, e := range evs {
		end := e.At
		switch {
		case isCut(e.Action):
			open = true
		case e.Action == "heal":
			open = false
		case e.Action == "flap":
			end = e.Until
		case e.Action == "restart":
			end = e.At + e.Down
		case e.Action == "rolling-restart":
			end = e.At + Duration(s.Nodes-1)*e.Every + e.Down
		case e.Action == "churn":
			end = e.Until + e.Down
		}
		iv.End = max(iv.End, end)
	}
	if open {
		iv.End = s.Duration
	}
	iv.End = min(iv.End, s.Duration)
	return iv, true
}
