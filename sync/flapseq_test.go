package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestFlushSeqAfterOwnerReAdded: a drops b, the owner of a key it checks
// in cached mode, from its membership and adds it back at once (a
// one-sided flap: b's view never changed). a's peer state for b is made
// anew; its flushes must still be numbered after those b has applied.
// Before, they were numbered from 1 again: b, which dedups a's flushes
// by (incarnation, seq), took them for retries of ones it had applied,
// dropped their hits and answered one with its answer to the old flush,
// which a took as this one's: the 30 hits a admitted after the flap never
// reached the owner (remaining 5954 at b, 5924 at a), so the rest of the
// cluster could admit them again.
func TestFlushSeqAfterOwnerReAdded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	// 6000 an hour: under 2 tokens a second refill.
	req := check.Request{Key: key, Hits: 1, Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 6000, Period: time.Hour}}
	hits := func(rounds int) {
		for range rounds {
			for range 10 {
				if r := checkSync(t, a, nw.now, req); !r.Allowed {
					t.Fatalf("rejected: %+v", r)
				}
			}
			nw.run(100 * time.Millisecond)
		}
	}
	hits(5) // a's flushes to b up to seq 5 or so
	a.SetMembers(nw.now, []string{"a"})
	a.SetMembers(nw.now, []string{"a", "b"})
	nw.run(200 * time.Millisecond)
	mid := remainingOn(b, nw.now, key)
	hits(3)
	nw.run(2 * time.Second)
	if got := remainingOn(b, nw.now, key); got > mid-30+5 {
		t.Errorf("owner's remaining %d after a's 30 more hits (was %d; a's view %d): hits lost", got, mid, remainingOn(a, nw.now, key))
	}
	if got := b.Metrics().FlushDuplicates.Load(); got != 0 {
		t.Errorf("b took %d of a's flushes for duplicates, want 0", got)
	}
}
