package sync

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// withWait gives every node of a test the default HandoffWait (newTestNet
// turns it off).
func withWait(cfg *Config) { cfg.HandoffWait = DefaultConfig().HandoffWait }

// perHour is a token bucket of n per hour, burst n: nothing refills within
// a test, so a spent key admits nothing unless a fault gives it back.
func perHour(n int64) bucket.Limit {
	return bucket.Limit{Algorithm: bucket.TokenBucket, Limit: n, Period: time.Hour}
}

// ownerLoad is the outcome of a load in owner mode.
type ownerLoad struct {
	admitted, degraded, errs, checks int
	// byNode counts admissions by the node the check was sent to.
	byNode map[string]int
}

// runOwnerLoad sends one owner-mode check of one hit of key to each of
// clients every 5 ms for d, ticking and delivering, with events[t] run at
// elapsed time t (multiples of 5 ms); then it lets every answer come back
// and counts them. Clients that are down (nil) are skipped.
func runOwnerLoad(t *testing.T, nw *testNet, clients []string, key string, l bucket.Limit, d time.Duration, events map[time.Duration]func()) ownerLoad {
	t.Helper()
	return runRequestLoad(t, nw, clients, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}, d, events)
}

// runRequestLoad is runOwnerLoad of req (its key, limit, mode and policy), one
// hit per check.
func runRequestLoad(t *testing.T, nw *testNet, clients []string, req check.Request, d time.Duration, events map[time.Duration]func()) ownerLoad {
	t.Helper()
	const every = 5 * time.Millisecond
	type sent struct {
		node string
		p    *pending
	}
	var all []sent
	for at := time.Duration(0); at < d; at += every {
		if f := events[at]; f != nil {
			f()
		}
		for _, c := range clients {
			if n := nw.nodes[c]; n != nil {
				all = append(all, sent{c, checkAsync(n, nw.now, req)})
			}
		}
		nw.deliver(nw.now.Add(every))
		nw.tick()
	}
	nw.run(3 * time.Second)
	out := ownerLoad{byNode: map[string]int{}}
	for _, s := range all {
		if !s.p.done {
			t.Fatalf("a check sent to %s never completed", s.node)
		}
		r := s.p.resps[0]
		out.checks++
		switch {
		case r.Err != nil:
			out.errs++
		case r.Allowed:
			out.admitted++
			out.byNode[s.node]++
		}
		if r.Degraded {
			out.degraded++
		}
	}
	return out
}

// spend exhausts key through node from in owner mode, and lets the backups
// go out.
func spend(t *testing.T, nw *testNet, from, key string, l bucket.Limit) {
	t.Helper()
	res := runOwnerLoad(t, nw, []string{from}, key, l, time.Duration(l.Capacity()+20)*5*time.Millisecond, nil)
	if res.admitted != int(l.Capacity()) {
		t.Fatalf("spending %q admitted %d, want %d", key, res.admitted, l.Capacity())
	}
}

// crash takes name down without a word (kill -9) and gives the survivors
// the membership without it at once (the tests here look at what the new
// owner does; the window before detection is the partition policy's).
func crash(nw *testNet, name string) {
	nw.isolate(name)
	nw.nodes[name] = nil
	var rest []string
	for _, o := range nw.names {
		if o != name {
			rest = append(rest, o)
		}
	}
	nw.names = rest
	nw.setMembers(rest, rest...)
	nw.heal()
}

