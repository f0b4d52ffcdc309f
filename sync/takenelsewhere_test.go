package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestTakeoverThroughInterimOwnerConfirmed: the fault checker's owner seed
// 910 (-notify 2.5s) at the core. 5 nodes split silently {t, x} | {o, y,
// z} while y and t check the key (60 admitted before the cut); o owns the
// key, and keeps it on the majority side. t sees o fail
// first (4 of 5 live in its view): on the ring without o the key is x's,
// a takeover by x that x never makes (x's own view never gives it the
// key). 100 ms later t sees y fail too (3 of 5 live, still a majority in
// its view), and on the ring {t, x, z} the key is t's: a move from x, a
// live member, not a takeover. On main t then probed x, took x's "not
// owner" (x's ring gives the key to t) as the hand-off done, and decided
// the key as owner on its ownership lease (echoes from before the cut),
// with no confirmation of the takeover from o, while o went on deciding
// it with y and z: two owners spending one bucket. Now a partition that
// another member took over from a failed one in this node's view is a
// takeover from that failed member when it comes here (takenElsewhere):
// t decides the key only once a majority confirms it, which a minority
// never does. Owner and leased mode, fail-closed, a key of 100 an hour:
// on main 130 (owner) and 116 (leased) admitted, t's checks among them,
// now 100 and 100.
func TestTakeoverThroughInterimOwnerConfirmed(t *testing.T) {
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeLeased} {
		t.Run(mode.String(), func(t *testing.T) { takeoverThroughInterimOwner(t, mode) })
	}
}

func takeoverThroughInterimOwner(t *testing.T, mode check.Mode) {
	all := []string{"n1", "n2", "n3", "n4", "n5"}
	var key, o, x, y, tk string
	for i := 0; key == "" && i < 10000; i++ {
		k := fmt.Sprintf("key-%d", i)
		own := ownerOn(t, k, all...)
		interim := ownerOn(t, k, without(all, own)...)
		for _, cand := range without(all, own, interim) {
			if taker := ownerOn(t, k, without(all, own, cand)...); taker != interim {
				key, o, x, y, tk = k, own, interim, cand, taker
				break
			}
		}
	}
	if key == "" {
		t.Fatal("no key moving from its owner to an interim owner, then to a third member")
	}
	minority := []string{tk, x}
	majority := without(all, tk, x)
	z := without(majority, o, y)[0]
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }
	nw := newTestNet(t, tweak, all...)
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: mode, Policy: check.PolicyFailClosed}
	clients := []string{y, tk}
	// 60 admitted before the cut, at 150 ms: the checks going on, every
	// member holds its ownership lease when the views change.
	const cutAt = 150 * time.Millisecond
	own := req
	own.Key = keyOwnedBy(t, tk, all...)
	events := map[time.Duration]func(){
		// t decides a key of its own: it asks for echoes, and holds its
		// lease when it sees o and y fail (in the fault checker, traffic
		// of every key kept it).
		cutAt - 50*time.Millisecond: func() { checkAsync(nw.nodes[tk], nw.now, own) },
		cutAt:                       func() { nw.cutBetween(minority, majority) },
		// t and x see o fail, then y: 4 of 5, then 3 of 5 live.
		cutAt + 200*time.Millisecond: func() { nw.failNode(without(all, o), []string{o}, tk, x) },
		cutAt + 300*time.Millisecond: func() { nw.failNode([]string{tk, x, z}, []string{o, y}, tk, x) },
		// The majority sees t and x fail.
		cutAt + 1000*time.Millisecond: func() { nw.failNode(majority, minority, majority...) },
		// t and x learn they are a minority.
		cutAt + 3500*time.Millisecond: func() { nw.failNode(minority, majority, minority...) },
	}
	res := runRequestLoad(t, nw, clients, req, cutAt+5*time.Second, events)
	t.Logf("%s: owner %s, interim %s, taker %s (%s then %s seen failed); admitted %d (%v, %d degraded)",
		key, o, x, tk, o, y, res.admitted, res.byNode, res.degraded)
	if res.admitted > 100 {
		t.Errorf("admitted %d on a key of 100 an hour, want at most 100", res.admitted)
	}
}
