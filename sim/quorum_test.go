package sim

import (
	"slices"
	"testing"

	"github.com/ringlimit/ringlimit/check"
)

// TestMembershipFailedVsLeft: the simulator tells each Node which departed
// members failed (a crash or a cut) and which left gracefully, so the
// Node's quorum rule runs as on a real node: a node cut off is a minority,
// the others a majority; a graceful leave shrinks the baseline at once.
func TestMembershipFailedVsLeft(t *testing.T) {
	t.Run("isolated node is a minority", func(t *testing.T) {
		c, err := NewCluster(quiet(4, Event{At: sec(1), Action: "isolate", Node: "n2"}), Variant{Mode: check.ModeCached}, 1)
		if err != nil {
			t.Fatal(err)
		}
		c.runUntil(int64(sec(4.1)))
		if got := c.failedView(c.nodes[1]); !slices.Equal(got, []string{"n1", "n3", "n4"}) {
			t.Errorf("n2 reports failed %v, want n1, n3, n4", got)
		}
		if q := c.nodes[1].n.Quorum(); !q.Minority || q.Live != 1 || q.Baseline != 4 {
			t.Errorf("n2's quorum %+v, want a minority, 1 of 4", q)
		}
		if q := c.nodes[0].n.Quorum(); q.Minority || q.Live != 3 || q.Baseline != 4 {
			t.Errorf("n1's quorum %+v, want a majority, 3 of 4", q)
		}
	})
	t.Run("graceful leave is not a failure", func(t *testing.T) {
		c, err := NewCluster(quiet(4, Event{At: sec(1), Action: "leave", Node: "n1"}), Variant{Mode: check.ModeCached}, 1)
		if err != nil {
			t.Fatal(err)
		}
		c.runUntil(int64(sec(10)))
		for _, s := range c.nodes[1:] {
			if f := c.failedView(s); len(f) != 0 {
				t.Errorf("%s reports failed %v after n1 left gracefully", s.name, f)
			}
			if q := s.n.Quorum(); q.Baseline != 3 {
				t.Errorf("%s's quorum %+v, want a baseline of 3", s.name, q)
			}
		}
	})
}