// TestCrashRestoresBackup: a key spent in owner mode stays spent when its
// owner is killed: the owner backed its state up with the member that
// takes the key over, which restores it in the membership change. Without
// the backups (dropped) the key restarted from a full bucket at its new
// owner, which is the fault this fixed; now the owner's fence (fence.go)
// admits nothing as owner that its backup target does not know of: with
// every backup lost, before the crash and after it, every check goes by
// the partition policy (here local-share: limit / members per node).
func TestCrashRestoresBackup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		drop     bool
		max, min int
	}{{"with backups", false, 0, 0}, {"backups lost", true, 100, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			members := []string{"a", "b", "c"}
			nw := newTestNet(t, withWait, members...)
			if tc.drop {
				nw.drop = func(_, _ string, env *peerv1.Envelope) bool { return bodyName(env) == "backup" }
			}
			key := keyMoving(t, "c", "b", members, []string{"a", "b"})
			l := perHour(100)
			before := 0
			if tc.drop {
				res := runOwnerLoad(t, nw, []string{"a"}, key, l, 600*time.Millisecond, nil)
				before = res.admitted
				if res.degraded != res.checks {
					t.Errorf("%d of %d checks answered by the owner with no backup acknowledged", res.checks-res.degraded, res.checks)
				}
			} else {
				spend(t, nw, "a", key, l)
			}
			crash(nw, "c")
			res := runOwnerLoad(t, nw, []string{"a", "b"}, key, l, time.Second, nil)
			t.Logf("before the crash: %d admitted; after: %d of %d checks admitted (%d degraded); b restored %d keys",
				before, res.admitted, res.checks, res.degraded, nw.nodes["b"].Metrics().BackupKeysRestored.Load())
			if tc.drop && res.degraded != res.checks {
				t.Errorf("after the crash: %d of %d checks answered by the owner with no backup acknowledged", res.checks-res.degraded, res.checks)
			}
			if res.admitted > tc.max || res.admitted < tc.min || res.errs != 0 {
				t.Errorf("admitted %d (errors %d) after the crash, want %d to %d", res.admitted, res.errs, tc.min, tc.max)
			}
		})
	}
}

// TestCrashLosesAtMostOneBackupInterval measures the bound: the new owner
// of a crashed owner's key admits again at most what the owner admitted
// after its last backup, which is at most one backup interval
// (FlushInterval) plus one latency of admissions. The load asks 3000 hits
// a second of a key with 6000 a minute (100 a second after a burst of
// 6000); the owner is killed in the burst, when it admits 3000 a second,
// and in saturation, when it admits the refill. The whole run's
// admissions are compared with one bucket's.
func TestCrashLosesAtMostOneBackupInterval(t *testing.T) {
	l := perMinute(6000)
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name  string
		crash time.Duration
	}{{"in the burst", 1035 * time.Millisecond}, {"in saturation", 5035 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			members := []string{"a", "b", "c"}
			nw := newTestNet(t, withWait, members...)
			key := keyMoving(t, "c", "b", members, []string{"a", "b"})
			start := nw.now
			// Admissions at the owner c, by time, to size the bound.
			var admittedAt []time.Time
			const every = 5 * time.Millisecond
			req := check.Request{Key: key, Hits: 15, Limit: l, Mode: check.ModeOwner}
			var pend []*pending
			d := tc.crash + 3*time.Second
			var crashedAt, last time.Time
			for at := time.Duration(0); at < d; at += every {
				last = nw.now
				if at == tc.crash {
					crashedAt = nw.now
					crash(nw, "c")
				}
				p := checkAsync(nw.nodes["a"], nw.now, req)
				pend = append(pend, p)
				nw.deliver(nw.now.Add(every))
				if crashedAt.IsZero() && p.done && p.resps[0].Allowed && p.resps[0].Owner == "c" {
					admittedAt = append(admittedAt, nw.now)
				}
				nw.tick()
			}
			nw.run(time.Second)
			admitted := int64(0)
			for _, p := range pend {
				if !p.done {
					t.Fatal("a check never completed")
				}
				if p.resps[0].Allowed {
					admitted += req.Hits
				}
			}
			if crashedAt.IsZero() {
				t.Fatal("the owner was never killed")
			}
			// One bucket over the run, from the first check to the last:
			// C + r x elapsed.
			ideal := l.Capacity() + int64(float64(l.Limit)*last.Sub(start).Seconds()/l.Period.Seconds())
			window := cfg.FlushInterval + cfg.TickInterval + 2*nw.latency
			var inWindow int64
			for _, at := range admittedAt {
				if crashedAt.Sub(at) <= window {
					inWindow += req.Hits
				}
			}
			over := admitted - ideal
			t.Logf("crash at %v: admitted %d, one bucket %d, over %d; the owner admitted %d in the %v before the crash",
				tc.crash, admitted, ideal, over, inWindow, window)
			if over > inWindow+req.Hits {
				t.Errorf("over-admission %d > %d admitted in the last backup interval", over, inWindow)
			}
		})
	}
}

