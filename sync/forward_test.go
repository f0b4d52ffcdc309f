package sync

import (
	"slices"
	"testing"
	"time"
)

// TestForwardBatching: an owner-mode check goes at once when nothing is in
// flight to its owner; checks arriving meanwhile coalesce into one Forward
// sent when the first is answered; the items of one Check go together.
func TestForwardBatching(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	req := Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: ModeOwner}

	first := checkAsync(a, t0, req)
	if first.done {
		t.Fatal("t0: forwarded check completed before its answer")
	}
	if got := nw.queued("a", "b"); !slices.Equal(got, []string{"forward"}) {
		t.Fatalf("t0: queued %v, want [forward]", got)
	}
	var later []*pending
	for i := range 5 {
		later = append(later, checkAsync(a, t0.Add(time.Duration(i)*10*time.Microsecond), req))
	}
	if got := nw.queued("a", "b"); len(got) != 1 {
		t.Fatalf("t0: queued %v while one batch is in flight, want the first only", got)
	}
	// t0+1ms: b gets the check, a key it has never backed up: it sends
	// the key's backup to a (fence.go); t0+2ms: a acknowledges it; t0+3ms:
	// b decides and answers; t0+4ms: the answer completes the first check
	// and sends the five others in one message.
	nw.deliver(t0.Add(4 * time.Millisecond))
	if !first.done || !first.resps[0].Allowed || first.resps[0].Remaining != 99 {
		t.Fatalf("t0+4ms: first check %+v done=%v, want allowed with 99 remaining", first.resps[0], first.done)
	}
	if got := nw.queued("a", "b"); !slices.Equal(got, []string{"forward"}) {
		t.Fatalf("t0+4ms: queued %v, want one forward", got)
	}
	if got := len(nw.queue[0].env.GetForward().Items); got != 5 {
		t.Fatalf("t0+4ms: second forward has %d items, want 5", got)
	}
	nw.settle()
	for i, p := range later {
		if !p.done || !p.resps[0].Allowed {
			t.Errorf("check %d: %+v done=%v, want allowed", i, p.resps[0], p.done)
		}
	}
	m := a.Metrics()
	if m.Forwarded.Load() != 6 || m.ForwardBatches.Load() != 2 {
		t.Errorf("Forwarded %d in %d batches, want 6 in 2", m.Forwarded.Load(), m.ForwardBatches.Load())
	}

	// One Check of three items for b: one message.
	batch := checkAsync(a, nw.now, req, req, req)
	if got := nw.queued("a", "b"); len(got) != 1 || len(nw.queue[0].env.GetForward().Items) != 3 {
		t.Fatalf("one check of 3 items: queued %v, want one forward of 3", got)
	}
	nw.settle()
	if !batch.done {
		t.Fatal("batch of 3 not done")
	}
}

// TestForwardWindow: with a batch in flight that is not answered, queued
// checks go after ForwardWindow.
func TestForwardWindow(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.ForwardWindow = 3 * time.Millisecond }, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	req := Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: ModeOwner}
	nw.cut[[2]string{"a", "b"}] = true
	checkAsync(a, t0, req)
	checkAsync(a, t0, req)
	for _, s := range []struct {
		at      time.Duration
		batches int64
	}{
		{0, 1},
		{time.Millisecond, 1},
		{5 * time.Millisecond, 2}, // the tick after the window
	} {
		nw.run(t0.Add(s.at).Sub(nw.now))
		if got := a.Metrics().ForwardBatches.Load(); got != s.batches {
			t.Errorf("t0+%v: ForwardBatches %d, want %d", s.at, got, s.batches)
		}
	}
}

// TestForwardTimeoutPolicy: a forwarded check unanswered after
// RequestTimeout is decided by the partition policy, flagged Degraded, and
// the owner is marked unreachable: the next check does not wait.
func TestForwardTimeoutPolicy(t *testing.T) {
	for _, tc := range []struct {
		pol     Policy
		allowed bool
	}{
		{PolicyFailOpen, true},
		{PolicyFailClosed, false},
		{PolicyLocalShare, true},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			nw := newTestNet(t, nil, "a", "b")
			a := nw.nodes["a"]
			key := keyOwnedBy(t, "b", "a", "b")
			req := Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: ModeOwner, Policy: tc.pol}
			nw.cut[[2]string{"a", "b"}] = true
			p := checkAsync(a, t0, req)
			nw.run(499 * time.Millisecond)
			if p.done {
				t.Fatal("t0+499ms: decided before RequestTimeout")
			}
			nw.run(6 * time.Millisecond)
			if !p.done || !p.resps[0].Degraded || p.resps[0].Allowed != tc.allowed {
				t.Fatalf("t0+505ms: %+v done=%v, want degraded, allowed=%v", p.resps[0], p.done, tc.allowed)
			}
			r := check(t, a, nw.now, req)
			if !r.Degraded || r.Allowed != tc.allowed {
				t.Errorf("next check: %+v, want degraded at once", r)
			}
			if got := a.Metrics().Degraded.Load(); got != 2 {
				t.Errorf("Degraded %d, want 2", got)
			}
		})
	}
}

// TestUnreachableFailsForwards: Unreachable decides the checks waiting on
// that peer at once.
func TestUnreachableFailsForwards(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	p := checkAsync(a, t0, Request{Key: key, Hits: 1, Limit: perMinute(100), Mode: ModeOwner, Policy: PolicyFailClosed})
	a.Unreachable(t0, "b")
	if !p.done || p.resps[0].Allowed || !p.resps[0].Degraded {
		t.Fatalf("after Unreachable: %+v done=%v, want a degraded rejection", p.resps[0], p.done)
	}
	nw.settle() // the late answer is ignored
}
