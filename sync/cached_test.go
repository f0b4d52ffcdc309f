package sync

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestCachedFlushAck walks one key through the flush protocol: a non-owner's
// first sight (decided locally, flushed at once), the owner's answer, hits
// decided from the cached view, and the scheduled flush.
func TestCachedFlushAck(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	// 6000 a minute: the sync threshold (2% of 6000 / 2 nodes = 60 hits) is
	// not reached by these few hits.
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(6000)}

	// t0: first sight on a: admitted from a fresh view, flushed at once.
	r := checkSync(t, a, t0, req)
	if !r.Allowed || r.Owner != "b" || r.Mode != check.ModeCached || r.Degraded {
		t.Fatalf("t0: got %+v, want allowed by cached mode, owner b", r)
	}
	if got := nw.queued("a", "b"); !slices.Equal(got, []string{"flush"}) {
		t.Fatalf("t0: queued a->b %v, want [flush]", got)
	}
	f := nw.queue[0].env.GetFlush()
	if f.Seq != 1 || len(f.Items) != 1 || f.Items[0].Hits != 1 || f.Items[0].Demand != 1 || f.Items[0].Key != key {
		t.Fatalf("t0: flush %v, want seq 1 with one item of 1 hit", f)
	}

	// t0+1ms: b drains the hit and answers; t0+2ms: a installs the answer.
	nw.deliver(t0.Add(2 * time.Millisecond))
	if got := remainingOn(b, nw.now, key); got != 5999 {
		t.Errorf("t0+2ms: owner remaining %d, want 5999", got)
	}
	if got := remainingOn(a, nw.now, key); got != 5999 {
		t.Errorf("t0+2ms: a's view remaining %d, want 5999", got)
	}
	if got := a.Metrics().FlushesAcked.Load(); got != 1 {
		t.Errorf("t0+2ms: FlushesAcked %d, want 1", got)
	}

	// t1: ten hits on a, decided from the view without any message.
	t1 := t0.Add(10 * time.Millisecond)
	nw.deliver(t1)
	for i := range 10 {
		if r := checkSync(t, a, t1, req); !r.Allowed {
			t.Fatalf("t1: hit %d rejected: %+v", i, r)
		}
	}
	if got := nw.queued("a", "b"); len(got) != 0 {
		t.Fatalf("t1: queued %v, want nothing before the flush interval", got)
	}
	// 5999 - 10; 0.9 of a token refilled since the owner's answer at t0+1ms.
	if got := remainingOn(a, t1, key); got != 5989 {
		t.Errorf("t1: a's view remaining %d, want 5989", got)
	}

	// t2 = t0+100ms: the scheduled flush carries the ten hits.
	nw.run(100 * time.Millisecond)
	if got := remainingOn(b, nw.now, key); got != 5999 {
		t.Errorf("t2: owner remaining %d, want 5999 (11 hits, 10 refilled)", got)
	}
	if got := a.Metrics().FlushesSent.Load(); got != 2 {
		t.Errorf("t2: FlushesSent %d, want 2", got)
	}
}

// TestFlushDuplicateIgnored: a flush received twice (a retry whose first copy
// did arrive) is applied once, counted, and answered again.
func TestFlushDuplicateIgnored(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	checkSync(t, a, t0, check.Request{Key: key, Hits: 5, Limit: perMinute(100)})
	envs := nw.take("a", "b")
	if len(envs) != 1 {
		t.Fatalf("queued %d envelopes, want 1 flush", len(envs))
	}
	dup := clone(envs[0])
	b.Step(t0, envs[0])
	b.Step(t0, dup)
	if got := remainingOn(b, t0, key); got != 95 {
		t.Errorf("owner remaining %d, want 95 (applied once)", got)
	}
	if got := b.Metrics().FlushDuplicates.Load(); got != 1 {
		t.Errorf("FlushDuplicates %d, want 1", got)
	}
	if got := nw.queued("b", "a"); !slices.Equal(got, []string{"ack", "ack"}) {
		t.Errorf("answers %v, want [ack ack]", got)
	}
	nw.settle()
	if got := a.Metrics().FlushesAcked.Load(); got != 1 {
		t.Errorf("FlushesAcked %d, want 1 (the second answer is stale)", got)
	}
}