// TestGracefulLeaveUnderLoad: a spent key owned by a node that leaves
// gracefully admits nothing while the others still have the leaving node
// on their rings (gossip tells them 90 ms later here): the leave is
// announced behind the hand-off, the others take the node off their rings
// at once and send what they had in flight to it to the new owner. Before,
// their forwards were answered ErrLeaving and decided by the local-share
// policy on a fresh share bucket.
func TestGracefulLeaveUnderLoad(t *testing.T) {
	members := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name    string
		latency time.Duration
	}{{"1ms", time.Millisecond}, {"20ms", 20 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, withWait, members...)
			nw.latency = tc.latency
			key := keyOwnedBy(t, "c", members...)
			l := perHour(100)
			spend(t, nw, "a", key, l)
			rest := []string{"a", "b"}
			res := runOwnerLoad(t, nw, rest, key, l, time.Second, map[time.Duration]func(){
				100 * time.Millisecond: func() { nw.nodes["c"].Leave(nw.now) },
				190 * time.Millisecond: func() { nw.setMembers(rest, rest...) }, // gossip
				400 * time.Millisecond: func() {
					if !nw.nodes["c"].HandedOff() {
						t.Error("c not handed off 300 ms after Leave")
					}
					nw.nodes["c"] = nil
					nw.names = rest
				},
			})
			t.Logf("leave under load: %d of %d checks admitted, %d degraded", res.admitted, res.checks, res.degraded)
			if res.admitted != 0 || res.errs != 0 {
				t.Errorf("admitted %d (errors %d) on a spent key during the leave, want 0", res.admitted, res.errs)
			}
			if res.degraded != 0 {
				t.Errorf("%d answers degraded during a graceful leave, want 0", res.degraded)
			}
		})
	}
}

// TestRestartedOwnerUnderLoad: an owner that restarts (graceful stop, or
// kill -9 and back before the others noticed) gets its keys back before it
// decides them: a spent key admits nothing, whichever node learns of the
// restart first. The forwards another node sends the restarted owner
// before its keys come back are relayed to the interim owner (the fault
// was: answered from a fresh bucket).
func TestRestartedOwnerUnderLoad(t *testing.T) {
	members := []string{"a", "b", "c"}
	rest := []string{"a", "b"}
	for _, tc := range []struct {
		name string
		// graceful: c leaves and hands off, a and b drop it, then it comes
		// back; otherwise it is killed and restarts under the same
		// membership (faster than failure detection).
		graceful bool
		// first is the node that learns of the restart first, late the
		// other one, 100 ms later.
		first, late string
		// at is when first learns, gap how much later late does.
		at, gap time.Duration
	}{
		{"graceful, a learns first", true, "a", "b", 10 * time.Millisecond, 100 * time.Millisecond},
		{"graceful, b learns first", true, "b", "a", 10 * time.Millisecond, 100 * time.Millisecond},
		{"graceful, a learns first, slow gossip", true, "a", "b", 300 * time.Millisecond, 300 * time.Millisecond},
		{"graceful, b learns first, slow gossip", true, "b", "a", 300 * time.Millisecond, 300 * time.Millisecond},
		{"graceful, gossip slower than the request timeout", true, "a", "b", 600 * time.Millisecond, 100 * time.Millisecond},
		{"killed and back at once", false, "", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, withWait, members...)
			key := keyMoving(t, "c", "b", members, rest)
			l := perHour(100)
			spend(t, nw, "a", key, l)
			if tc.graceful {
				nw.nodes["c"].Leave(nw.now)
				nw.run(300 * time.Millisecond)
				if !nw.nodes["c"].HandedOff() {
					t.Fatal("c not handed off")
				}
				nw.nodes["c"] = nil
				nw.names = rest
				nw.setMembers(rest, rest...)
				nw.run(time.Second)
			} else {
				nw.nodes["c"] = nil
			}
			nw.now = nw.now.Add(time.Millisecond)
			// A new incarnation, lower than the old one: drivers may draw
			// them at random (the simulator does).
			c := nw.add("c", func(cfg *Config) { withWait(cfg); cfg.Incarnation = 7 })
			nw.names = members
			c.SetMembers(nw.now, members)
			events := map[time.Duration]func(){}
			if tc.graceful {
				events[tc.at] = func() { nw.setMembers(members, tc.first) }
				events[tc.at+tc.gap] = func() { nw.setMembers(members, tc.late) }
			}
			res := runOwnerLoad(t, nw, members, key, l, 2*time.Second, events)
			t.Logf("restart under load: %d of %d checks admitted (%v), %d degraded", res.admitted, res.checks, res.byNode, res.degraded)
			if res.admitted != 0 || res.errs != 0 {
				t.Errorf("admitted %d (errors %d) on a spent key after the owner restarted, want 0", res.admitted, res.errs)
			}
			if !isOwned(c, key) || remainingOn(c, nw.now, key) != 0 {
				t.Errorf("c owns %q: %v, remaining %d, want owned and 0", key, isOwned(c, key), remainingOn(c, nw.now, key))
			}
		})
	}
}

