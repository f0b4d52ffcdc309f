package sync

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The receive benchmarks measure a node taking in messages of 256 states
// each, of random keys among 200k it holds already: mostly cache misses,
// which the receivers overlap by looking up a run of keys before applying
// any.

// receiveLimit is the limit of the receive benchmarks' keys.
func receiveLimit() bucket.Limit {
	return bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}
}

// receiver returns node "b" of members a and b, holding nothing yet,
// and its peer a.
func receiver(b *testing.B) (*Node, *peer) {
	cfg := DefaultConfig()
	cfg.Self = "b"
	cfg.MaxKeys = 1 << 20
	n, err := NewNode(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	n.SetMembers(t0, []string{"a", "b"})
	return n, n.view.peers["a"]
}

// receiveState returns the encoded state of a fresh bucket of receiveLimit() with
// spent tokens taken.
func receiveState(b *testing.B, spent int64) []byte {
	st, err := bucket.New(receiveLimit(), t0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Take(t0, spent); err != nil {
		b.Fatal(err)
	}
	enc, _ := st.AppendBinary(nil)
	return enc
}

// receiveKeys returns 200k keys, those that keep says to keep.
func receiveKeys(keep func(string) bool) []string {
	var keys []string
	for i := 0; len(keys) < 200_000; i++ {
		if k := fmt.Sprintf("user:%07d", i); keep(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// receiveItems returns 1000 lists of 256 states of random keys, each state
// made by state.
func receiveItems(keys []string, state func(rng *rand.Rand) *peerv1.KeyState) [][]*peerv1.KeyState {
	rng := rand.New(rand.NewPCG(1, 2))
	lists := make([][]*peerv1.KeyState, 1000)
	for i := range lists {
		items := make([]*peerv1.KeyState, 256)
		for j := range items {
			items[j] = state(rng)
			items[j].Key = keys[rng.IntN(len(keys))]
		}
		lists[i] = items
	}
	return lists
}

// BenchmarkOnBackup measures a node keeping backups, for the same owner, of
// keys it holds backups of already (keys the owner owns in the node's
// view: it acknowledges no backup of another's key).
func BenchmarkOnBackup(b *testing.B) {
	n, p := receiver(b)
	var encs [][]byte
	for spent := range int64(8) {
		encs = append(encs, receiveState(b, spent))
	}
	keys := receiveKeys(func(k string) bool { return n.view.owner(k) == p.name })
	for i := 0; i < len(keys); i += 256 {
		items := make([]*peerv1.KeyState, 0, 256)
		for _, k := range keys[i:min(i+256, len(keys))] {
			items = append(items, &peerv1.KeyState{Key: k, State: encs[0], Demand: 1})
		}
		n.onBackup(t0, p, 1, &peerv1.Backup{Seq: 1, Items: items})
	}
	lists := receiveItems(keys, func(rng *rand.Rand) *peerv1.KeyState {
		return &peerv1.KeyState{State: encs[rng.IntN(len(encs))], Demand: 2}
	})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n.onBackup(t0, p, 1, &peerv1.Backup{Seq: uint64(i + 2), Items: lists[i%len(lists)]})
		i++
	}
}

// BenchmarkOnPush measures a non-owner installing pushes of keys it caches,
// listed shard by shard as an owner lists them.
func BenchmarkOnPush(b *testing.B) {
	n, p := receiver(b)
	v := n.view
	keys := receiveKeys(func(k string) bool { return v.owner(k) == "a" })
	reqs := []check.Request{{Hits: 1, Limit: receiveLimit(), Mode: check.ModeCached}}
	resps := make([]check.Response, 1)
	for _, k := range keys {
		reqs[0].Key = k
		n.Check(t0, reqs, resps, func() {})
	}
	enc := receiveState(b, 3)
	lists := receiveItems(keys, func(*rand.Rand) *peerv1.KeyState {
		return &peerv1.KeyState{State: enc, Share: 0.5}
	})
	pushes := make([]*peerv1.Push, len(lists))
	for i, items := range lists {
		slices.SortStableFunc(items, func(x, y *peerv1.KeyState) int {
			return cmp.Compare(n.st.shardOf(x.Key).bit, n.st.shardOf(y.Key).bit)
		})
		pushes[i] = &peerv1.Push{Items: items}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n.onPush(t0, v, p, pushes[i%len(pushes)])
		i++
	}
}
