package sim

import (
	"fmt"
	"math"
	"runtime"
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

// TestStepperWaitsForItsWindow: the caller, parked while the workers step
// a window, returns only when they are done with that window, even when
// the wake comes from the worker that finished the window before: that
// worker took busy to 0, the caller saw it and went on to the next window
// without parking, and the worker cleared the parked flag of the next
// window (and woke the caller) only then. Before the fix run returned on
// that wake, with the worker still to step its window: a data race on the
// window's nodes, which TestWorkersDoNotChangeResults hit under -race.
func TestStepperWaitsForItsWindow(t *testing.T) {
	c, err := NewCluster(quiet(3), Variant{Mode: check.ModeLocal}, 1)
	if err != nil {
		t.Fatal(err)
	}
	st := newStepper(c, 1)
	defer st.stop()
	woke, hold := make(chan struct{}), make(chan struct{})
	st.lastDone = func(window uint64, sent bool) {
		switch {
		case window == 1 && !sent:
			for st.window.Load() != 2 || !st.parked.Load() {
				runtime.Gosched() // until the caller parks in window 2
			}
		case window == 1 && sent:
			close(woke)
			<-hold
		}
	}
	st.spin = math.MaxInt // window 1: the caller sees the worker finish, never parks
	st.run(nil, 1)
	st.spin = 1 // window 2: the caller parks at once
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		st.run(nil, 2)
	}()
	// The worker of window 1 woke the caller of window 2; that caller must
	// park again (the worker has not stepped window 2), not return.
	<-woke
	for !st.parked.Load() {
		select {
		case <-returned:
			close(hold)
			t.Fatalf("window 2: run returned with %d worker(s) still to step it", st.busy.Load())
		default:
			runtime.Gosched()
		}
	}
	close(hold)
	<-returned
	if n := st.busy.Load(); n != 0 {
		t.Fatalf("window 2: run returned with %d worker(s) still stepping", n)
	}
}