// TestBackupBatchedAndResent: backups go once per FlushInterval, only for
// keys changed since the last one, in batches of MaxBatch; a batch the
// target does not acknowledge is not lost: its keys go again, with their
// current state.
func TestBackupBatchedAndResent(t *testing.T) {
	members := []string{"a", "b"}
	nw := newTestNet(t, func(cfg *Config) { cfg.MaxBatch = 10 }, members...)
	a := nw.nodes["a"]
	var keys []string
	for i := 0; len(keys) < 25; i++ {
		k := keyOwnedBy(t, "a", members...) + "/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if a.view.owner(k) == "a" {
			keys = append(keys, k)
		}
	}
	l := perHour(100)
	for _, k := range keys {
		checkSync(t, a, nw.now, check.Request{Key: k, Hits: 10, Limit: l})
	}
	// b drops the first round of backups.
	dropping := true
	nw.drop = func(_, to string, env *peerv1.Envelope) bool { return dropping && bodyName(env) == "backup" }
	nw.run(DefaultConfig().FlushInterval)
	if got := a.Metrics().BackupsSent.Load(); got != 3 {
		t.Fatalf("BackupsSent %d after one round of 25 keys, want 3 batches of at most 10", got)
	}
	dropping = false
	// Spend more on one key before the round that sends it again.
	checkSync(t, a, nw.now, check.Request{Key: keys[0], Hits: 30, Limit: l})
	nw.run(DefaultConfig().RequestTimeout + 2*DefaultConfig().FlushInterval)
	if got := a.Metrics().BackupsRetried.Load(); got != 3 {
		t.Errorf("BackupsRetried %d, want 3", got)
	}
	b := nw.nodes["b"]
	for i, k := range keys {
		ks := b.heldState(k)
		if ks == nil {
			t.Fatalf("b holds no backup of %q", k)
		}
		want := int64(90)
		if i == 0 {
			want = 60
		}
		bk, _ := b.decodeState(ks)
		if d, _ := bk.Take(nw.now, 0); d.Remaining != want {
			t.Errorf("b's backup of %q: remaining %d, want %d", k, d.Remaining, want)
		}
	}
	// Nothing changed since: no more backups.
	sent := a.Metrics().BackupsSent.Load()
	nw.run(time.Second)
	if got := a.Metrics().BackupsSent.Load(); got != sent {
		t.Errorf("%d backups sent with nothing changed", got-sent)
	}
}

// TestBackupHolderBound: a node holds at most MaxKeys backups; the rest are
// counted, not kept. (Only the holder has the small bound: the owner keeps
// its eight keys.)
func TestBackupHolderBound(t *testing.T) {
	members := []string{"a", "b"}
	nw := newTestNet(t, func(cfg *Config) {
		if cfg.Self == "b" {
			cfg.MaxKeys = 5
		}
	}, members...)
	a, b := nw.nodes["a"], nw.nodes["b"]
	n := 0
	for i := 0; n < 8; i++ {
		k := keyOwnedBy(t, "a", members...) + "/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if a.view.owner(k) == "a" {
			checkSync(t, a, nw.now, check.Request{Key: k, Hits: 1, Limit: perHour(100)})
			n++
		}
	}
	nw.run(200 * time.Millisecond)
	held := len(b.dur.held)
	if held != 5 || b.Metrics().BackupKeysDropped.Load() < 1 {
		t.Errorf("b holds %d backups, dropped %d; want 5 and the rest dropped", held, b.Metrics().BackupKeysDropped.Load())
	}
}

