package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestTakenOverOwnerNotEchoedBeforeTakerSeesIt reproduces the fault
// checker's owner seed 535 (-notify 2.132s) at the core, 3 members: the
// owner x of a key, cut off, counts the key's backup holder tk failed
// while x and the third member m, with tk, count x failed: x, with m, is a
// majority of 3 in its own view and keeps the key; tk takes it over,
// confirmed by m, which withholds its echoes from x for tk's sake (x has
// no lease: its checks go by the policy). The x-m link heals; m and x see
// each other back (all three members, in their views) while tk still
// counts x failed and holds the key. m's new peer for x started afresh,
// unwithheld: m echoed x, whose lease let it decide the key on its own
// state, which knew nothing of what tk admitted (on main: 50 before the
// cut, 56 after it, 8 of them through x: 106 on a key of 100). Now m
// keeps withholding from x while tk, live to m, still names it
// (ownerlease.go, newPeer), until tk sees x back, hands the key back and
// lifts it: 50 + 40, none through x.
func TestTakenOverOwnerNotEchoedBeforeTakerSeesIt(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }, all...)
	key := keyOwnedBy(t, "n1", all...)
	x := "n1"
	tk := ownerOn(t, key, without(all, x)...)
	m := without(all, x, tk)[0]
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{x}, key, l, 50*5*time.Millisecond, nil)
	if first.admitted != 50 {
		t.Fatalf("admitted %d before the cut, want 50", first.admitted)
	}
	nw.run(time.Second) // backups go out
	nw.isolate(x)
	events := map[time.Duration]func(){
		0: func() {
			nw.nodes[x].SetMembership(nw.now, []string{x, m}, []string{tk})
			for _, o := range []string{m, tk} {
				nw.nodes[o].SetMembership(nw.now, []string{m, tk}, []string{x})
			}
		},
		100 * time.Millisecond: func() { // the x-m link heals
			delete(nw.cut, [2]string{x, m})
			delete(nw.cut, [2]string{m, x})
		},
		4 * time.Second: func() { // m and x see each other, and tk, back
			nw.nodes[m].SetMembership(nw.now, all, nil)
			nw.nodes[x].SetMembership(nw.now, all, nil)
		},
		6 * time.Second: func() { // tk sees x back
			nw.heal()
			nw.nodes[tk].SetMembership(nw.now, all, nil)
		},
	}
	res := runOwnerLoad(t, nw, all, key, l, 8*time.Second, events)
	total := first.admitted + res.admitted
	t.Logf("x %s, taker %s, third %s: admitted %d before the cut, %d after it (by the client's node %v, %d degraded)",
		x, tk, m, first.admitted, res.admitted, res.byNode, res.degraded)
	if total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}
