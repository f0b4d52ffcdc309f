package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestShareFloodKeepsSpentKeySpent: local-share hands out one share per
// node and episode (docs/consistency.md, "Partition policy"), not one per
// flood. The owner a of two keys of 1000 an hour is cut off from b and c
// (a silent partition); b decides them by local-share. spent was spent at
// a before the cut and b's view shows it spent; fresh was never seen by
// b, which spends its first-sight budget (1000/3) in the first round,
// before it counts a unreachable. Then five
// rounds of 2000 local-mode checks of fresh keys through b, whose MaxKeys
// is 512 (evicting the views and the shares), each followed by 100 checks
// of each key, 500 ms apart (one episode: a share unused for
// UnreachableAfter, 1 s, is dropped and the next starts afresh from the
// view, by design). Before views and shares were marked on eviction
// (evicted.go), every round after a flood admitted 100 of 100 of each
// key: a fresh share per flood (spent 500, fresh 833 in all); now spent
// admits 0 and fresh 555, as without the floods (first sight 333, then
// one share of what the view shows left, 222).
func TestShareFloodKeepsSpentKeySpent(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.MaxKeys = 512; c.Policy = check.PolicyLocalShare }, "a", "b", "c")
	a, b := nw.nodes["a"], nw.nodes["b"]
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("share-%d", i)
		if n, _ := b.Ring().Owner(k); n == "a" {
			keys = append(keys, k)
		}
	}
	spent, fresh := keys[0], keys[1]
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1000, Period: time.Hour}
	if r := nw.checkAnswered(a, check.Request{Key: spent, Hits: 1000, Limit: l, Mode: check.ModeOwner}); !r.Allowed {
		t.Fatalf("spending the key at its owner: %+v", r)
	}
	checkSync(t, b, nw.nowOf("b"), check.Request{Key: spent, Limit: l, Mode: check.ModeCached})
	nw.run(500 * time.Millisecond)
	nw.isolate("a")
	admitted := map[string]int{}
	for round := range 6 {
		// Within UnreachableAfter (1 s) of the last check: one episode
		// (policy.go, currentShare).
		nw.run(500 * time.Millisecond)
		if round > 0 {
			for i := range 2000 {
				checkSync(t, b, nw.nowOf("b"), check.Request{Key: fmt.Sprintf("zz-flood-%d-%d", round, i), Hits: 1,
					Limit: perMinute(100), Mode: check.ModeLocal})
			}
		}
		for _, k := range keys {
			n := 400
			if round > 0 {
				n = 100
			}
			got := 0
			for range n {
				if nw.checkAnswered(b, check.Request{Key: k, Hits: 1, Limit: l, Mode: check.ModeCached}).Allowed {
					got++
				}
			}
			admitted[k] += got
			t.Logf("round %d (t+%v), key %s: %d of %d admitted through b (evictions so far %d)",
				round, nw.now.Sub(t0), k, got, n, b.Metrics().Evicted.Load())
		}
	}
	if admitted[spent] > 0 {
		t.Errorf("the spent key admitted %d through b by local-share across 5 floods, want 0", admitted[spent])
	}
	// fresh: 333 in the first round on the first-sight budget (b does not
	// count a unreachable yet: not degraded), then the episode's share,
	// started from the view (667 left, a third: 222); the same without the
	// floods.
	if admitted[fresh] > 556 {
		t.Errorf("the key first seen in the partition admitted %d through b across 5 floods, want at most 333 + 222 (first sight, then one share)", admitted[fresh])
	}
	t.Logf("spent: %d admitted; fresh: %d admitted", admitted[spent], admitted[fresh])
}