// TestNewOwnerAsksBackupHolder: when a node gains a crashed member's key
// but another member holds its backup (here the new owner learns of c's
// crash and of d's join at once, so its new ring is not the ring without c
// that c backed up to), it asks that member, which has not noticed the
// crash, before deciding, and gets the state as a hand-off.
func TestNewOwnerAsksBackupHolder(t *testing.T) {
	// Such keys are rare (consistent hashing moves little besides the
	// changed members' partitions); this membership has some.
	before := []string{"a", "b", "c", "x", "y"}
	after := []string{"a", "b", "d", "x", "y"}
	rb, _ := ring.New(ring.DefaultConfig(), before...)
	rh, _ := ring.New(ring.DefaultConfig(), "a", "b", "x", "y")
	ra, _ := ring.New(ring.DefaultConfig(), after...)
	var key, holder, owner string
	for i := 0; key == "" && i < 100000; i++ {
		k := "key-" + strconv.Itoa(i)
		o, _ := rb.Owner(k)
		h, _ := rh.Owner(k)
		n, _ := ra.Owner(k)
		if o == "c" && n != h && n != "d" {
			key, holder, owner = k, h, n
		}
	}
	if key == "" {
		t.Fatal("no key with the wanted owners")
	}
	nw := newTestNet(t, withWait, before...)
	l := perHour(100)
	spend(t, nw, "a", key, l)
	if nw.nodes[holder].heldState(key) == nil {
		t.Fatalf("%s holds no backup of c's key", holder)
	}
	nw.nodes["c"] = nil
	d := nw.add("d", withWait)
	nw.names = after
	d.SetMembers(nw.now, after)
	var clients []string
	for _, o := range after {
		if o != holder && o != "d" {
			nw.nodes[o].SetMembers(nw.now, after)
			clients = append(clients, o)
		}
	}
	nw.nodes[holder].SetMembers(nw.now, []string{"a", "b", "c", "d", "x", "y"}) // the crash not noticed
	res := runOwnerLoad(t, nw, clients, key, l, 300*time.Millisecond, nil)
	t.Logf("owner %s, backup holder %s: %d of %d checks admitted", owner, holder, res.admitted, res.checks)
	if res.admitted != 0 || res.errs != 0 {
		t.Errorf("admitted %d (errors %d) of a spent key, want 0", res.admitted, res.errs)
	}
	n := nw.nodes[owner]
	if !isOwned(n, key) || remainingOn(n, nw.now, key) != 0 {
		t.Errorf("%s owns %q: %v, remaining %d; want owned and spent", owner, key, isOwned(n, key), remainingOn(n, nw.now, key))
	}
}

// TestLeavingNodeFlushesAfterAnnouncing: the others take a leaving node off
// their rings as soon as it announces its leave, yet still apply what it
// sends while it finishes: its last flush of pending hits reaches the new
// owner and its leave ends at once, not after its retries.
func TestLeavingNodeFlushesAfterAnnouncing(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, nil, members...)
	c := nw.nodes["c"]
	key := keyOwnedBy(t, "a", members...)
	l := perMinute(6000)
	checkSync(t, c, nw.now, check.Request{Key: key, Hits: 1, Limit: l})
	nw.settle()
	checkSync(t, c, nw.now, check.Request{Key: key, Hits: 40, Limit: l}) // pending on c
	c.Leave(nw.now)
	nw.settle()
	if !c.HandedOff() {
		t.Fatal("c not handed off once every message was delivered")
	}
	if got := remainingOn(nw.nodes["a"], nw.now, key); got > 5960 {
		t.Errorf("a remaining %d, want at most 5959 (c's pending hits applied)", got)
	}
	if got := c.Metrics().FlushItemsDropped.Load(); got != 0 {
		t.Errorf("FlushItemsDropped %d, want 0", got)
	}
	for _, o := range []string{"a", "b"} {
		if slices.Contains(nw.nodes[o].view.names, "c") {
			t.Errorf("%s still has c on its ring after the announcement", o)
		}
	}
}

