package sync

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// BenchmarkOnPush measures a non-owner installing pushes of 256 states
// each, listed shard by shard as an owner lists them, of random keys among
// 200k cached ones: mostly cache misses, which onPush overlaps by looking
// up the keys of a shard's run first.
func BenchmarkOnPush(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Self = "b"
	cfg.MaxKeys = 1 << 20
	n, err := NewNode(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	n.SetMembers(t0, []string{"a", "b"})
	v := n.view.Load()
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}
	var keys []string
	for i := 0; len(keys) < 200_000; i++ {
		if k := fmt.Sprintf("user:%07d", i); v.owner(k) == "a" {
			keys = append(keys, k)
		}
	}
	reqs := []Request{{Hits: 1, Limit: l, Mode: ModeCached}}
	resps := make([]Response, 1)
	for _, k := range keys {
		reqs[0].Key = k
		n.Check(t0, reqs, resps, func() {})
	}
	st, err := bucket.New(l, t0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Take(t0, 3); err != nil {
		b.Fatal(err)
	}
	enc, _ := st.AppendBinary(nil)
	shard := func(key string) uint64 { return n.st.shardOf(key).bit }
	rng := rand.New(rand.NewPCG(1, 2))
	pushes := make([]*peerv1.Push, 1000)
	for i := range pushes {
		items := make([]*peerv1.KeyState, 256)
		for j := range items {
			items[j] = &peerv1.KeyState{Key: keys[rng.IntN(len(keys))], State: enc, Share: 0.5}
		}
		slices.SortStableFunc(items, func(x, y *peerv1.KeyState) int {
			a, c := shard(x.Key), shard(y.Key)
			switch {
			case a < c:
				return -1
			case a > c:
				return 1
			}
			return 0
		})
		pushes[i] = &peerv1.Push{Items: items}
	}
	p := v.peers["a"]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n.onPush(t0, v, p, pushes[i%len(pushes)])
		i++
	}
}