// TestFlushRetryAfterTimeout: a lost flush is sent again after
// RequestTimeout with the same seq; the owner applies it once.
func TestFlushRetryAfterTimeout(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	nw.cut[[2]string{"a", "b"}] = true
	checkSync(t, a, t0, check.Request{Key: key, Hits: 3, Limit: perMinute(100)})
	steps := []struct {
		at      time.Duration
		heal    bool
		retried int64
		owner   int64 // owner's remaining, -1: no state
	}{
		{at: 100 * time.Millisecond, retried: 0, owner: -1},
		{at: 500 * time.Millisecond, retried: 1, owner: -1},
		{at: 999 * time.Millisecond, heal: true, retried: 1, owner: -1},
		{at: 1000 * time.Millisecond, retried: 2, owner: -1},
		{at: 1010 * time.Millisecond, retried: 2, owner: 97},
	}
	for _, s := range steps {
		if s.heal {
			nw.heal()
		}
		nw.run(t0.Add(s.at).Sub(nw.now))
		if got := a.Metrics().FlushesRetried.Load(); got != s.retried {
			t.Errorf("t0+%v: FlushesRetried %d, want %d", s.at, got, s.retried)
		}
		if got := remainingOn(b, nw.now, key); got != s.owner && !(s.owner == 97 && got >= 97) {
			t.Errorf("t0+%v: owner remaining %d, want %d", s.at, got, s.owner)
		}
	}
	if got := a.Metrics().FlushesSent.Load(); got != 1 {
		t.Errorf("FlushesSent %d, want 1 (retries reuse the message)", got)
	}
}

// TestRetryBufferDropped: while the owner does not answer, the items held
// for it are bounded by MaxRetryItems; the excess is dropped and counted.
func TestRetryBufferDropped(t *testing.T) {
	nw := newTestNet(t, func(c *Config) { c.MaxRetryItems = 3 }, "a", "b")
	a := nw.nodes["a"]
	nw.isolate("b")
	var keys []string
	for i := 0; len(keys) < 10; i++ {
		k := keyOwnedBy(t, "b", "a", "b") + "/" + string(rune('a'+i))
		if a.view.owner(k) == "b" {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		checkSync(t, a, t0, check.Request{Key: k, Hits: 1, Limit: perMinute(100)})
	}
	// One flush (the first key's, sent on first sight) is in flight and 9
	// keys are pending: 10 held, 7 over the bound.
	nw.run(100 * time.Millisecond)
	if got := a.Metrics().FlushItemsDropped.Load(); got != 7 {
		t.Errorf("FlushItemsDropped %d, want 7", got)
	}
}

// TestPushToInterestedNode: the owner pushes a key's fresh state to a node
// that asked about it, once per flush interval, when another node's flush
// changed it.
func TestPushToInterestedNode(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1000)}
	checkSync(t, b, t0, req) // b becomes interested
	nw.run(50 * time.Millisecond)
	checkSync(t, a, nw.now, check.Request{Key: key, Hits: 40, Limit: perMinute(1000)})
	nw.run(60 * time.Millisecond) // a's flush reaches c; c's push tick at t0+100ms... or next
	nw.run(100 * time.Millisecond)
	if got := b.Metrics().PushesReceived.Load(); got == 0 {
		t.Fatalf("b received no push")
	}
	if got, want := remainingOn(b, nw.now, key), remainingOn(nw.nodes["c"], nw.now, key); got != want || want > 965 {
		t.Errorf("b's view remaining %d, want the owner's %d (a's 40 hits and b's 1 taken)", got, want)
	}
	pushes := nw.nodes["c"].Metrics().PushesSent.Load()
	nw.run(time.Second)
	if got := nw.nodes["c"].Metrics().PushesSent.Load(); got != pushes {
		t.Errorf("PushesSent grew from %d to %d without changes", pushes, got)
	}
}

