package sync

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// BenchmarkOnBackup measures a node keeping backups of 256 states each,
// of random keys among 200k it holds already for the same owner: mostly
// cache misses, which onBackup overlaps by looking up a run of held states
// before merging any.
func BenchmarkOnBackup(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Self = "b"
	cfg.MaxKeys = 1 << 20
	n, err := NewNode(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	n.SetMembers(t0, []string{"a", "b"})
	v := n.view.Load()
	p := v.peers["a"]
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}
	var encs [][]byte
	for spent := range int64(8) {
		st, err := bucket.New(l, t0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Take(t0, spent); err != nil {
			b.Fatal(err)
		}
		enc, _ := st.AppendBinary(nil)
		encs = append(encs, enc)
	}
	keys := make([]string, 200_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%07d", i)
	}
	for i := 0; i < len(keys); i += 256 {
		items := make([]*peerv1.KeyState, 0, 256)
		for _, k := range keys[i:min(i+256, len(keys))] {
			items = append(items, &peerv1.KeyState{Key: k, State: encs[0], Demand: 1})
		}
		n.onBackup(t0, p, 1, &peerv1.Backup{Seq: 1, Items: items})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	backups := make([]*peerv1.Backup, 1000)
	for i := range backups {
		items := make([]*peerv1.KeyState, 256)
		for j := range items {
			items[j] = &peerv1.KeyState{Key: keys[rng.IntN(len(keys))], State: encs[rng.IntN(len(encs))], Demand: 2}
		}
		backups[i] = &peerv1.Backup{Seq: uint64(i + 2), Items: items}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n.onBackup(t0, p, 1, backups[i%len(backups)])
		i++
	}
}
