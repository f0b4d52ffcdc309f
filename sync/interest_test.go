package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// members returns n member names, n00, n01, ..., whose index in a view is
// their number.
func members(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("n%02d", i))
	}
	return names
}

// TestPushReachesMemberBeyond32: with 40 members, a change flushed by n33
// is pushed to n01, which checked the key too. Before, interest was a
// 32-bit mask indexed by member index mod 32: n01 and n33 shared a bit, so
// n33's own flush (whose answer is its push) marked n01 fresh as well, and
// n01 kept deciding on a view without n33's hits.
func TestPushReachesMemberBeyond32(t *testing.T) {
	names := members(40)
	nw := newTestNet(t, nil, names...)
	owner, a, b := nw.nodes["n00"], nw.nodes["n01"], nw.nodes["n33"]
	key := keyOwnedBy(t, "n00", names...)
	l := perMinute(1_000_000)
	checkSync(t, a, nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached})
	checkSync(t, b, nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached})
	nw.settle() // first sight: both flush at once and are answered
	checkSync(t, b, nw.now, check.Request{Key: key, Hits: 5000, Limit: l, Mode: check.ModeCached})
	nw.run(150 * time.Millisecond) // b's early flush, then the owner's push
	if got, want := remainingOn(a, nw.now, key), remainingOn(owner, nw.now, key); got != want {
		t.Errorf("n01's view remaining %d, want the owner's %d (n33's 5000 hits pushed to it)", got, want)
	}
}

// TestSharesExactBeyond32Members: two non-owners of 40 members check a key:
// each is given half of it. Before, a bit of the 32-bit interest mask
// counted as ceil(40/32) = 2 members, so each was given a quarter and the
// key admitted half of its tokens between syncs.
func TestSharesExactBeyond32Members(t *testing.T) {
	names := members(40)
	nw := newTestNet(t, nil, names...)
	key := keyOwnedBy(t, "n00", names...)
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1_000_000), Mode: check.ModeCached}
	for _, name := range []string{"n01", "n02"} {
		checkSync(t, nw.nodes[name], nw.now, req)
	}
	nw.settle()
	for _, name := range []string{"n01", "n02"} {
		n := nw.nodes[name]
		checkSync(t, n, nw.now, req) // dirty again: flushed at the next interval
	}
	nw.run(100 * time.Millisecond)
	for _, name := range []string{"n01", "n02"} {
		n := nw.nodes[name]
		e := n.st.lookupCached(n.st.shardOf(key), key)
		if e == nil || e.share != 0.5 {
			t.Errorf("%s's view %+v, want a share of 0.5 (two nodes check the key)", name, e)
		}
	}
}

// TestPushesBoundedByFlushes: 60 members check a key once; then its owner
// admits hits of it every 10ms for 2s. Each non-owner is sent at most one
// scheduled push of the key per flush of it, and one more when the key is
// spent: at most 2 x 59 pushes. Before, every change was pushed to every
// member that had flushed the key within InterestTTL: 59 pushes every
// FlushInterval, about 1180 in 2s, growing with the cluster.
func TestPushesBoundedByFlushes(t *testing.T) {
	names := members(60)
	nw := newTestNet(t, nil, names...)
	owner := nw.nodes["n00"]
	key := keyOwnedBy(t, "n00", names...)
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1_000_000), Mode: check.ModeCached}
	for _, name := range names[1:] {
		checkSync(t, nw.nodes[name], nw.now, req)
	}
	nw.settle()
	before := owner.Metrics().PushesSent.Load()
	for range 200 {
		checkSync(t, owner, nw.now, check.Request{Key: key, Hits: 10, Limit: perMinute(1_000_000), Mode: check.ModeCached})
		nw.run(10 * time.Millisecond)
	}
	pushes := owner.Metrics().PushesSent.Load() - before
	t.Logf("59 non-owners that checked a key once were sent %d pushes of it over 2s of changes", pushes)
	if pushes > 2*59 {
		t.Errorf("%d pushes, want at most %d (two per flush)", pushes, 2*59)
	}
}

