package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// ownerAdmitsAfterGrant builds a with a key of its own of 10 per 10 s on
// which c holds a live lease (grantedLease), lets the key rest rest, floods
// a's store with local keys when flood is set (evicting the key's owned
// record, its grants stray), and returns what a admits of the key at once
// in owner mode, with the tokens granted.
func ownerAdmitsAfterGrant(t *testing.T, rest time.Duration, flood bool) (admitted int, granted int64) {
	t.Helper()
	const ttl = 10 * time.Second
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = ttl; c.MaxKeys = 64 * 8; c.SweepInterval = 640 * time.Millisecond }, "a", "c")
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyOwnedBy(t, "a", "a", "c")
	ad, _, granted := grantedLease(t, nw, a, c, key)
	nw.run(rest)
	if flood {
		for i := range 5000 {
			checkSync(t, a, nw.now, check.Request{Key: fmt.Sprintf("flood%d", i), Hits: 1, Limit: perMinute(1000), Mode: check.ModeLocal})
		}
		s := a.st.shardOf(key)
		if a.st.lookup(s, key) != nil || s.strayGrants[key] == nil {
			t.Fatalf("the key was not evicted with its grants (stray: %v)", s.strayGrants[key] != nil)
		}
	}
	for ad.ask(a) {
		admitted++
	}
	return admitted, granted
}

// TestEvictedKeyUnderLiveGrantsNotDrained: an owned key evicted while its
// lease grants live, and made again while they still live, is held under
// them (adoptGrants, the cap): it admits what it would have admitted had
// it not been evicted (one less at most: the eviction's own mark rounds
// its instant up, a part of a token). markGrants used to mark the key at
// the eviction as full only at the grants' expiry plus their refill: a
// mark refills at the key's rate up to its instant, so the record made
// before the expiry was drained by the refill of the time left until it
// on top of the cap, and a flood of strangers' keys cost a key under a
// lease its whole bucket (0 admitted where 4 and 6 were due).
func TestEvictedKeyUnderLiveGrantsNotDrained(t *testing.T) {
	for _, rest := range []time.Duration{time.Second, 5 * time.Second} {
		want, granted := ownerAdmitsAfterGrant(t, rest, false)
		got, _ := ownerAdmitsAfterGrant(t, rest, true)
		t.Logf("rest %v: granted %d; a admits %d after the eviction, %d without", rest, granted, got, want)
		if got < want-1 || got > want {
			t.Errorf("rest %v: a admits %d of the key after its eviction under a live grant of %d, %d without the eviction", rest, got, granted, want)
		}
	}
}
