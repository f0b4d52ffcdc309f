package sync

import (
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestRoleChanges: toOwned and toCached move a key between the shard's two
// tables as a record of the other role that keeps the key, the bucket's
// state and the last use, starts its role's fields afresh (an owned record
// takes this node's demand as everyone's and as its own; a view takes the
// owner's own demand, no share, and is marked moved and synced), retire the
// record they replace (flags cleared, so that the dirty, changed and backup
// lists look the key up again), and keep the store's count and charge.
func TestRoleChanges(t *testing.T) {
	nw := newTestNet(t, nil, "a")
	a := nw.nodes["a"]
	const key = "user:0000042"
	s := a.st.shardOf(key)
	c := coarse(t0) + 5
	v, err := newCached(new(bucket.Interner), key, perMinute(60), t0, c)
	if err != nil {
		t.Fatal(err)
	}
	a.st.insertEntry(s, a.st.hash(key), v, t0, c)
	_, _ = v.b.Take(t0, 7)
	v.dem, v.pending, v.inFlight, v.share, v.asked = 3, 2, 1, 0.25, 9
	v.set(flagDirty | flagSynced)
	keys, bytes := a.Metrics().Keys.Load(), a.Metrics().KeyBytes.Load()

	o := a.st.toOwned(s, v, t0)
	if o.key != key || o.used() != c || o.dem != 3 || o.ownDemand != 3 || o.interest != 0 || o.ownAdmitted != 0 || o.lastFlush != 0 || o.meta&flagMask != 0 {
		t.Errorf("toOwned: %+v", o)
	}
	if d, _ := o.b.Clone().Take(t0, 0); d.Remaining != 53 {
		t.Errorf("toOwned: %d tokens remaining, want 53 (the view's)", d.Remaining)
	}
	if v.meta&flagMask != 0 {
		t.Errorf("the replaced view keeps flags %#x", v.meta&flagMask)
	}
	if a.st.lookupOwned(s, key) != o || a.st.lookupCached(s, key) != nil || a.st.lookup(s, key) != record(o) {
		t.Error("toOwned: the key is not found as the owned record alone")
	}

	o.ownDemand, o.dem, o.interest, o.ownAdmitted, o.lastFlush = 1.5, 8, 3, 4, 2
	o.set(flagChanged | flagBackup)
	w := a.st.toCached(s, o)
	if w.key != key || w.used() != c || w.dem != 1.5 || w.share != 0 || w.pending != 0 || w.inFlight != 0 || w.asked != 0 {
		t.Errorf("toCached: %+v", w)
	}
	if !w.has(flagMoved) || !w.has(flagSynced) || w.has(flagDirty) {
		t.Errorf("toCached: flags %#x, want moved and synced", w.meta&flagMask)
	}
	if o.meta&flagMask != 0 {
		t.Errorf("the replaced owned record keeps flags %#x", o.meta&flagMask)
	}
	if d, _ := w.b.Clone().Take(t0, 0); d.Remaining != 53 {
		t.Errorf("toCached: %d tokens remaining, want 53", d.Remaining)
	}
	if a.st.lookupCached(s, key) != w || a.st.lookupOwned(s, key) != nil {
		t.Error("toCached: the key is not found as the view alone")
	}
	if got, gotB := a.Metrics().Keys.Load(), a.Metrics().KeyBytes.Load(); got != keys || gotB != bytes {
		t.Errorf("Keys %d, KeyBytes %d after two changes of role, want %d, %d", got, gotB, keys, bytes)
	}
}
