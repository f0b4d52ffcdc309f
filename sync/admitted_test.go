package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestAdmittedAtDecision: Config.Admitted reports each admission once, by
// the node whose bucket took the tokens, at the instant it did: a check
// forwarded in owner mode is reported by its owner when the forward
// arrives, a link before its answer reaches the asking node; a rejected
// check is not reported.
func TestAdmittedAtDecision(t *testing.T) {
	type admission struct {
		node string
		hits int64
		at   time.Time
	}
	var got []admission
	nw := newTestNet(t, func(c *Config) {
		self := c.Self
		c.Admitted = func(key string, hits int64, at time.Time) {
			got = append(got, admission{self, hits, at})
		}
	}, "a", "b")
	key := keyOwnedBy(t, "a", "a", "b")
	r := check.Request{Key: key, Hits: 2, Limit: perMinute(5), Mode: check.ModeOwner}
	var answered []time.Time
	for i := range 3 {
		resp := nw.checkAnswered(nw.nodes["b"], r)
		if want := i < 2; resp.Allowed != want || resp.Err != nil {
			t.Fatalf("check %d: allowed %v (err %v), want %v", i, resp.Allowed, resp.Err, want)
		}
		answered = append(answered, nw.now)
	}
	if len(got) != 2 {
		t.Fatalf("%d admissions reported (%+v), want 2", len(got), got)
	}
	for i, a := range got {
		if a.node != "a" || a.hits != 2 {
			t.Errorf("admission %d: reported by %s with %d hits, want by the owner a with 2", i, a.node, a.hits)
		}
		if want := answered[i].Add(-nw.latency); !a.at.Equal(want) {
			t.Errorf("admission %d: at %v, want %v (a link before its answer at %v)", i, a.at.Sub(t0), want.Sub(t0), answered[i].Sub(t0))
		}
	}
}
