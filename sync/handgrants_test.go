package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestHandedOffKeyKeepsLeaseCap: the fault checker's leased seed 105 at
// the core. a owns a key of 100 per 10 s and grants b leases (LeaseTTL
// 4 s, so that the effect is tokens, not fractions); b stops checking
// with 9 tokens of a lease unspent, and a's bucket refills only to the
// capacity less them (91, leasecap.go). c joins and a hands the key to c;
// a second later b spends its lease and c's clients the bucket. On main
// c's bucket was not capped by a's grants: it refilled to the capacity on
// top of the 9 tokens b held, and the worst span after the join admitted
// +9.00 over the token bucket's envelope (capacity + rate x span, 121
// admitted in the second). Now the hand-off carries the tokens out on live
// leases and c caps its bucket by them until LeaseTTL after it got them:
// -4.00 (108 admitted; the cap outlives the lease by up to the time
// between the grant and the hand-off).
func TestHandedOffKeyKeepsLeaseCap(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: 10 * time.Second}
	key := keyMoving(t, "a", "c", []string{"a", "b"}, []string{"a", "b", "c"})
	tweak := func(cfg *Config) { withWait(cfg); cfg.LeaseTTL = 4 * time.Second }
	nw := newTestNet(t, tweak, "a", "b")
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased, Policy: check.PolicyFailClosed}
	var first []*pending
	for range 10 {
		first = append(first, checkAsync(nw.nodes["b"], nw.now, req))
		nw.deliver(nw.now.Add(5 * time.Millisecond))
		nw.tick()
	}
	nw.run(time.Second)
	atJoin, held := remainingOn(nw.nodes["a"], nw.now, key), leaseAvail(nw.nodes["b"], key)
	before := 0
	for _, p := range first {
		if p.done && p.resps[0].Allowed {
			before++
		}
	}
	granted := nw.nodes["a"].Metrics().LeaseTokensGranted.Load()
	nw.add("c", tweak)
	nw.names = append(nw.names, "c")
	all := []string{"a", "b", "c"}
	nw.setMembers(all, all...)
	nw.run(time.Second)
	join := nw.now
	var adm []time.Duration
	for at := time.Duration(0); at < time.Second; at += 5 * time.Millisecond {
		for _, c := range []string{"b", "c"} {
			p := checkAsync(nw.nodes[c], nw.now, req)
			nw.settle()
			if p.done && p.resps[0].Allowed {
				adm = append(adm, nw.now.Sub(join))
			}
		}
		nw.deliver(nw.now.Add(5 * time.Millisecond))
		nw.tick()
	}
	// The worst span [adm[i], adm[j]] against capacity + rate x span.
	worst := -20.0
	var from, to time.Duration
	for i := range adm {
		for j := i; j < len(adm); j++ {
			over := float64(j-i+1) - (100 + 10*(adm[j]-adm[i]).Seconds())
			if over > worst {
				worst, from, to = over, adm[i], adm[j]
			}
		}
	}
	t.Logf("%d admitted at b before the join (%d lease tokens granted, %d left at the join, a's bucket %d), %d in the second from 1 s after it; worst span %v..%v: %+.2f over the envelope",
		before, granted, held, atJoin, len(adm), from, to, worst)
	if worst > 0.1 {
		t.Errorf("a span after the hand-off admitted %+.2f over capacity + rate x span, want at most 0", worst)
	}
}

func leaseAvail(n *Node, key string) int64 {
	l := n.st.shardOf(key).leases[key]
	if l == nil {
		return -1
	}
	return l.avail()
}