// TestFirstSightBudget: a node that sees a key for the first time and hears
// nothing from the owner admits at most limit/N on its own.
func TestFirstSightBudget(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	nw.cut[[2]string{"a", "c"}] = true // lost, but not reported unreachable
	admitted := 0
	for i := range 1000 {
		if r := checkSync(t, a, t0.Add(time.Duration(i)*time.Microsecond), check.Request{Key: key, Hits: 1, Limit: perMinute(900)}); r.Allowed {
			admitted++
		}
	}
	if admitted != 300 {
		t.Errorf("admitted %d on first sight, want 300 (900/3)", admitted)
	}
}

// TestFlushToNonOwnerRequeued: a flush item the receiver does not own (the
// rings disagree) is answered not-owner and its hits go out again.
func TestFlushToNonOwnerRequeued(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyMoving(t, "b", "c", []string{"a", "b", "c"}, []string{"a", "c"})
	// b believes b has left: it does not own key any more.
	b.SetMembers(t0, []string{"a", "c"})
	checkSync(t, a, t0, check.Request{Key: key, Hits: 2, Limit: perHour(1000)})
	nw.deliver(t0.Add(2 * time.Millisecond))
	if got := b.Metrics().NotOwner.Load(); got != 1 {
		t.Fatalf("NotOwner %d, want 1", got)
	}
	nw.setMembers([]string{"a", "c"}, "a", "c")
	nw.run(200 * time.Millisecond)
	if got := remainingOn(nw.nodes["c"], nw.now, key); got != 998 {
		t.Errorf("new owner c remaining %d, want 998", got)
	}
}

// TestStaleAckIgnored: an answer for a flush seq that is not in flight, or
// to another incarnation, changes nothing.
func TestStaleAckIgnored(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "b", "a", "b")
	checkSync(t, a, t0, check.Request{Key: key, Hits: 1, Limit: perMinute(100)})
	for _, ack := range []*peerv1.FlushAck{
		{Seq: 7, FlushIncarnation: a.cfg.Incarnation},
		{Seq: 1, FlushIncarnation: a.cfg.Incarnation + 1},
	} {
		a.Step(t0, &peerv1.Envelope{From: "b", To: "a", Body: &peerv1.Envelope_FlushAck{FlushAck: ack}})
	}
	if got := a.Metrics().FlushesAcked.Load(); got != 0 {
		t.Errorf("FlushesAcked %d, want 0", got)
	}
	nw.settle()
	if got := a.Metrics().FlushesAcked.Load(); got != 1 {
		t.Errorf("FlushesAcked %d, want 1 after the real answer", got)
	}
}

// TestSmallLimitNotRejectedForWantOfShare: a limit of 1 per minute over 3
// nodes would leave a non-owner a share of a third of a request. Its check
// is not rejected on that share: the owner decides it (smallForShares), and
// admits it; the next, through another non-owner, is rejected by the
// owner.
func TestSmallLimitNotRejectedForWantOfShare(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	key := keyOwnedBy(t, "c", "a", "b", "c")
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1), Mode: check.ModeCached}
	first := checkAsync(nw.nodes["a"], t0, req)
	if first.done {
		t.Fatalf("a decided alone on a third of a request: %+v", first.resps[0])
	}
	nw.settle()
	if !first.done || !first.resps[0].Allowed || first.resps[0].Owner != "c" || first.resps[0].Mode != check.ModeCached {
		t.Fatalf("first check via a: %+v done=%v, want admitted by the owner c, in cached mode", first.resps[0], first.done)
	}
	second := checkAsync(nw.nodes["b"], nw.now, req)
	nw.settle()
	if !second.done || second.resps[0].Allowed || second.resps[0].Degraded {
		t.Errorf("second check via b: %+v done=%v, want rejected (by the owner)", second.resps[0], second.done)
	}
	// The threshold: SyncFraction x capacity against the members.
	n := nw.nodes["a"]
	for _, tc := range []struct {
		limit int64
		small bool
	}{{1, true}, {100, true}, {149, true}, {150, false}, {1000, false}} {
		l := perMinute(tc.limit)
		if got := n.smallForShares(&l, 3); got != tc.small {
			t.Errorf("limit %d over 3 members: small %v, want %v", tc.limit, got, tc.small)
		}
	}
}

