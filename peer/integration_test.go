package peer

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestClusterDrivesTransport wires three nodes as the node facade does: each
// Cluster's onChange feeds its Transport's peers with the gRPC addresses
// gossiped in the metadata, and envelopes then flow between every pair.
// When a node leaves, the others stop accepting its envelopes.
func TestClusterDrivesTransport(t *testing.T) {
	names := []string{"a", "b", "c"}
	trs := map[string]*tnode{}
	cls := map[string]*Cluster{}
	seed := ""
	for _, name := range names {
		tn := newTNode(t, name, nil)
		tn.start(t)
		trs[name] = tn
		cfg := LocalClusterConfig()
		cfg.Name, cfg.GRPCAddr = name, tn.addr
		if seed != "" {
			cfg.Seeds = []string{seed}
		}
		cl, err := NewCluster(cfg, tn.SetPeers)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		cls[name] = cl
		if seed == "" {
			seed = cl.GossipAddr()
		}
	}
	// Every transport knows both of its peers once every cluster sees three
	// members and has told its transport.
	waitFor(t, 10*time.Second, "every transport has both peers", func() bool {
		for _, tn := range trs {
			tn.mu.RLock()
			n := len(tn.peers)
			tn.mu.RUnlock()
			if n != 2 {
				return false
			}
		}
		return true
	})
	for _, from := range names {
		for _, to := range names {
			if from != to {
				trs[from].Send(to, env(from, to, 1))
				trs[from].Send(to, env(from, to, 2))
			}
		}
	}
	waitFor(t, 10*time.Second, "every envelope delivered", func() bool {
		for _, tn := range trs {
			if tn.h.count() != 4 {
				return false
			}
		}
		return true
	})
	for _, to := range names {
		for _, from := range names {
			if got := trs[to].h.got(from); from != to && !slices.Equal(got, []uint64{1, 2}) {
				t.Errorf("%s got from %s %v, want [1 2]", to, from, got)
			}
		}
	}

	if err := cls["c"].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a drops c", func() bool { return slices.Equal(Names(cls["a"].Members()), []string{"a", "b"}) })
	waitFor(t, 5*time.Second, "a's transport drops c", func() bool {
		trs["a"].mu.RLock()
		defer trs["a"].mu.RUnlock()
		_, ok := trs["a"].members["c"]
		return !ok
	})
	if err := cls["c"].Close(); err != nil { // no more onChange on c
		t.Fatal(err)
	}
	trs["c"].SetPeers(membersOf(trs["a"], trs["c"])) // c still believes in a
	trs["c"].Send("a", env("c", "a", 3))
	waitFor(t, 5*time.Second, "a rejects c's envelope", func() bool {
		return counterValue(t, trs["a"].metrics.rejected.WithLabelValues(rejectUnknownSender)) == 1
	})
	if got := trs["a"].h.got("c"); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("a got from c %v after c left, want [1 2]", got)
	}
}
