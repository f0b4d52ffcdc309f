package sync

import (
	"testing"
)

// TestFlushRoutes checks the routes cached in the dirty lists (route,
// shard.resolveRoute) against what a lookup of every listed key gives: a
// key routed to b stays listed while flushes go to other peers and goes with
// the flush to b; a listed entry that became owned is dropped; and after an
// entry was removed and the key listed again with a new entry, the first
// listing (whose route is stale) carries the new entry and the second is
// dropped, as when every listing was looked up.
func TestFlushRoutes(t *testing.T) {
	l := perMinute(10)
	c := coarse(t0)
	setup := func(t *testing.T) (*Node, *view, *shard, string) {
		nw := newTestNet(t, nil, "a", "b", "c")
		a := nw.nodes["a"]
		key := keyOwnedBy(t, "b", "a", "b", "c")
		return a, a.view, a.st.shardOf(key), key
	}
	list := func(t *testing.T, a *Node, v *view, s *shard, key string, hits int64) *cachedKey {
		t.Helper()
		e, _, _, _, err := a.cachedEntry(s, key, l, 1, t0, c)
		if err != nil || e == nil {
			t.Fatal(err)
		}
		e.pending += hits
		a.markRouted(s, key, e, v.peers["b"], v)
		return e
	}
	flush := func(a *Node, v *view, to string) *flight {
		p := v.peers[to]
		a.flushOne(t0, v, p)
		f := p.flight
		p.flight = nil
		return f
	}
	listed := func(s *shard) int {
		if len(s.dirty) != len(s.routes) {
			t.Fatalf("dirty list of %d keys, %d routes", len(s.dirty), len(s.routes))
		}
		return len(s.dirty)
	}

	t.Run("routed", func(t *testing.T) {
		a, v, s, key := setup(t)
		list(t, a, v, s, key, 3)
		if f := flush(a, v, "c"); f != nil {
			t.Errorf("flush to c: got %d items, want none", len(f.msg.Items))
		}
		if got := listed(s); got != 1 {
			t.Errorf("after the flush to c: %d keys listed, want 1", got)
		}
		f := flush(a, v, "b")
		if f == nil || len(f.msg.Items) != 1 || f.msg.Items[0].Key != key || f.msg.Items[0].Hits != 3 {
			t.Fatalf("flush to b: got %v, want one item of %s with 3 hits", f, key)
		}
		if got := listed(s); got != 0 {
			t.Errorf("after the flush to b: %d keys listed, want 0", got)
		}
	})
	t.Run("owned", func(t *testing.T) {
		a, v, s, key := setup(t)
		e := list(t, a, v, s, key, 3)
		a.st.toOwned(s, e, t0)
		if f := flush(a, v, "c"); f != nil {
			t.Errorf("flush to c: got %d items, want none", len(f.msg.Items))
		}
		if got := listed(s); got != 0 {
			t.Errorf("an owned entry stayed listed: %d keys, want 0", got)
		}
	})
	t.Run("stand-in", func(t *testing.T) {
		// A peer value that is not v's (quorum.go's stand-ins for members
		// lost to a partition) is not trusted as a route.
		a, v, s, key := setup(t)
		e, _, _, _, err := a.cachedEntry(s, key, l, 1, t0, c)
		if err != nil || e == nil {
			t.Fatal(err)
		}
		e.pending = 4
		a.markRouted(s, key, e, &peer{name: "b"}, v)
		f := flush(a, v, "b")
		if f == nil || len(f.msg.Items) != 1 || f.msg.Items[0].Hits != 4 {
			t.Fatalf("flush to b: got %v, want one item with 4 hits", f)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		a, v, s, key := setup(t)
		e := list(t, a, v, s, key, 3)
		a.st.removeEntry(s, key, a.st.toOwned(s, e, t0))
		list(t, a, v, s, key, 5)
		if got := listed(s); got != 2 {
			t.Fatalf("%d keys listed, want the stale listing and the new one", got)
		}
		f := flush(a, v, "b")
		if f == nil || len(f.msg.Items) != 1 || f.msg.Items[0].Hits != 5 {
			t.Fatalf("flush to b: got %v, want one item with the new entry's 5 hits", f)
		}
		if got := listed(s); got != 0 {
			t.Errorf("after the flush to b: %d keys listed, want 0", got)
		}
	})
}
