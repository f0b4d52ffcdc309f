package sync

import (
	"testing"

	"github.com/ringlimit/ringlimit/check"
)

// TestReroutedCheckLeavesPoolClean: a forwarded check (cached mode, a
// key too small for shares) whose owner leaves while this node's new ring
// gives the key to itself is rerouted here and decided at once, and its
// callItem goes back to the node's pool as the call finishes. reroute marked the check rerouted
// after that, in the pooled item: the next forwarded check given that
// item started marked, and its own "not owner" went by the partition
// policy (fail-open: admitted) instead of to the key's owner.
func TestReroutedCheckLeavesPoolClean(t *testing.T) {
	before, after := []string{"a", "b", "c", "d"}, []string{"a", "b", "c"}
	key := keyMoving(t, "d", "a", before, after)
	nw := newTestNet(t, func(c *Config) { c.HandoffWait = 0 }, before...)
	a := nw.nodes["a"]
	p := checkAsync(a, nw.now, check.Request{Key: key, Hits: 1, Limit: perHour(2), Mode: check.ModeCached})
	if p.done {
		t.Fatal("a decided a key d owns without asking d")
	}
	nw.setMembers(after, "a", "b", "c") // d left: its key moves to a
	nw.settle()
	if !p.done || p.resps[0].Err != nil || !p.resps[0].Allowed || p.resps[0].Owner != "a" {
		t.Fatalf("the check rerouted to a answered %+v (done %v), want admitted by a", p.resps[0], p.done)
	}
	if len(a.calls.free) == 0 {
		t.Fatal("no callItem went back to a's pool: the test no longer covers the reroute's")
	}
	for i, x := range a.calls.free {
		if x.it.rerouted || x.it.here || x.c.n != 0 {
			t.Errorf("pooled callItem %d is not zero: rerouted %v, here %v, answers due %d", i, x.it.rerouted, x.it.here, x.c.n)
		}
	}
}
