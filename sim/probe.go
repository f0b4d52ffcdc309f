package sim

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Capabilities says which parts of the code under simulation do real work.
// The simulator drives whatever bucket and sync hold; while a part is still a
// placeholder, the figures it produces mean nothing, and tests that assert
// the modes' promises skip.
type Capabilities struct {
	// Bucket is true when the token bucket of package bucket decides.
	Bucket bool
	// Coordination is true when an owner-mode check on a non-owner goes to
	// the owner, rather than being decided locally.
	Coordination bool
}

// nopTransport drops every message and counts them.
type nopTransport struct{ sent int }

func (t *nopTransport) Send(string, *peerv1.Envelope) { t.sent++ }

// Probe reports the Capabilities of the bucket and sync code linked in.
func Probe() Capabilities {
	var caps Capabilities
	now := Epoch()
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: time.Second}
	if b, err := bucket.New(l, now); err == nil {
		if d, err := b.Take(now, 1); err == nil && d.Allowed {
			caps.Bucket = true
		}
	}
	cfg := rlsync.DefaultConfig()
	cfg.Self = "a"
	members := []string{"a", "b"}
	r, err := ring.New(cfg.Ring, members...)
	if err != nil {
		return caps
	}
	key := ""
	for i := 0; key == "" && i < 1000; i++ {
		k := "probe-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if o, _ := r.Owner(k); o == "b" {
			key = k
		}
	}
	tr := &nopTransport{}
	n, err := rlsync.NewNode(cfg, tr)
	if err != nil || key == "" {
		return caps
	}
	n.SetMembers(now, members)
	reqs := []rlsync.Request{{Key: key, Hits: 1, Limit: l, Mode: rlsync.ModeOwner}}
	resps := make([]rlsync.Response, 1)
	called := false
	n.Check(now, reqs, resps, func() { called = true })
	n.Tick(now.Add(cfg.TickInterval))
	caps.Coordination = tr.sent > 0 || !called || resps[0].Mode == rlsync.ModeOwner
	return caps
}
