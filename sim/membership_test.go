package sim

import (
	"strings"
	"testing"
	"time"

	rlcheck "github.com/ringlimit/ringlimit/check"
)

// viewOf renders node i's view, "-" for a node that is down.
func viewOf(c *Cluster, i int) string {
	s := c.nodes[i]
	if !s.running() {
		return "-"
	}
	return strings.Join(c.view(s), ",")
}

// quiet returns a small scenario with little traffic and exact gossip
// delays (no spread), for stepping through membership.
func quiet(nodes int, evs ...Event) Scenario {
	return Scenario{Name: "t", Nodes: nodes, Duration: sec(20),
		Workload:   Workload{Rate: 50, Keys: 10},
		Membership: Membership{Detect: sec(3), Notify: sec(0.2), Spread: -1},
		Events:     evs,
	}.WithDefaults()
}

func TestMembershipViews(t *testing.T) {
	type check struct {
		at    Duration
		views []string // by node index
	}
	all4 := []string{"n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4"}
	tests := []struct {
		name   string
		events []Event
		checks []check
	}{
		{"partition detected after Detect, healed after Notify",
			[]Event{{At: sec(1), Action: "partition", Split: 0.5}, {At: sec(10), Action: "heal"}},
			[]check{
				{sec(3.9), all4},
				{sec(4.1), []string{"n1,n2", "n1,n2", "n3,n4", "n3,n4"}},
				{sec(10.1), []string{"n1,n2", "n1,n2", "n3,n4", "n3,n4"}},
				{sec(10.3), all4},
			}},
		{"isolated node sees only itself",
			[]Event{{At: sec(1), Action: "isolate", Node: "n2"}},
			[]check{{sec(4.1), []string{"n1,n3,n4", "n2", "n1,n3,n4", "n1,n3,n4"}}}},
		{"one-way cut is bridged by indirect probes",
			[]Event{{At: sec(1), Action: "cut", From: "n1", To: "n2"}},
			[]check{{sec(5), all4}}},
		{"flapping faster than detection changes nothing",
			[]Event{{At: sec(1), Action: "flap", Node: "n3", Every: sec(1), Until: sec(9)}},
			[]check{{sec(4.5), all4}, {sec(9.5), all4}}},
		{"crash detected after Detect; restart seen after Notify",
			[]Event{{At: sec(1), Action: "restart", Node: "n4", Down: sec(5)}},
			[]check{
				{sec(3.9), []string{"n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4", "-"}},
				{sec(4.1), []string{"n1,n2,n3", "n1,n2,n3", "n1,n2,n3", "-"}},
				{sec(6.1), []string{"n1,n2,n3", "n1,n2,n3", "n1,n2,n3", "n1,n2,n3,n4"}},
				{sec(6.3), all4},
			}},
		{"graceful leave seen after Notify",
			[]Event{{At: sec(1), Action: "leave", Node: "n1"}},
			[]check{{sec(1.1), all4}, {sec(1.3), []string{"-", "n2,n3,n4", "n2,n3,n4", "n2,n3,n4"}}}},
		{"join",
			[]Event{{At: sec(1), Action: "join"}},
			[]check{{sec(1.1), []string{"n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4", "n1,n2,n3,n4,n5"}},
				{sec(1.3), []string{"n1,n2,n3,n4,n5", "n1,n2,n3,n4,n5", "n1,n2,n3,n4,n5", "n1,n2,n3,n4,n5", "n1,n2,n3,n4,n5"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCluster(quiet(4, tt.events...), Variant{Mode: rlcheck.ModeCached}, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, ck := range tt.checks {
				c.runUntil(int64(ck.at))
				for i, want := range ck.views {
					if got := viewOf(c, i); got != want {
						t.Errorf("at %v, %s's view: got %s, want %s", ck.at, nodeName(i), got, want)
					}
				}
			}
		})
	}
}

func TestNetworkLinks(t *testing.T) {
	spec := Scenario{Network: Network{Latency: Duration(time.Millisecond), Jitter: Duration(time.Millisecond),
		Links: []Link{{From: "n1", To: "n2", Latency: Duration(20 * time.Millisecond)}, {From: "*", To: "n3", Loss: 0.5}}}}.WithDefaults()
	c, err := NewCluster(spec, Variant{Mode: rlcheck.ModeCached}, 7)
	if err != nil {
		t.Fatal(err)
	}
	nw, rng := c.net, c.nodes[0].rng
	if got, want := nw.minLatency(), int64(time.Millisecond); got != want {
		t.Errorf("minLatency %v, want %v", time.Duration(got), time.Duration(want))
	}
	for range 1000 {
		if d := nw.delay(rng, 0, 1); d < int64(20*time.Millisecond) || d >= int64(21*time.Millisecond) {
			t.Fatalf("n1->n2 delay %v not in [20ms, 21ms)", time.Duration(d))
		}
		if d := nw.delay(rng, 1, 0); d < int64(time.Millisecond) || d >= int64(2*time.Millisecond) {
			t.Fatalf("n2->n1 delay %v not in [1ms, 2ms)", time.Duration(d))
		}
	}
	lost := 0
	for range 1000 {
		if nw.delay(rng, 0, 2) < 0 {
			lost++
		}
	}
	if lost < 400 || lost > 600 {
		t.Errorf("n1->n3 with loss 0.5: %d of 1000 lost", lost)
	}
	nw.setCut(0, 1, 1)
	nw.setCut(0, 1, 1)
	nw.setCut(0, 1, -1)
	if nw.connected(0, 1) || !nw.connected(1, 0) {
		t.Errorf("after two cuts and one restore: got connected %v/%v, want false/true", nw.connected(0, 1), nw.connected(1, 0))
	}
	nw.heal()
	if !nw.connected(0, 1) {
		t.Errorf("heal left n1->n2 cut")
	}
}

func TestLoadBalancerRoutesAroundDownNodes(t *testing.T) {
	c, err := NewCluster(quiet(3), Variant{Mode: rlcheck.ModeCached}, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.stopNode(1)
	counts := make([]int, 3)
	for range 3000 {
		counts[c.wl.node(c.nodes, c.wl.rng.Float64())]++
	}
	if counts[1] != 0 || counts[2] < 1800 || counts[0] < 800 {
		t.Errorf("with n2 down: got counts %v, want n2's share on n3", counts)
	}
	c.stopNode(0)
	c.stopNode(2)
	if got := c.wl.node(c.nodes, 0.5); got != -1 {
		t.Errorf("all down: got node %d, want -1", got)
	}
}

func TestWorkloadBurstsAndHits(t *testing.T) {
	w := Workload{Rate: 1000, On: sec(1), Off: sec(2), MultiHit: 0.5, MaxHits: 4}
	s := Scenario{Workload: w}.WithDefaults()
	c, err := NewCluster(s, Variant{Mode: rlcheck.ModeCached}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 5000 {
		at := c.wl.next()
		if at < last {
			t.Fatalf("arrival at %v before the previous %v", time.Duration(at), time.Duration(last))
		}
		if at%int64(3*time.Second) >= int64(time.Second) {
			t.Fatalf("arrival at %v falls in an off period", time.Duration(at))
		}
		last = at
		if h := c.wl.hits(); h < 1 || h > 4 {
			t.Fatalf("hits %d not in [1, 4]", h)
		}
	}
}

// TestLeaveAcrossACutIsAFailure: a member cut off from a node when that
// node's leave is announced (it cannot reach it, directly or through a
// third member) never hears the leave and sees the node fail, as
// memberlist reports a member whose leaving metadata it never saw; the
// members on the leaver's side see it leave. Before, every member was
// told of the leave (n3 and n4 counted only n2 failed).
func TestLeaveAcrossACutIsAFailure(t *testing.T) {
	c, err := NewCluster(quiet(4,
		Event{At: sec(1), Action: "partition", Groups: [][]string{{"n1", "n2"}, {"n3", "n4"}}},
		Event{At: sec(1.5), Action: "leave", Node: "n1"},
	), Variant{Mode: rlcheck.ModeCached}, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.runUntil(int64(sec(8)))
	if s := c.nodes[0]; s.running() {
		t.Fatalf("n1 still running at 8s: its leave did not end")
	}
	for i, want := range []string{"-", "n3,n4", "n1,n2", "n1,n2"} {
		s := c.nodes[i]
		got := "-"
		if s.running() {
			got = strings.Join(c.failedView(s), ",")
		}
		if got != want {
			t.Errorf("at 8s, %s's failed members: got %s, want %s", s.name, got, want)
		}
	}
}
