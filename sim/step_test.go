package sim

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit/check"
)

// TestStepperPanicReachesCaller: a panic in a Node under test, on whichever
// goroutine steps it, must reach the goroutine that runs the simulation,
// and the workers must still stop.
func TestStepperPanicReachesCaller(t *testing.T) {
	for _, bad := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("node", bad), func(t *testing.T) {
			c, err := NewCluster(quiet(3), Variant{Mode: check.ModeLocal}, 1)
			if err != nil {
				t.Fatal(err)
			}
			st := newStepper(c, 2)
			defer st.stop()
			s := c.nodes[bad]
			s.n = nil // a request handed to it panics
			s.arrivals = append(s.arrivals, s.acquire())
			defer func() {
				if recover() == nil {
					t.Fatal("the panic of a node was lost")
				}
			}()
			st.run(c.nodes, 1)
		})
	}
}

// TestStepperRunsEveryNode: every node with events in a window is stepped
// exactly once per window, however the workers share them out.
func TestStepperRunsEveryNode(t *testing.T) {
	c, err := NewCluster(quiet(5), Variant{Mode: check.ModeLocal}, 1)
	if err != nil {
		t.Fatal(err)
	}
	st := newStepper(c, 3)
	defer st.stop()
	for w := range 200 {
		for _, s := range c.nodes {
			p := s.acquire()
			p.at, p.reqs[0] = int64(w), check.Request{Key: "k", Hits: 1, Limit: c.limit}
			s.arrivals = append(s.arrivals, p)
		}
		st.run(c.nodes, int64(w)+1)
		for _, s := range c.nodes {
			if len(s.arrivals) != 0 || len(s.decisions) != w+1 {
				t.Fatalf("window %d: node %s has %d requests left and %d answers, want 0 and %d",
					w, s.name, len(s.arrivals), len(s.decisions), w+1)
			}
		}
	}
}
