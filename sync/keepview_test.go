package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// TestSmallKeyViewRefreshedByReply: a cached-mode key too small for shares
// is decided by its owner, and the non-owner keeps a view of it for the
// partition policy (keepView). The answer to each forwarded check carries
// the key's state, which refreshes the view: the non-owner sends no flush
// of it. Before, it flushed the view at first sight and then every
// FlushInterval while it kept checking the key (a flush and its answer per
// key, besides the forward and its reply): at 20 nodes, a third of the
// bench's messages (issue #19).
func TestSmallKeyViewRefreshedByReply(t *testing.T) {
	names := members(20)
	nw := newTestNet(t, nil, names...)
	owner, a := nw.nodes["n00"], nw.nodes["n01"]
	key := keyOwnedBy(t, "n00", names...)
	l := perHour(100) // SyncFraction x 100 = 2 < 20 members: too small for shares
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached}
	for i := range 30 {
		r := nw.checkAnswered(a, req)
		if !r.Allowed || r.Degraded {
			t.Fatalf("check %d: %+v, want admitted by the owner", i, r)
		}
		if got, want := remainingOn(a, nw.now, key), remainingOn(owner, nw.now, key); got != want {
			t.Fatalf("check %d: a's view has %d remaining, want the owner's %d", i, got, want)
		}
		nw.run(30 * time.Millisecond)
	}
	if got := a.Metrics().FlushesSent.Load(); got != 0 {
		t.Errorf("a sent %d flushes of a key whose checks go to the owner, want 0", got)
	}
	if got := nw.sent["flush"] + nw.sent["flushAck"]; got != 0 {
		t.Errorf("%d flushes and answers on the network, want 0", got)
	}
}

// TestSmallKeyPushedOnlyWhenSpent: the owner of a key too small for shares
// does not push its changes to the nodes that checked it (their views
// decide nothing, and each of their checks' answers refreshes them), but
// tells them when the key is nearly spent, so that the partition policy,
// which starts from the view, finds a spent key spent.
func TestSmallKeyPushedOnlyWhenSpent(t *testing.T) {
	names := members(20)
	nw := newTestNet(t, nil, names...)
	owner, a := nw.nodes["n00"], nw.nodes["n01"]
	key := keyOwnedBy(t, "n00", names...)
	l := perHour(100)
	if r := nw.checkAnswered(a, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached}); !r.Allowed {
		t.Fatalf("a's check: %+v, want admitted", r)
	}
	nw.run(300 * time.Millisecond)
	spend := check.Request{Key: key, Hits: 50, Limit: l, Mode: check.ModeCached}
	if r := checkSync(t, owner, nw.now, spend); !r.Allowed {
		t.Fatalf("the owner's check of 50: %+v, want admitted", r)
	}
	nw.run(300 * time.Millisecond)
	if got := a.Metrics().PushesReceived.Load(); got != 0 {
		t.Errorf("a was pushed %d changes of a key with 49 of 100 left, want 0", got)
	}
	spend.Hits = 49
	if r := checkSync(t, owner, nw.now, spend); !r.Allowed {
		t.Fatalf("the owner's check of 49: %+v, want admitted", r)
	}
	nw.run(300 * time.Millisecond)
	if got := a.Metrics().PushesReceived.Load(); got != 1 {
		t.Errorf("a was pushed %d times after the key was spent, want 1", got)
	}
	if got, want := remainingOn(a, nw.now, key), remainingOn(owner, nw.now, key); got != want {
		t.Errorf("a's view has %d remaining after the owner spent the key, want the owner's %d", got, want)
	}
}

// TestFirstSightDuringHandoffWait: a key too small for shares moves from a
// to c when c joins. Until a learns of the join and hands the key off, c
// holds no state for it and sends the checks it is forwarded to a
// (awaitFrom), as in owner mode. Before, a node that saw the key for the
// first time flushed its fresh view at once (keepView), and c applied that
// flush as cached mode's flushes are, starting a fresh bucket on which it
// then decided the forwarded checks: d's checks were admitted from a full
// bucket while a's was 60 spent, and the hand-off merged in later, keeping
// the most consumed, did not count them: 140 admitted for a limit of 100.
func TestFirstSightDuringHandoffWait(t *testing.T) {
	before := []string{"a", "b", "d"}
	after := []string{"a", "b", "c", "d"}
	nw := newTestNet(t, withWait, before...)
	key := keyMoving(t, "a", "c", before, after)
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeCached}
	admitted := 0
	for range 60 {
		if nw.checkAnswered(nw.nodes["b"], req).Allowed {
			admitted++
		}
	}
	c := nw.add("c", withWait)
	nw.names = after
	c.SetMembers(nw.now, after)
	nw.setMembers(after, "d") // d and c know of the join; a and b not yet
	d := nw.nodes["d"]
	var pend []*pending
	for range 40 {
		pend = append(pend, checkAsync(d, nw.now, req))
		nw.run(500 * time.Microsecond)
	}
	nw.setMembers(after, "a", "b")
	nw.run(3 * time.Second)
	for i, p := range pend {
		if !p.done {
			t.Fatalf("d's check %d never completed", i)
		}
		if p.resps[0].Allowed {
			admitted++
		}
	}
	for range 60 {
		if nw.checkAnswered(d, req).Allowed {
			admitted++
		}
	}
	if admitted > 100 {
		t.Errorf("%d admitted across c's join, limit 100", admitted)
	}
	t.Logf("%d admitted for a limit of 100", admitted)
}
