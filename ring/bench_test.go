package ring

import (
	"fmt"
	"testing"
)

// benchKeys are the keys the lookup benchmarks cycle through.
var benchKeys = keys(1024)

// BenchmarkOwner measures the lookup on the path of every check, from
// parallel goroutines: through a Holder (an atomic load, then the table),
// on a *Ring directly, and, for comparison, consistent's own LocateKey
// (an RWMutex and a []byte conversion) on the same placement.
func BenchmarkOwner(b *testing.B) {
	h, err := NewHolder(DefaultConfig(), names("node-", 10)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Holder", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if _, err := h.Owner(benchKeys[i&1023]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("Ring", func(b *testing.B) {
		r := h.Load()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if _, err := r.Owner(benchKeys[i&1023]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("consistent.LocateKey", func(b *testing.B) {
		c := reference(b, h.Load().cfg, h.Load().members)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if m, ok := c.LocateKey([]byte(benchKeys[i&1023])).(member); !ok || m == "" {
					b.Fatal("no owner")
				}
			}
		})
	})
}

// BenchmarkOwners measures the replica lookup (owner plus two replicas).
func BenchmarkOwners(b *testing.B) {
	r, err := New(DefaultConfig(), names("node-", 10)...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := r.Owners(benchKeys[i&1023], 3); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRebuild measures one membership change (a join), which rebuilds
// the whole ring.
func BenchmarkRebuild(b *testing.B) {
	for _, tc := range []struct {
		cfg     Config
		members int
	}{
		{DefaultConfig(), 10},
		{DefaultConfig(), 100},
		{Config{PartitionCount: MaxPartitionCount, ReplicationFactor: 20, Load: 1.25}, 10},
	} {
		b.Run(fmt.Sprintf("P=%d/members=%d", tc.cfg.PartitionCount, tc.members), func(b *testing.B) {
			r, err := New(tc.cfg, names("node-", tc.members)...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.WithMember("joiner"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
