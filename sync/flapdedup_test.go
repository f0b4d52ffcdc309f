package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestFlushRetryAfterSenderReAdded: b, the owner of a key a checks in
// cached mode, applies a's flush of 50 hits; its answer is lost. b drops a
// from its membership and adds it back (a one-sided flap: a's view never
// changed), and a sends the flush again, the same seq, as it does when
// its answer is late. b must take it for the duplicate it is. Before, the
// peer b made again for a had no record of a's flushes and applied it a
// second time: the 50 hits were drained twice at the owner (its reported
// lease spends would be credited twice too).
func TestFlushRetryAfterSenderReAdded(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	// 6000 an hour: under 2 tokens a second refill.
	req := check.Request{Key: key, Hits: 5, Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 6000, Period: time.Hour}}
	checkSync(t, a, nw.now, req)
	nw.run(200 * time.Millisecond)
	before := remainingOn(b, nw.now, key)

	// a's next flush reaches b; b's answer does not reach a.
	nw.drop = func(from, to string, env *peerv1.Envelope) bool {
		return from == "b" && to == "a" && bodyName(env) == "ack"
	}
	for range 10 {
		if r := checkSync(t, a, nw.now, req); !r.Allowed {
			t.Fatalf("rejected: %+v", r)
		}
	}
	nw.run(a.cfg.FlushInterval + 10*time.Millisecond)
	if got := remainingOn(b, nw.now, key); got > before-50+1 || got < before-50-1 {
		t.Fatalf("owner's remaining %d after a's flush of 50 hits, want %d", got, before-50)
	}
	if a.view.peers["b"].flight == nil {
		t.Fatal("a's flush answered")
	}

	// b drops a and adds it back; a never drops b.
	b.SetMembers(nw.now, []string{"b"})
	b.SetMembers(nw.now, []string{"a", "b"})
	nw.drop = nil
	nw.run(a.cfg.RequestTimeout + 100*time.Millisecond)
	if a.view.peers["b"].flight != nil {
		t.Fatal("a's flush still unanswered after its retry")
	}
	if got := remainingOn(b, nw.now, key); got < before-50-1 {
		t.Errorf("owner's remaining %d, want %d: a's 50 hits drained twice", got, before-50)
	}
	if got := b.Metrics().FlushDuplicates.Load(); got != 1 {
		t.Errorf("b took %d of a's flushes for duplicates, want 1 (the retry)", got)
	}
}
