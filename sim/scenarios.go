package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

func sec(n float64) Duration { return Duration(n * float64(time.Second)) }

// standard returns the standard scenarios, defaults not yet filled in. Every
// one runs 60s of zipf traffic (10000 req/s over 10000 keys, key 0 about 15%
// of it) against a token bucket of 500/s on 5 nodes unless it says otherwise;
// the disruptions sit in the middle third so that before, during and after
// are each about 20s long. The last three are small limits on keys seen
// rarely, with no fault.
func standard() []Scenario {
	return []Scenario{
		{Name: "healthy", Description: "no faults: the steady-state drift of each mode"},
		{Name: "partition-half", Description: "the cluster splits in two halves at 20s and heals at 40s",
			Events: []Event{{At: sec(20), Action: "partition", Split: 0.5}, {At: sec(40), Action: "heal"}}},
		{Name: "isolate-owner", Description: "the owner of the hottest key is cut off at 20s and reconnected at 40s",
			Events: []Event{{At: sec(20), Action: "isolate", Node: "owner"}, {At: sec(40), Action: "heal"}}},
		{Name: "flapping", Description: "the owner of the hottest key loses and regains its links every second from 20s to 40s",
			Events: []Event{{At: sec(20), Action: "flap", Node: "owner", Every: sec(1), Until: sec(40)}}},
		{Name: "rolling-restart", Description: "from 15s each node in turn leaves gracefully, is down 2s and restarts, 8s apart",
			Events: []Event{{At: sec(15), Action: "rolling-restart", Every: sec(8), Down: sec(2), Graceful: true}}},
		{Name: "hot-key", Description: "half the traffic on one key, through a skewed load balancer",
			Workload: Workload{Dist: "hot", HotShare: 0.5, Skew: 1}},
		{Name: "churn", Description: "from 15s to 45s a node leaves every 5s (crash and graceful in turn) and a new one joins 2s later",
			Events: []Event{{At: sec(15), Action: "churn", Every: sec(5), Until: sec(45), Down: sec(2)}}},
		// Workloads people run (issue #15): many keys of small limits, each
		// seen rarely, beside a few hot ones (zipf: the first keys are the
		// brute-force attempts, the scripts gone wrong).
		{Name: "login-5min", Description: "per-user logins, 5 a minute, 10,000 users at 200 requests/s on 3 nodes: most users seen once or twice",
			Nodes: 3, Limit: LimitSpec{Limit: 5, Period: Duration(time.Minute)},
			Workload: Workload{Rate: 200, Keys: 10_000, MultiHit: -1}},
		{Name: "otp-1min", Description: "one-time passwords, 1 a minute, 20,000 users at 100 requests/s, uniform, on 5 nodes: a key is seen 0.3 times a minute",
			Nodes: 5, Limit: LimitSpec{Limit: 1, Period: Duration(time.Minute)},
			Workload: Workload{Rate: 100, Keys: 20_000, Dist: "uniform", MultiHit: -1}},
		{Name: "apikey-100h", Description: "per-API-key quotas, 100 an hour, 1,000 keys at 100 requests/s on 10 nodes: a few keys spend their hour, most are seen rarely",
			Nodes: 10, Limit: LimitSpec{Limit: 100, Period: Duration(time.Hour)},
			Workload: Workload{Rate: 100, Keys: 1000}},
	}
}

// Names returns the names of the standard scenarios, in the order of the
// comparison table.
func Names() []string {
	var names []string
	for _, s := range standard() {
		names = append(names, s.Name)
	}
	return names
}

// Named returns the standard scenario called name, with its defaults filled
// in.
func Named(name string) (Scenario, error) {
	i := slices.IndexFunc(standard(), func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, fmt.Errorf("%w: no scenario named %q (have %s)", ErrScenario, name, strings.Join(Names(), ", "))
	}
	s := standard()[i].WithDefaults()
	return s, s.Validate()
}

// Scale returns s with nodes and duration changed, when not zero, and its
// timeline stretched in proportion to the new duration, so that a scenario
// written for 60s keeps its before, during and after thirds at any length.
// A rolling restart is tightened, if need be, to reach every node before the
// last fifth of the run.
func (s Scenario) Scale(nodes int, duration time.Duration) Scenario {
	if nodes > 0 {
		s.Nodes = nodes
		if len(s.Workload.Weights) != 0 && len(s.Workload.Weights) != nodes {
			s.Workload.Weights = nil
		}
	}
	if duration > 0 && Duration(duration) != s.Duration {
		f := float64(duration) / float64(s.Duration)
		scale := func(d Duration) Duration { return Duration(float64(d) * f) }
		s.Events = slices.Clone(s.Events)
		for i := range s.Events {
			e := &s.Events[i]
			e.At, e.Until = scale(e.At), scale(e.Until)
			if e.Action == "rolling-restart" {
				e.Every = scale(e.Every)
			}
		}
		s.Duration = Duration(duration)
	}
	// A rolling restart must reach every node before the last fifth of the run.
	for i := range s.Events {
		e := &s.Events[i]
		if e.Action != "rolling-restart" || s.Nodes < 2 {
			continue
		}
		room := s.Duration*4/5 - e.At - e.Down
		if Duration(s.Nodes-1)*e.Every > room && room > 0 {
			e.Every = room / Duration(s.Nodes-1)
		}
	}
	return s
}
