package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestWithholdingLiftedAfterNamerReturns: n3 sees n1 fail and asks n2 for
// an echo naming n1, so n2 withholds its echoes from n1 for n3's sake;
// then n2 sees n3 fail, and n3 sees n1 back: n3's request naming nobody
// reaches n2 while n3 is no member there, and is dropped. n2 takes n3
// back. n3 then crashes for good: n1 and n2, a majority, see it fail,
// and n1's lease needs n2's echo, which n2 still withheld: every check of
// n1's key went by the policy (fail-closed: 800 of 800 degraded, none
// admitted, in 2 s), for as long as n3 stayed down. Now n3 sends its
// lifting request again every RequestTimeout until n2 echoes it
// (ownerlease.go, tickLift): 800 of 800 admitted, none degraded.
func TestWithholdingLiftedAfterNamerReturns(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }, all...)
	key := keyOwnedBy(t, "n1", all...)
	l := perHour(1000)
	nw.nodes["n3"].SetMembership(nw.now, []string{"n2", "n3"}, []string{"n1"})
	nw.run(50 * time.Millisecond)
	nw.nodes["n2"].SetMembership(nw.now, []string{"n1", "n2"}, []string{"n3"})
	nw.run(50 * time.Millisecond)
	nw.nodes["n3"].SetMembership(nw.now, all, nil)
	nw.run(50 * time.Millisecond)
	nw.nodes["n2"].SetMembership(nw.now, all, nil)
	nw.run(time.Second)
	nw.isolate("n3")
	nw.run(time.Second)
	for _, m := range []string{"n1", "n2"} {
		nw.nodes[m].SetMembership(nw.now, []string{"n1", "n2"}, []string{"n3"})
	}
	nw.run(3 * time.Second)
	res := runOwnerLoad(t, nw, []string{"n1", "n2"}, key, l, 2*time.Second, nil)
	t.Logf("n3 down, n1 and n2 up: %d of %d checks admitted, %d degraded; n2 withholds from n1 for %v",
		res.admitted, res.checks, res.degraded, nw.nodes["n2"].view.peers["n1"].withheldBy)
	if res.degraded > 0 {
		t.Errorf("%d of %d checks of n1's key went by the policy with n1 and n2 up, want none", res.degraded, res.checks)
	}
}
