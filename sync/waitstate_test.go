package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// waitStateNet is the scenario of TestTakeoverWaitAnswerCarriesState:
// three nodes b, c and a under local-share, an owner-mode key of 40 an
// hour spent at its owner a, a crashed, c (which holds a's backup of the
// key) taking it over and awaiting the confirmation, its backups to b
// dropped; tamper, when not nil, sees (and may change) every message sent
// from then on. It returns the network, the key, and what b admitted of 4
// checks during c's wait.
func waitStateNet(t *testing.T, l bucket.Limit, tamper func(from, to string, env *peerv1.Envelope)) (nw *testNet, key string, admitted int) {
	t.Helper()
	all := []string{"b", "c", "a"} // run ticks at the first node's interval: not a
	tweak := func(cfg *Config) { withWait(cfg); cfg.Policy = check.PolicyLocalShare }
	nw = newTestNet(t, tweak, all...)
	live := without(all, "a")
	key = keyMoving(t, "a", "c", all, live)
	a, b, c := nw.nodes["a"], nw.nodes["b"], nw.nodes["c"]
	if r := nw.checkAnswered(a, check.Request{Key: key, Hits: 40, Limit: l, Mode: check.ModeOwner}); !r.Allowed || r.Degraded {
		t.Fatalf("a spending the key: %+v", r)
	}
	nw.run(time.Second) // a's backup goes out
	if c.heldState(key) == nil {
		t.Fatalf("c holds no backup of %s", key)
	}
	// c's backups to b (its new backup target) are lost.
	nw.drop = func(from, to string, env *peerv1.Envelope) bool {
		if tamper != nil {
			tamper(from, to, env)
		}
		return from == "c" && to == "b" && bodyName(env) == "backup"
	}
	nw.nodes["a"] = nil
	for _, m := range live {
		nw.nodes[m].SetMembership(nw.now, live, []string{"a"})
	}
	if !c.view.unconfirmed(key) {
		t.Fatalf("c right after the crash: %s not an unconfirmed takeover", key)
	}
	degraded := 0
	for range 4 {
		r := nw.checkAnswered(b, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner})
		if r.Allowed {
			admitted++
		}
		if r.Degraded {
			degraded++
		}
	}
	if !c.view.takingOver(key) {
		t.Fatalf("c decides %s as owner already: the checks did not fall in its wait", key)
	}
	t.Logf("b during c's takeover wait: %d of 4 admitted, %d degraded", admitted, degraded)
	if degraded != 4 {
		t.Fatalf("%d of b's 4 checks degraded, want 4 (c answers not-owner while it waits)", degraded)
	}
	return nw, key, admitted
}

// TestTakeoverWaitAnswerCarriesState: in waitStateNet, b goes by the
// local-share policy while c waits and, holding no view of an owner-mode
// key, starts its share from c's backup of the key once that has come.
// Here it has not (dropped): before, b started a fresh share (20 of 40)
// and admitted 4 of 4 checks of a spent key (as the root package's
// TestClockSkewBackupRealNodes did through n2 in 1 of 16 loaded runs). c's
// not-owner answer now follows c's state of the key, restored from a's
// drained backup (waitState): b's share starts from it, spent, and admits
// none.
func TestTakeoverWaitAnswerCarriesState(t *testing.T) {
	_, _, admitted := waitStateNet(t, perHour(40), nil)
	if admitted != 0 {
		t.Errorf("b admitted %d of 4 checks of a spent key through its local share, want 0", admitted)
	}
}

// TestTakeoverWaitStateGivesWayToLaterBackup: the state c's answers
// carry in its wait (TestTakeoverWaitAnswerCarriesState; here a key of 40
// a minute) starts b's share of that episode only: it is not kept as a
// view. 93 s later the key, refilled, is spent again at c, whose backups
// now reach b; then c is cut off. b's share of the new episode starts from
// that backup: spent, nothing admitted. Before, 4 of 4: b's admissions in
// the wait had left a view of the key (their debt, charge.go) that c's
// spending did not reach (20 left when c had none), and the new share
// started from it, not from the later backup.
func TestTakeoverWaitStateGivesWayToLaterBackup(t *testing.T) {
	l := perMinute(40)
	nw, key, _ := waitStateNet(t, l, nil)
	b, c := nw.nodes["b"], nw.nodes["c"]
	nw.drop = nil
	nw.run(3 * time.Second) // confirmed, the wait over
	if c.view.takingOver(key) {
		t.Fatalf("c still waits to decide %s", key)
	}
	nw.run(90 * time.Second)
	spent := 0
	for range 30 {
		if r := nw.checkAnswered(c, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}); r.Allowed && !r.Degraded {
			spent++
		}
	}
	nw.run(time.Second) // c's backup goes out
	if spent < 15 || spent > 25 {
		t.Fatalf("c admitted %d as owner 93 s on, want about 22 (the refill, less the reserve drained at the takeover)", spent)
	}
	if h := b.heldState(key); h == nil {
		t.Fatalf("b holds no backup of %s from c", key)
	}
	nw.isolate("c")
	b.Unreachable(nw.now, "c")
	admitted := 0
	for range 4 {
		if r := checkSync(t, b, nw.now, check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeOwner}); r.Allowed {
			admitted++
		}
	}
	t.Logf("c admitted %d 93 s on; b, c cut off: %d of 4 admitted", spent, admitted)
	if admitted != 0 {
		t.Errorf("b admitted %d of 4 checks of a key spent at c and backed up to b, want 0", admitted)
	}
}

// TestTakeoverWaitStateMalformed: a not-owner answer whose state does not
// decode is counted malformed and the check goes by the policy from what
// the asking node holds, as without a state (here a fresh share: 4 of 4).
// A state is decoded only while the episode has no share yet (seedShare):
// not every answer's is.
func TestTakeoverWaitStateMalformed(t *testing.T) {
	tampered := 0
	nw, _, admitted := waitStateNet(t, perHour(40), func(from, to string, env *peerv1.Envelope) {
		rep := env.GetForwardReply()
		if from != "c" || to != "b" || rep == nil {
			return
		}
		for _, d := range rep.Items {
			if len(d.State) > 0 {
				d.State = []byte{0xff, 0x01}
				tampered++
			}
		}
	})
	b := nw.nodes["b"]
	t.Logf("states tampered %d, malformed at b %d, admitted %d of 4", tampered, b.Metrics().Malformed.Load(), admitted)
	if m := b.Metrics().Malformed.Load(); tampered == 0 || m == 0 || m > int64(tampered) {
		t.Errorf("tampered %d states, b counted %d malformed: want some, at most every one", tampered, m)
	}
	if admitted != 4 {
		t.Errorf("b admitted %d of 4 with the states malformed, want 4 (a fresh share, as without them)", admitted)
	}
}