// TestForwardResentToPeerThatDoesNotKnowUs: a node that has just started
// sends its forwards again while the owner drops them (it does not know the
// node yet); once the owner knows it, the check is answered by the owner,
// once, instead of waiting for RequestTimeout and the partition policy.
func TestForwardResentToPeerThatDoesNotKnowUs(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	members := []string{"a", "b", "c"}
	key := keyOwnedBy(t, "b", members...)
	l := perHour(100)
	c := nw.add("c", nil)
	nw.names = members
	c.SetMembers(nw.now, members) // a and b do not know c yet
	p := checkAsync(c, nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
	nw.run(120 * time.Millisecond)
	nw.setMembers(members, "a", "b")
	nw.run(300 * time.Millisecond)
	if !p.done {
		t.Fatal("the check was not answered")
	}
	if r := p.resps[0]; r.Degraded || !r.Allowed || r.Remaining != 99 {
		t.Errorf("answer %+v, want allowed by the owner, 99 remaining", r)
	}
	if got := remainingOn(nw.nodes["b"], nw.now, key); got != 99 {
		t.Errorf("b remaining %d, want 99 (the check applied once)", got)
	}
}

// TestLeaveAnnouncementOvertaken: a check that reaches the successor before
// the leaving node's hand-off and announcement do (the link from the
// leaving node to the successor is slow) is passed on to the leaving node,
// whose ErrLeaving answer comes after them on the same queue: the successor
// then owns the key with its state and decides the check; nothing is
// degraded, nothing fresh is handed out.
func TestLeaveAnnouncementOvertaken(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	l := perHour(100)
	spend(t, nw, "a", key, l)
	leaveAt := nw.now
	nw.nodes["c"].Leave(nw.now)
	slow := leaveAt.Add(20 * time.Millisecond)
	var pend []*pending
	for i := 0; i < 60; i++ {
		pend = append(pend, checkAsync(nw.nodes["a"], nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}))
		for step := 0; step < 5; step++ {
			// Every message from c to b sent before slow arrives at slow,
			// in order: the link is slow, and still one ordered queue.
			for _, m := range nw.queue {
				if m.from == "c" && m.to == "b" && m.at.Before(slow) {
					m.at = slow
				}
			}
			nw.deliver(nw.now.Add(time.Millisecond))
		}
		nw.tick()
	}
	nw.run(2 * time.Second)
	admitted, degraded := 0, 0
	for _, p := range pend {
		if !p.done {
			t.Fatal("a check never completed")
		}
		if p.resps[0].Allowed {
			admitted++
		}
		if p.resps[0].Degraded {
			degraded++
		}
	}
	if admitted != 0 || degraded != 0 {
		t.Errorf("admitted %d, degraded %d of 60 checks of a spent key during the leave, want 0 and 0", admitted, degraded)
	}
	if !isOwned(nw.nodes["b"], key) || remainingOn(nw.nodes["b"], nw.now, key) != 0 {
		t.Errorf("b should own the spent key")
	}
}

// TestDetectionWindowSharesFromBackup: while the owner of a spent key is
// unreachable but still a member (the second before a crash is detected),
// forwards to it are decided by local-share. The member holding the key's
// backup starts its share from the backed-up state and admits nothing; a
// member with no view and no backup starts a fresh share (limit / members),
// which is what the policy allows.
func TestDetectionWindowSharesFromBackup(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // b holds c's backup of key
	l := perHour(100)
	spend(t, nw, "a", key, l)
	if nw.nodes["b"].heldState(key) == nil {
		t.Fatal("b holds no backup of the spent key; the test proves nothing")
	}
	nw.isolate("c") // cut off, still a member everywhere

	res := runOwnerLoad(t, nw, []string{"b"}, key, l, time.Second, nil)
	if res.admitted != 0 || res.degraded == 0 || res.errs != 0 {
		t.Errorf("through the backup holder b: admitted %d, degraded %d, errors %d of %d; want 0 admitted, degraded answers",
			res.admitted, res.degraded, res.errs, res.checks)
	}
	res = runOwnerLoad(t, nw, []string{"a"}, key, l, time.Second, nil)
	share := int(shareLimit(l, len(members)).Capacity())
	if res.admitted == 0 || res.admitted > share || res.errs != 0 {
		t.Errorf("through a (no view, no backup): admitted %d, errors %d; want 1 to %d (a fresh share)", res.admitted, res.errs, share)
	}
	t.Logf("in the detection window: b (backup holder) admitted 0, a admitted %d of its share %d", res.admitted, share)
}

