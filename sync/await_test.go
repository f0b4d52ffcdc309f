package sync

import "testing"

// TestJoinedOwnerAsksPreviousOwnerFirst: a node that joins (or restarts) and
// becomes a key's owner before the previous owner has heard of the join
// asks the previous owner instead of deciding on a fresh bucket, so a spent
// key stays spent.
func TestJoinedOwnerAsksPreviousOwnerFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool
	}{{"forward dropped, hand-off before timeout", false}, {"hand-off arrives first", true}} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newTestNet(t, nil, "a", "b")
			a := nw.nodes["a"]
			before, after := []string{"a", "b"}, []string{"a", "b", "c"}
			key := keyMoving(t, "a", "c", before, after)
			l := perMinute(60)
			check(t, a, t0, Request{Key: key, Hits: 60, Limit: l})

			c := nw.add("c", func(cfg *Config) { cfg.HandoffWait = DefaultConfig().HandoffWait })
			nw.names = after
			// c learns of itself first: a still sees itself as the owner.
			nw.setMembers(after, "c")
			if tc.wait {
				nw.setMembers(after, "a", "b")
			}
			reqs := []Request{{Key: key, Hits: 1, Limit: l, Mode: ModeCached}}
			resps := make([]Response, 1)
			done := false
			c.Check(nw.now, reqs, resps, func() { done = true })
			if done {
				t.Fatalf("c decided %q at once on a fresh bucket: %+v", key, resps[0])
			}
			if !tc.wait {
				// a drops c's forward (c is not yet a member in its view),
				// then learns of c and hands the key off; c's forward times
				// out and c decides on the handed-off state.
				nw.setMembers(after, "a", "b")
				nw.run(DefaultConfig().RequestTimeout + 10*DefaultConfig().TickInterval)
			}
			nw.settle()
			if !done {
				t.Fatalf("check of %q never completed", key)
			}
			if resps[0].Err != nil || resps[0].Allowed {
				t.Errorf("c answered %+v, want a rejection: the key was spent on a", resps[0])
			}
			nw.setMembers(after, "a", "b")
			nw.settle()
			if got := remainingOn(c, nw.now, key); got > 1 {
				t.Errorf("c remaining %d after the hand-off, want about 0", got)
			}
		})
	}
}
