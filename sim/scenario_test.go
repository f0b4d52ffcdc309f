package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStandardScenariosAreValid(t *testing.T) {
	for _, name := range Names() {
		s, err := Named(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if s.Description == "" {
			t.Errorf("%s: no description", name)
		}
	}
	if _, err := Named("nope"); !errors.Is(err, ErrScenario) {
		t.Errorf("Named(nope): got %v, want ErrScenario", err)
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name, json string
		wantErr    string // substring; empty: valid
	}{
		{"minimal", `{"name": "x"}`, ""},
		{"full", `{"name": "x", "nodes": 3, "duration": "10s", "window": "500ms",
			"limit": {"algorithm": "gcra", "limit": 100, "period": "1s"},
			"workload": {"rate": 2000, "keys": 100, "dist": "hot", "hot_share": 0.3, "on": "1s", "off": "1s", "weights": [1, 2, 3]},
			"network": {"latency": "2ms", "jitter": "1ms", "jitter_dist": "exp", "loss": 0.01,
				"links": [{"from": "n1", "to": "*", "latency": "30ms"}]},
			"membership": {"detect": "5s", "static": true},
			"sync": {"policy": "fail-closed", "flush": "50ms"},
			"events": [{"at": "2s", "action": "cut", "from": "n1", "to": "n2"}, {"at": "5s", "action": "heal"}]}`, ""},
		{"unknown field", `{"name": "x", "nodse": 3}`, "unknown field"},
		{"bad duration", `{"name": "x", "duration": "soon"}`, "invalid duration"},
		{"bad algorithm", `{"name": "x", "limit": {"algorithm": "magic"}}`, "unknown algorithm"},
		{"bad dist", `{"name": "x", "workload": {"dist": "pareto"}}`, "dist"},
		{"weights count", `{"name": "x", "nodes": 2, "workload": {"weights": [1]}}`, "weights"},
		{"bad action", `{"name": "x", "events": [{"at": "1s", "action": "explode"}]}`, "unknown action"},
		{"event after end", `{"name": "x", "duration": "10s", "events": [{"at": "11s", "action": "heal"}]}`, "outside"},
		{"flap without until", `{"name": "x", "events": [{"at": "1s", "action": "flap", "node": "n1", "every": "1s"}]}`, "until"},
		{"bad node", `{"name": "x", "events": [{"at": "1s", "action": "crash", "node": "bob"}]}`, "bad node"},
		{"bad policy", `{"name": "x", "sync": {"policy": "maybe"}}`, "policy"},
		{"loss 1", `{"name": "x", "network": {"loss": 1}}`, "loss"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(strings.NewReader(tt.json))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			case tt.wantErr != "" && !errors.Is(err, ErrScenario):
				t.Fatalf("got %v, want it to wrap ErrScenario", err)
			}
		})
	}
}

func TestDisruption(t *testing.T) {
	s := func(evs ...Event) Scenario { return Scenario{Nodes: 5, Duration: sec(60), Events: evs}.WithDefaults() }
	tests := []struct {
		name string
		sc   Scenario
		want Interval
		ok   bool
	}{
		{"none", s(), Interval{}, false},
		{"partition healed", s(Event{At: sec(20), Action: "partition"}, Event{At: sec(40), Action: "heal"}), Interval{sec(20), sec(40)}, true},
		{"never healed", s(Event{At: sec(20), Action: "isolate", Node: "n1"}), Interval{sec(20), sec(60)}, true},
		{"flap", s(Event{At: sec(20), Action: "flap", Node: "n1", Every: sec(1), Until: sec(30)}), Interval{sec(20), sec(30)}, true},
		{"restart", s(Event{At: sec(10), Action: "restart", Node: "n1", Down: sec(3)}), Interval{sec(10), sec(13)}, true},
		{"rolling", s(Event{At: sec(10), Action: "rolling-restart", Every: sec(5), Down: sec(2)}), Interval{sec(10), sec(32)}, true},
		{"churn", s(Event{At: sec(10), Action: "churn", Every: sec(5), Until: sec(30), Down: sec(2)}), Interval{sec(10), sec(32)}, true},
	}
	for _, tt := range tests {
		got, ok := tt.sc.Disruption()
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %v %v, want %v %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestScaleStretchesTimeline(t *testing.T) {
	s, err := Named("partition-half")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Scale(7, 30*time.Second)
	if got.Nodes != 7 || got.Duration != sec(30) || got.Events[0].At != sec(10) || got.Events[1].At != sec(20) {
		t.Fatalf("got nodes %d duration %v events %+v", got.Nodes, got.Duration, got.Events)
	}
	if s.Events[0].At != sec(20) {
		t.Fatalf("Scale changed the original's events: %+v", s.Events)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseVariants(t *testing.T) {
	vs, err := ParseVariants("local,cached,leased", "50ms,200ms")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	want := "local cached/50ms cached/200ms leased/50ms leased/200ms"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q, want %q", strings.Join(got, " "), want)
	}
	for _, bad := range [][2]string{{"fast", ""}, {"default", ""}, {"cached", "-1s"}, {"cached", "soon"}} {
		if _, err := ParseVariants(bad[0], bad[1]); err == nil {
			t.Errorf("ParseVariants(%q, %q): no error", bad[0], bad[1])
		}
	}
	if vs, _ := ParseVariants("", ""); len(vs) != 4 {
		t.Errorf("default variants: got %d, want 4", len(vs))
	}
}
