package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestIdleKeyNotRejected: a key asked about now and then, far below its
// limit, is admitted every time in every mode, however long it stays idle
// between checks. (Cached mode used to let the share the owner gave decay
// like a demand counter, down to a budget below one hit; leased mode took a
// flush answer without a grant for an empty grant, and rejected a check
// whose lease had expired unspent.)
func TestIdleKeyNotRejected(t *testing.T) {
	for _, mode := range []check.Mode{check.ModeCached, check.ModeLeased, check.ModeOwner} {
		t.Run(mode.String(), func(t *testing.T) {
			nw := newTestNet(t, nil, "a", "b", "c")
			a := nw.nodes["a"]
			key := keyOwnedBy(t, "b", "a", "b", "c")
			l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}
			for i := range 12 {
				// Checks of 1 to 5 hits, 3 s apart (idle long enough for a
				// demand to decay, not for the view to be dropped), with
				// other traffic (the same key through c) in between.
				hits := int64(i%5 + 1)
				p := checkAsync(a, nw.now, check.Request{Key: key, Hits: hits, Limit: l, Mode: mode})
				nw.run(50 * time.Millisecond)
				if !p.done || p.resps[0].Err != nil || !p.resps[0].Allowed {
					t.Fatalf("check %d (%d hits): %+v (done %v), want admitted", i, hits, p.resps[0], p.done)
				}
				q := checkAsync(nw.nodes["c"], nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: mode})
				nw.run(1500 * time.Millisecond)
				if !q.done || !q.resps[0].Allowed {
					t.Fatalf("check %d through c: %+v, want admitted", i, q.resps[0])
				}
				nw.run(1500 * time.Millisecond)
			}
		})
	}
}
