package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// benchKeys returns n keys owned by owner among members (the first of
// which asks: a node not among the members would add itself to its ring).
func benchKeys(b *testing.B, n int, owner string, members ...string) []string {
	b.Helper()
	nd, err := NewNode(func() Config { c := DefaultConfig(); c.Self = members[0]; return c }(), discard{})
	if err != nil {
		b.Fatal(err)
	}
	nd.SetMembers(t0, members)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("user:%07d", i)
		if nd.view.owner(k) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

// benchNode returns the node members[0] of members, with no wait for
// hand-offs (a node's first membership would otherwise await its keys from
// the others, which a benchmark's discarding transport never answers).
func benchNode(b *testing.B, members ...string) *Node {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Self, cfg.HandoffWait = members[0], 0
	n, err := NewNode(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	n.SetMembers(t0, members)
	return n
}

// benchCheck runs cached-mode checks of one hit over keys on n, one after
// another, as its driver applies them.
func benchCheck(b *testing.B, n *Node, keys []string) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1e15, Period: time.Second}
	reqs := []check.Request{{Hits: 1, Limit: l}}
	resps := make([]check.Response, 1)
	done := func() {}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		reqs[0].Key = keys[(i*7919)%len(keys)]
		n.Check(t0.Add(time.Duration(i)), reqs, resps, done)
		if !resps[0].Allowed {
			b.Fatalf("rejected: %+v", resps[0])
		}
	}
}

// BenchmarkCheckOwnerLocal is a cached-mode check decided by the key's
// owner on its authoritative state (no other node interested).
func BenchmarkCheckOwnerLocal(b *testing.B) {
	keys := benchKeys(b, 1024, "a", "a", "b", "c")
	n := benchNode(b, "a", "b", "c")
	benchCheck(b, n, keys)
}

// BenchmarkCheckCachedNonOwner is a cached-mode check decided by a
// non-owner from its cached view and its budget, hits left pending for the
// owner: it never waits on the network.
func BenchmarkCheckCachedNonOwner(b *testing.B) {
	keys := benchKeys(b, 1024, "b", "a", "b", "c")
	n := benchNode(b, "a", "b", "c")
	benchCheck(b, n, keys)
}

// TestFlushTrafficPerDecision measures the messages and bytes between nodes
// per decision at two request rates, for 100 keys spread over 3 nodes in
// cached mode: flush traffic follows the flush interval and the number of
// active keys, not the request rate. Run with -v to see the figures.
func TestFlushTrafficPerDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario")
	}
	var perSec [2]float64
	for i, rate := range []int{1000, 10000} {
		nw := newTestNet(t, nil, "a", "b", "c")
		l := perMinute(100_000) // never exhausted: no early syncs
		const keys = 100
		gap := time.Second / time.Duration(rate)
		d := 10 * time.Second
		start := nw.now
		nextTick := start
		checks := 0
		reqs := []check.Request{{Hits: 1, Limit: l}}
		resps := make([]check.Response, 1)
		for at := start; at.Before(start.Add(d)); at = at.Add(gap) {
			for !nextTick.After(at) {
				nw.deliver(nextTick)
				nw.tick()
				nextTick = nextTick.Add(5 * time.Millisecond)
			}
			nw.deliver(at)
			reqs[0].Key = fmt.Sprintf("k%d", checks%keys)
			nw.nodes[nw.names[checks%3]].Check(at, reqs, resps, func() {})
			checks++
		}
		msgs := 0
		for _, c := range nw.sent {
			msgs += c
		}
		perSec[i] = float64(msgs) / d.Seconds() / 3
		t.Logf("%5d checks/s over %d keys: %d messages (%v), %.1f per node per second; %.4f messages and %.2f bytes per decision",
			rate, keys, msgs, nw.sent, perSec[i], float64(msgs)/float64(checks), float64(nw.bytes)/float64(checks))
	}
	if perSec[1] > 1.5*perSec[0] {
		t.Errorf("messages per node per second grew from %.1f to %.1f with 10x the rate", perSec[0], perSec[1])
	}
}