// TestSpentKeyPushedToDormantView: a non-owner that stopped checking a key
// is no longer sent its changes, but is told when the key is spent: the
// partition policy starts from that view.
func TestSpentKeyPushedToDormantView(t *testing.T) {
	names := members(25)
	nw := newTestNet(t, nil, names...)
	owner, a := nw.nodes["n00"], nw.nodes["n01"]
	key := keyOwnedBy(t, "n00", names...)
	l := perMinute(100_000)
	checkSync(t, a, nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeCached})
	nw.settle()
	// The owner's own checks (owner mode: exact) change the key; each may
	// wait for the key's fence (fence.go), so the network runs until answered.
	spend := check.Request{Key: key, Hits: 1000, Limit: l, Mode: check.ModeOwner}
	nw.checkAnswered(owner, spend)
	nw.run(300 * time.Millisecond) // pushed to a once; a's interest is no longer current
	if got := a.Metrics().PushesReceived.Load(); got != 1 {
		t.Fatalf("a received %d pushes after its flush and one change, want 1", got)
	}
	nw.checkAnswered(owner, spend)
	nw.run(200 * time.Millisecond)
	if got := a.Metrics().PushesReceived.Load(); got != 1 {
		t.Errorf("a dormant view was pushed a change: %d pushes, want still 1", got)
	}
	for _, hits := range []int64{1000, 1} { // spend it all, at one instant
		spend.Hits = hits
		for nw.checkAnswered(owner, spend).Allowed {
		}
	}
	nw.run(200 * time.Millisecond)
	if got, want := remainingOn(a, nw.now, key), remainingOn(owner, nw.now, key); got != want {
		t.Errorf("a's view remaining %d after the owner spent the key, want the owner's %d (spent, refilling)", got, want)
	}
}

// TestInterestKeptAcrossViewSizes: the interest of a key survives a
// membership change from 10 members (held in the entry) to 40 (held in the
// wide table) and back, each member under its new index.
func TestInterestKeptAcrossViewSizes(t *testing.T) {
	all := members(40)
	small := all[:10]
	nw := newTestNet(t, nil, all...)
	nw.setMembers(small, small...)
	owner := nw.nodes["n00"]
	key := keyMoving(t, "n00", "n00", small, all)
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1_000_000), Mode: check.ModeCached}
	for _, name := range []string{"n01", "n07"} {
		checkSync(t, nw.nodes[name], nw.now, req)
	}
	nw.settle()
	interested := func(step string, want ...string) {
		t.Helper()
		s := owner.st.shardOf(key)
		e := owner.st.lookupOwned(s, key)
		if e == nil {
			t.Fatalf("%s: the owner holds no owned record of the key", step)
		}
		var buf [4]uint64
		sets := owner.readSets(s, key, e, &buf)
		var got []string
		for i, name := range owner.view.names {
			if sets.cur[i/64]&(1<<(i%64)) != 0 {
				got = append(got, name)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: interested members %v, want %v", step, got, want)
		}
	}
	interested("10 members", "n01", "n07")
	owner.SetMembers(nw.now, all)
	if !owner.view.wide() {
		t.Fatalf("a view of 40 members keeps interest in the record")
	}
	interested("40 members", "n01", "n07")
	owner.SetMembers(nw.now, small)
	interested("10 members again", "n01", "n07")
}

// TestIdleTickVisitsNoPeer: a node of 100 members with nothing to send has
// no busy peer; a check lists its key's owner until the flush is answered.
func TestIdleTickVisitsNoPeer(t *testing.T) {
	names := members(100)
	nw := newTestNet(t, nil, names...)
	a := nw.nodes["n01"]
	nw.run(50 * time.Millisecond)
	if len(a.busy) != 0 {
		t.Fatalf("idle: %d busy peers, want 0", len(a.busy))
	}
	key := keyOwnedBy(t, "n00", names...)
	checkSync(t, a, nw.now, check.Request{Key: key, Hits: 1, Limit: perMinute(1_000_000), Mode: check.ModeCached})
	if len(a.busy) != 1 || a.busy[0].name != "n00" {
		t.Fatalf("after a check: busy peers %d, want the owner alone", len(a.busy))
	}
	nw.run(300 * time.Millisecond)
	if len(a.busy) != 0 {
		t.Errorf("after the flush was answered: %d busy peers, want 0", len(a.busy))
	}
}
