package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestParametersCannotRefill steps issue 16's attacks on one key over fixed
// instants: peeks and checks naming another period or limit must leave a
// spent key spent, and a real change of limit keeps what was consumed.
func TestParametersCannotRefill(t *testing.T) {
	nw := newTestNet(t, nil, "a")
	a := nw.nodes["a"]
	real := perMinute(100)
	fast := real
	fast.Period = time.Nanosecond
	loose := real
	loose.Limit = 1000
	t0 := nw.now
	for i := range 100 {
		if r := checkSync(t, a, t0, check.Request{Key: "k", Hits: 1, Limit: real, Mode: check.ModeOwner}); !r.Allowed {
			t.Fatalf("t0: check %d of 100 denied", i+1)
		}
	}
	steps := []struct {
		name      string
		at        time.Duration
		limit     bucket.Limit
		hits      int64
		allowed   bool
		wantLimit int64 // the limit the answer reports
	}{
		{"peek with period 1ns", time.Millisecond, fast, 0, true, 100},
		{"peek again with period 1ns", 2 * time.Millisecond, fast, 0, true, 100},
		{"check with period 1ns", 3 * time.Millisecond, fast, 1, false, 100},
		{"check with limit 1000", 4 * time.Millisecond, loose, 1, false, 100},
		{"check at the real limit", 5 * time.Millisecond, real, 1, false, 100},
	}
	for _, s := range steps {
		r := checkSync(t, a, t0.Add(s.at), check.Request{Key: "k", Hits: s.hits, Limit: s.limit, Mode: check.ModeOwner})
		if r.Err != nil || r.Allowed != s.allowed || r.Limit != s.wantLimit || r.Remaining != 0 || r.Reconfigured {
			t.Errorf("%s: %+v, want allowed %v, limit %d, remaining 0, not reconfigured", s.name, r, s.allowed, s.wantLimit)
		}
	}
	// Refills at the real rate only: 100 a minute, one each 600ms.
	if r := checkSync(t, a, t0.Add(600*time.Millisecond), check.Request{Key: "k", Hits: 1, Limit: real, Mode: check.ModeOwner}); !r.Allowed {
		t.Errorf("t0+600ms: %+v, want the one token earned since t0 admitted", r)
	}

	// A key half spent, whose limit really changes: the tokens left never
	// grow at the change.
	for range 50 {
		checkSync(t, a, t0, check.Request{Key: "half", Hits: 1, Limit: real, Mode: check.ModeOwner})
	}
	r := checkSync(t, a, t0, check.Request{Key: "half", Hits: 1, Limit: loose, Mode: check.ModeOwner})
	if !r.Allowed || r.Limit != 1000 || r.Remaining > 49 || !r.Reconfigured {
		t.Errorf("limit 100 -> 1000 with 50 left: %+v, want reconfigured, admitted under 1000 with at most 49 left", r)
	}
	tight := real
	tight.Limit = 10
	r = checkSync(t, a, t0, check.Request{Key: "half", Hits: 1, Limit: tight, Mode: check.ModeOwner})
	// 951 of 1000 consumed is 9.51 of 10: none left.
	if r.Allowed || r.Limit != 10 || r.Remaining != 0 || !r.Reconfigured {
		t.Errorf("limit 1000 -> 10 with 49 left: %+v, want reconfigured, denied under 10 (the share consumed kept)", r)
	}
}

// TestReconfiguredOverTheWire: a forwarded check that changes the limit is
// reported reconfigured by the owner's answer; one that does not, not.
func TestReconfiguredOverTheWire(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	loose := perMinute(100)
	loose.Limit = 200
	for _, s := range []struct {
		name  string
		limit bucket.Limit
		want  bool
	}{
		{"first check", perMinute(100), false},
		{"same limit", perMinute(100), false},
		{"limit 200", loose, true},
	} {
		p := checkAsync(a, nw.now, check.Request{Key: key, Hits: 1, Limit: s.limit, Mode: check.ModeOwner})
		nw.settle()
		if r := p.resps[0]; !p.done || r.Err != nil || r.Owner != "b" || r.Reconfigured != s.want {
			t.Errorf("%s: done %v, %+v, want decided by b, reconfigured %v", s.name, p.done, r, s.want)
		}
	}
}
