package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestViewMarksCostNewKeys: marking views costs no first check. A flood
// of spent views (5,000 keys of 1 an hour, one hit each, cached mode,
// through b of MaxKeys 512) fills the marks' slots with shared marks an
// hour ahead. A key never seen, of 1000 an hour, whose view's slot holds
// one, is decided by its owner until b's view is synced (viewMarked):
// every first check refused at b is refused by an owner whose own record
// started drained (the documented cost of a flood for owned keys). With
// views started drained and deciding (the first form of the fix), 163 of
// 200 first checks were refused at b; before views were marked, none (the
// fresh view admitted on its first-sight share, also where the owner's
// state was drained).
func TestViewMarksCostNewKeys(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.MaxKeys = 512 }, "a", "b", "c")
	b := nw.nodes["b"]
	for i := range 5000 {
		k := fmt.Sprintf("flood-%d", i)
		if o, _ := b.Ring().Owner(k); o == "b" {
			continue
		}
		checkAsync(b, nw.nowOf("b"), check.Request{Key: k, Hits: 1,
			Limit: bucket.Limit{Limit: 1, Period: time.Hour}, Mode: check.ModeCached})
		if i%100 == 99 {
			nw.run(5 * time.Millisecond)
		}
	}
	nw.run(time.Second)
	l := bucket.Limit{Limit: 1000, Period: time.Hour}
	refused, byOwner, keys := 0, 0, 0
	for i := 0; keys < 200; i++ {
		k := fmt.Sprintf("new-%d", i)
		o, _ := b.Ring().Owner(k)
		if o == "b" {
			continue
		}
		keys++
		if !nw.checkAnswered(b, check.Request{Key: k, Hits: 1, Limit: l, Mode: check.ModeCached}).Allowed {
			refused++
			// The owner's own record started drained from its own marks
			// (the documented cost of owned keys' marks,
			// TestFloodMarksCostNewKeys): the refusal is the owner's.
			if remainingOn(nw.nodes[o], nw.nowOf(o), k) < 1 {
				byOwner++
			}
		}
		nw.run(5 * time.Millisecond)
	}
	t.Logf("%d new keys of 1000 an hour through b after the flood: first check refused for %d, %d of them by an owner whose record started drained",
		keys, refused, byOwner)
	if refused > byOwner {
		t.Errorf("%d first checks of new keys refused at b while their owner had tokens", refused-byOwner)
	}
}