// TestRestartedOwnerDrainsReserve: an owner killed and back at once (under
// the same membership: faster than failure detection) asks its backup
// holder for its keys' states. What it admitted after its last
// acknowledged backup, up to the reserve, is in no state the holder has:
// the holder gives the state with the reserve drained (fence.go), as to
// any new owner. It gave it as backed up, since the member that backed it
// up was live, on the ground that its own hand-off would bring the real
// state; a restarted owner has none, and admitted the hits again (seed 828
// of the fault checker: +0.92 on k0, the owner restarted for 645 ms).
func TestRestartedOwnerDrainsReserve(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // c owns it, b holds its backups
	l := perHour(100)                                          // a reserve of 10
	first := runOwnerLoad(t, nw, []string{"a"}, key, l, 50*5*time.Millisecond, nil)
	// c's backups to b are lost from now on: b holds the state of 50 spent.
	nw.drop = func(from, to string, env *peerv1.Envelope) bool {
		_, backup := env.Body.(*peerv1.Envelope_Backup)
		return from == "c" && to == "b" && backup
	}
	more := runOwnerLoad(t, nw, []string{"a"}, key, l, 5*5*time.Millisecond, nil)
	nw.drop = nil
	nw.nodes["c"] = nil
	nw.now = nw.now.Add(time.Millisecond)
	c := nw.add("c", func(cfg *Config) { withWait(cfg); cfg.Incarnation = 7 })
	c.SetMembers(nw.now, members)
	after := runOwnerLoad(t, nw, members, key, l, 2*time.Second, nil)
	total := first.admitted + more.admitted + after.admitted
	t.Logf("admitted %d, then %d unbacked, then %d after the restart (%v)", first.admitted, more.admitted, after.admitted, after.byNode)
	if first.admitted != 50 || more.admitted != 5 {
		t.Fatalf("admitted %d and %d before the restart, want 50 and 5", first.admitted, more.admitted)
	}
	if total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestHeldBackupKeptUntilItsFenceRefills: a held backup whose state has
// refilled to a full bucket is dropped by the sweep, but the owner may have
// drained up to its reserve beyond that state (fence.go): whoever starts
// from the backup starts from it minus the reserve, which refills a
// reserve later. Dropped as soon as the state itself was full, the key's
// new owner started from a fresh bucket in between (the fault checker's
// owner seed 28: 3 nodes, n3 cut off for 4.07 s, its key restored from
// nothing 5 s after its last backup: +2.47 over the envelope). Now a held
// backup is dropped once its state, reserve drained, is a full bucket.
// c's releases are lost (as in the cut of seed 28): c, its record swept
// idle, would release the key (backup.go, sendReleases: its state full,
// reserve 0, nothing more drained), and b would sweep it at once, rightly.
func TestHeldBackupKeptUntilItsFenceRefills(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.SweepInterval = 100 * time.Millisecond }, members...)
	nw.drop = func(_, _ string, env *peerv1.Envelope) bool { return env.GetBackup().GetRelease() }
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // c owns it, b holds its backups
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: 10 * time.Second}
	// 10 a second, burst 100: a reserve of 10 tokens, one second of refill.
	res := runOwnerLoad(t, nw, []string{"a"}, key, l, 30*5*time.Millisecond, nil)
	if res.admitted != 30 {
		t.Fatalf("admitted %d, want 30", res.admitted)
	}
	// runOwnerLoad let 3 s pass: the backup of 70 tokens has refilled to
	// 100 by now, less its reserve 10 not until one second later.
	nw.run(200 * time.Millisecond)
	crash(nw, "c")
	got := remainingOn(nw.nodes["b"], nw.now, key)
	if got < 0 {
		got = l.Capacity() // no state: its first check starts a fresh bucket
	}
	t.Logf("b starts from %d tokens", got)
	if got > 95 {
		t.Errorf("b starts %q from %d tokens, want the backup less its reserve (at most 95)", key, got)
	}
}

