package sync

import (
	"testing"
	"time"
)

// TestBackupTargetRestarted: c owns a key spent in owner mode, and b
// holds its backups. b restarts faster than failure detection (a new
// incarnation, the same membership): its new life holds none of c's
// backups, and c learns of the restart from b's first message. c must
// back the key up with b's new life before it counts on b knowing it.
// Before, c's fence kept the bound b's previous life had acknowledged and
// the key, spent and unchanged since, was never backed up again: when c
// crashed, b took the key over from no state and admitted a fresh bucket,
// 100 more on a key of 100 an hour.
func TestBackupTargetRestarted(t *testing.T) {
	members := []string{"a", "b", "c"}
	nw := newTestNet(t, withWait, members...)
	key := keyMoving(t, "c", "b", members, []string{"a", "b"}) // c owns it, b holds its backups
	l := perHour(100)
	spend(t, nw, "a", key, l)
	// b restarts: a new process, same name, no held state; a and c see no
	// membership change.
	nw.now = nw.now.Add(time.Millisecond)
	b := nw.add("b", withWait)
	b.SetMembers(nw.now, members)
	nw.run(500 * time.Millisecond)
	if got := nw.nodes["c"].Metrics().PeerRestarts.Load(); got != 1 {
		t.Fatalf("c saw %d restarts of b, want 1", got)
	}
	crash(nw, "c")
	res := runOwnerLoad(t, nw, []string{"a", "b"}, key, l, time.Second, nil)
	t.Logf("after c's crash: %d of %d checks admitted (%d degraded); b restored %d keys",
		res.admitted, res.checks, res.degraded, b.Metrics().BackupKeysRestored.Load())
	if res.admitted != 0 || res.errs != 0 {
		t.Errorf("admitted %d (errors %d) on a spent key after its owner's crash, want 0", res.admitted, res.errs)
	}
}
