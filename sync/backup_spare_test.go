package sync

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// TestBackupSpareNotAliased: a received backup state decoded into the
// holder's spare bucket (one a merge left unused) never shares storage with
// a state it holds: after a merge, a replacement (the key's owner changed
// in the holder's view) and a new key, each held state is the one the
// merge rules give, byte for byte.
func TestBackupSpareNotAliased(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	b := nw.nodes["b"]
	l := perHour(100)
	state := func(spent int64) []byte {
		bk, err := bucket.New(l, t0)
		if err != nil {
			t.Fatal(err)
		}
		if spent > 0 {
			if _, err := bk.Take(t0, spent); err != nil {
				t.Fatal(err)
			}
		}
		s, err := bk.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	send := func(from, key string, spent int64) {
		b.Step(t0, &peerv1.Envelope{From: from, To: "b", Incarnation: 1, Body: &peerv1.Envelope_Backup{
			Backup: &peerv1.Backup{Seq: 1, Items: []*peerv1.KeyState{{Key: key, State: state(spent)}}}}})
	}
	// A holder keeps only the backups of keys their sender owns in its view
	// (onBackup): k3 is c's while a is not a member here, then a's once it
	// joins; the others are a's.
	k3 := keyMoving(t, "c", "a", []string{"b", "c"}, []string{"a", "b", "c"})
	r, err := ring.New(ring.DefaultConfig(), "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		if k := fmt.Sprintf("k%d", i); k != k3 {
			if o, _ := r.Owner(k); o == "a" {
				keys = append(keys, k)
			}
		}
	}
	k1, k2, k4 := keys[0], keys[1], keys[2]
	b.SetMembers(t0, []string{"b", "c"})
	send("c", k3, 30) // held
	b.SetMembers(t0, []string{"a", "b", "c"})
	send("a", k3, 40) // another owner's: replaces; the old one is spare
	send("a", k4, 60) // decoded into that spare
	send("a", k1, 10) // held
	send("a", k1, 5)  // merged: 10 spent stays; the received state is spare
	send("a", k2, 50) // decoded into the spare
	send("a", k1, 20) // merged: 20 spent
	for key, spent := range map[string]int64{k1: 20, k2: 50, k3: 40, k4: 60} {
		ks := b.heldState(key)
		if ks == nil {
			t.Errorf("%s: not held", key)
			continue
		}
		if want := state(spent); !bytes.Equal(ks.State, want) {
			t.Errorf("%s: held state %x, want %x (%d spent)", key, ks.State, want, spent)
		}
	}
	if got := b.Metrics().BackupsReceived.Load(); got != 7 {
		t.Errorf("BackupsReceived %d, want 7", got)
	}
}