// TestBackupRefusedFromAnotherOwnersKey: two members each see the other
// fail (asymmetric failure detection), each a majority in its own view:
// x keeps owning its key, y takes it over from its backup. Both back the
// key up to z (the key's owner once both are gone), which sees everyone
// and acknowledged both: two fenced owners of one key, each admitting on
// its own state (the fault checker's owner seed 858: 4 nodes, n3 cut off
// for 1.03 s, n3 and n4 each seeing the other fail: +1.93 on k5). z now
// acknowledges no backup carrying a key its sender does not own in z's
// view: y's fence does not rise, and y's checks of the key go by policy.
func TestBackupRefusedFromAnotherOwnersKey(t *testing.T) {
	members := []string{"w", "x", "y", "z"}
	rAll, _ := ring.New(ring.DefaultConfig(), members...)
	rY, _ := ring.New(ring.DefaultConfig(), "w", "y", "z")
	rZ, _ := ring.New(ring.DefaultConfig(), "w", "z")
	key := ""
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		a, _ := rAll.Owner(k)
		b, _ := rY.Owner(k)
		c, _ := rZ.Owner(k)
		if a == "x" && b == "y" && c == "z" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key owned by x, then y, then z")
	}
	nw := newTestNet(t, func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyFailClosed }, members...)
	l := perHour(100)
	first := runOwnerLoad(t, nw, []string{"w"}, key, l, 50*5*time.Millisecond, nil)
	nw.nodes["x"].SetMembership(nw.now, []string{"w", "x", "z"}, []string{"y"})
	nw.nodes["y"].SetMembership(nw.now, []string{"w", "y", "z"}, []string{"x"})
	after := runOwnerLoad(t, nw, []string{"w", "y"}, key, l, 4*time.Second, nil)
	total := first.admitted + after.admitted
	t.Logf("admitted %d, then %d with x and y each seeing the other failed (%v, %d degraded); z refused %d backups",
		first.admitted, after.admitted, after.byNode, after.degraded, nw.nodes["z"].Metrics().BackupsRefused.Load())
	if total > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", total)
	}
}

// TestRestartedOwnerGrantsNoLeaseBeforeItsState: an owner killed and back
// at once awaits its keys' states (a hand-off, or its backup holder's
// answer to a probe) before deciding them; a flush asking for a lease
// that reached it first was applied on a fresh bucket and granted from
// it (the fault checker's leased seed 828: 3 nodes, the owner restarted
// for 645 ms, up to +40 hits on four keys). Such a flush is now answered
// not-owner until the state has come: a spent key stays spent. (A state
// that never comes is the await's limit, as in owner mode: after
// HandoffWait the key starts afresh.)
func TestRestartedOwnerGrantsNoLeaseBeforeItsState(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // c owns it, b holds its backups
	l := perHour(100)
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}
	admitted := 0
	load := func(n int, from ...string) {
		for i := range n {
			p := checkAsync(nw.nodes[from[i%len(from)]], nw.now, req)
			for range 200 {
				nw.run(time.Millisecond)
				if p.done {
					break
				}
			}
			if p.done && p.resps[0].Allowed {
				admitted++
			}
			nw.run(20 * time.Millisecond)
		}
	}
	load(150, "a") // a holds a lease, renewed as it spends: the key is spent
	before := admitted
	nw.nodes["c"] = nil
	nw.now = nw.now.Add(time.Millisecond)
	c := nw.add("c", func(cfg *Config) { withWait(cfg); cfg.Incarnation = 7 })
	c.SetMembers(nw.now, members)
	// a asks c for a lease with its flushes; then b's first checks of the
	// key go to c, which probes b for the state it awaits.
	load(10, "a")
	load(100, "a", "b")
	t.Logf("admitted %d in leased mode, then %d after c restarted (c granted %d lease tokens)", before, admitted-before, c.Metrics().LeaseTokensGranted.Load())
	if admitted > 100 {
		t.Errorf("admitted %d in all on a key of 100 an hour, want at most 100", admitted)
	}
}

// TestOwnerKeepsItsStateAtStart: a key's owner, on a cluster just started,
// keeps exactly what its checks left: 500 of 1000 after 500 admitted. The
// rule that a restarted owner gets its held backup with the reserve drained
// (TestRestartedOwnerDrainsReserve) first applied to any probe from the
// member that backed the state up, in whatever life: an owner still
// awaiting its partitions' hand-offs after its start probes the holder,
// merged the answer, and lost the reserve (402 left).
func TestOwnerKeepsItsStateAtStart(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"})
	res := runOwnerLoad(t, nw, []string{"a", "b"}, key, perHour(1000), 1250*time.Millisecond, nil)
	if res.admitted != 500 {
		t.Fatalf("%d admitted, want 500", res.admitted)
	}
	if got := remainingOn(nw.nodes["c"], nw.now, key); got < 500 {
		t.Errorf("the owner has %d left after 500 of 1000 admitted, want 500", got)
	}
}
