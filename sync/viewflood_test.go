package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestViewFloodKeepsSpentKeySpent: a flood of fresh keys through a
// non-owner evicts its cached view of a spent key. A view started again
// fresh would decide on a full bucket with the first-sight share C/N
// before the owner's answer came back: a stranger who floods the node
// between two bursts gets C/N of a spent key back per flood, without end
// (the drift bound, f·C + r·(F+δ) + N·h, does not grow with time).
//
// Three nodes, a key of 1000 an hour owned by a, spent at a, and b's view
// of it synced (spent); then five rounds through b, each 2000 local-mode
// checks of fresh keys through b, whose MaxKeys is 512 (the view is
// evicted), then a batch of 1000 one-hit cached checks in one input (one
// call on a real node), and the answers delivered. Before views were
// marked on eviction (evicted.go), each round's checks were decided at
// once on a fresh view and admitted 333: 1665 in all on top of the spent
// 1000. Now they go to the owner (viewMarked), which admits none.
func TestViewFloodKeepsSpentKeySpent(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.MaxKeys = 512 }, "a", "b", "c")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "a", "a", "b", "c")
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1000, Period: time.Hour}
	if r := nw.checkAnswered(a, check.Request{Key: key, Hits: 1000, Limit: l, Mode: check.ModeOwner}); !r.Allowed {
		t.Fatalf("spending the key at its owner: %+v", r)
	}
	// b has seen the key: its view shows it spent (the first sight of a
	// key, C/N before the owner's answer, is the documented rule).
	if r := checkSync(t, b, nw.nowOf("b"), check.Request{Key: key, Limit: l, Mode: check.ModeCached}); r.Err != nil {
		t.Fatal(r.Err)
	}
	nw.run(500 * time.Millisecond)
	if r := checkSync(t, b, nw.nowOf("b"), check.Request{Key: key, Limit: l, Mode: check.ModeCached}); r.Remaining != 0 {
		t.Fatalf("b's view of the spent key: %d remaining", r.Remaining)
	}
	total := 0
	for round := range 5 {
		nw.run(time.Second) // the view is the least recently used
		evicted := b.Metrics().Evicted.Load()
		for i := range 2000 {
			checkSync(t, b, nw.nowOf("b"), check.Request{Key: fmt.Sprintf("zz-flood-%d-%d", round, i), Hits: 1,
				Limit: perMinute(100), Mode: check.ModeLocal})
		}
		s := b.st.shardOf(key)
		if b.st.lookup(s, key) != nil {
			t.Fatalf("round %d: the view was not evicted (%d evictions)", round, b.Metrics().Evicted.Load()-evicted)
		}
		nw.run(100 * time.Millisecond)
		reqs := make([]check.Request, 1000)
		for i := range reqs {
			reqs[i] = check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached}
		}
		p := checkAsync(b, nw.nowOf("b"), reqs...)
		for !p.done {
			nw.run(100 * time.Microsecond)
		}
		got := 0
		for _, r := range p.resps {
			if r.Err != nil {
				t.Fatalf("round %d: %v", round, r.Err)
			}
			if r.Allowed {
				got++
			}
		}
		total += got
		t.Logf("round %d (t+%v): %d of 1000 admitted through b", round, nw.now.Sub(t0), got)
		nw.run(500 * time.Millisecond) // the flush, its answer, pushes
	}
	// One bucket over the run (8 s) admits 1000 + 1000/h·8s < 1003; the
	// drift bound adds f·C + r·(F+δ) + N·h = 20 + 0.03 + 3.
	if total > 25 {
		t.Errorf("a spent key of 1000 an hour admitted %d more through b across 5 floods of its views; one bucket and the drift bound allow 25", total)
	}
}