// TestSmallLimitsRoundRobin: the limits people set (1 to 10 a minute) on a
// fresh key, one client sending its checks round robin over 3 and 5 nodes
// (each when the last is answered, after a pause): cached mode admits
// exactly the limit, the first limit checks all (none is rejected while
// the key has tokens, by a non-owner's share or by the owner's).
func TestSmallLimitsRoundRobin(t *testing.T) {
	for _, size := range []int{3, 5} {
		names := []string{"a", "b", "c", "d", "e"}[:size]
		for _, limit := range []int64{1, 2, 3, 5, 10} {
			for _, pause := range []time.Duration{0, 700 * time.Microsecond, 3 * time.Millisecond} {
				for start := range size {
					nw := newTestNet(t, nil, names...)
					key := fmt.Sprintf("small-%d-%d-%v-%d", size, limit, pause, start)
					req := check.Request{Key: key, Hits: 1, Limit: perMinute(limit), Mode: check.ModeCached}
					admitted := 0
					for i := range 3 * int(limit) * size {
						r := nw.checkAnswered(nw.nodes[names[(start+i)%size]], req)
						if r.Allowed {
							admitted++
						} else if i < int(limit) {
							t.Errorf("%d nodes, limit %d, pause %v, from %s: check %d rejected while the key had tokens: %+v", size, limit, pause, names[start], i, r)
						}
						nw.run(pause)
					}
					if admitted != int(limit) {
						t.Errorf("%d nodes, limit %d/min, pause %v, from %s: admitted %d, want exactly %d", size, limit, pause, names[start], admitted, limit)
					}
				}
			}
		}
	}
}

// TestSharesAddUpToOneBeyond32Members: the owner splits a key's tokens
// among the nodes interested in it, whose set has one bit per member index
// mod 32. With 40 members, 39 non-owners flushing one key got a share of
// 1/32 each, 39/32 of the tokens in all: every node's budget over-counted
// what it could spend unseen. The shares must add up to at most one.
func TestSharesAddUpToOneBeyond32Members(t *testing.T) {
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("n%02d", i))
	}
	nw := newTestNet(t, nil, names...)
	key := keyOwnedBy(t, "n00", names...)
	req := check.Request{Key: key, Hits: 1, Limit: perMinute(1_000_000), Mode: check.ModeCached}
	for _, name := range names[1:] {
		checkSync(t, nw.nodes[name], nw.now, req)
	}
	nw.run(300 * time.Millisecond)
	var sum float64
	for _, name := range names[1:] {
		n := nw.nodes[name]
		s := n.st.shardOf(key)
		e := n.st.lookupCached(s, key)
		if e == nil || !e.has(flagSynced) {
			t.Fatalf("%s holds no synced view of the key", name)
		}
		sum += float64(e.share)
	}
	if sum > 1.0001 {
		t.Errorf("the 39 non-owners' shares add up to %.3f of the tokens, want at most 1", sum)
	}
	t.Logf("shares of 39 non-owners among 40 members add up to %.3f", sum)
}

// TestSmallKeySpentStaysSpentWhenOwnerLost: a key too small for shares is
// decided by its owner, but the non-owners keep its state (keepView): when
// the owner becomes unreachable, local-share starts from that view, so a
// spent key admits nothing. (Without the view it started a fresh share,
// limit / members: 24 of a spent 100-per-hour key per survivor in make
// e2e's kill and isolation scenarios.)
func TestSmallKeySpentStaysSpentWhenOwnerLost(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "c", "a", "b", "c")
	req := check.Request{Key: key, Hits: 1, Limit: perHour(100), Mode: check.ModeCached, Policy: check.PolicyLocalShare}
	admitted := 0
	for range 120 {
		if nw.checkAnswered(a, req).Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("spending the key through a: %d admitted, want 100", admitted)
	}
	nw.run(300 * time.Millisecond) // the owner's push reaches a's view
	nw.isolate("c")
	a.Unreachable(nw.now, "c")
	for i := range 50 {
		r := checkSync(t, a, nw.now, req)
		if !r.Degraded {
			t.Fatalf("check %d with the owner unreachable: %+v, want decided by the policy", i, r)
		}
		if r.Allowed {
			t.Fatalf("check %d of the spent key admitted by local-share: %+v", i, r)
		}
	}
}
