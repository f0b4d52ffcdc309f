package ring

import (
	"fmt"
	"slices"
	"testing"
)

// The measurements below are reproduced by
//
//	go test -run TestBalance -v ./ring/
//
// and quoted in docs/ring.md. They are deterministic: fixed member names
// node-1 ... node-N and fixed keys key-0 ... key-99999.

const measureKeys = 100_000

// TestBalance measures how evenly 100k keys spread over N members: the
// ratio of the busiest member's keys to the mean (1 is perfect; the load
// bound allows up to Config.Load in partitions, plus the spread of keys
// over partitions).
func TestBalance(t *testing.T) {
	ks := keys(measureKeys)
	tests := []struct {
		members int
		maxMean float64 // loose bound on the max/mean ratio of keys
	}{
		{3, 1.3},
		{5, 1.3},
		{10, 1.35},
		{20, 1.4},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.members), func(t *testing.T) {
			r, err := New(DefaultConfig(), names("node-", tc.members)...)
			if err != nil {
				t.Fatal(err)
			}
			count := make(map[string]int, tc.members)
			for _, k := range ks {
				o, err := r.Owner(k)
				if err != nil {
					t.Fatal(err)
				}
				count[o]++
			}
			if len(count) != tc.members {
				t.Fatalf("%d members own keys, want %d", len(count), tc.members)
			}
			mean := float64(measureKeys) / float64(tc.members)
			counts := slices.Collect(mapValues(count))
			lo, hi := slices.Min(counts), slices.Max(counts)
			s := r.Summary()
			parts := make([]int, len(s.Members))
			for i, m := range s.Members {
				parts[i] = m.Partitions
			}
			t.Logf("members=%d keys max/mean=%.3f min/mean=%.3f partitions min..max=%d..%d (mean %.1f, bound %.0f)",
				tc.members, float64(hi)/mean, float64(lo)/mean, slices.Min(parts), slices.Max(parts), s.AverageLoad, s.MaxLoad)
			if got := float64(hi) / mean; got > tc.maxMean {
				t.Errorf("max/mean = %.3f, want <= %.2f", got, tc.maxMean)
			}
		})
	}
}

// TestBalanceOnChange measures the share of 100k keys whose owner changes
// when one member joins a ring of N or leaves it. The ideal is 1/(N+1) for
// a join and 1/N for a leave; the load bound makes some extra partitions
// cascade to the next member with room. Every join of a new name
// node-(N+1) ... node-(N+5) and every leave of one of the N members is
// measured; the mean and the worst are reported, the worst is bounded.
func TestBalanceOnChange(t *testing.T) {
	ks := keys(measureKeys)
	for _, n := range []int{3, 5, 10, 20} {
		base, err := New(DefaultConfig(), names("node-", n)...)
		if err != nil {
			t.Fatal(err)
		}
		var joins, leaves []*Ring
		for i := n + 1; i <= n+5; i++ {
			j, err := base.WithMember(fmt.Sprintf("node-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			joins = append(joins, j)
		}
		for _, m := range base.Members() {
			l, err := base.WithoutMember(m)
			if err != nil {
				t.Fatal(err)
			}
			leaves = append(leaves, l)
		}
		for _, tc := range []struct {
			change string
			rings  []*Ring
			ideal  float64
		}{
			{"join", joins, 1 / float64(n+1)},
			{"leave", leaves, 1 / float64(n)},
		} {
			t.Run(fmt.Sprintf("%d/%s", n, tc.change), func(t *testing.T) {
				var sum, worst float64
				for _, after := range tc.rings {
					f := movedShare(t, base, after, ks)
					sum += f
					worst = max(worst, f)
				}
				mean := sum / float64(len(tc.rings))
				t.Logf("members=%d %s: keys moved mean=%.3f worst=%.3f ideal=%.3f (mean/ideal %.2f, over %d changes)",
					n, tc.change, mean, worst, tc.ideal, mean/tc.ideal, len(tc.rings))
				if bound := 2 / float64(n); worst > bound {
					t.Errorf("worst share moved %.3f > 2/N = %.3f", worst, bound)
				}
			})
		}
	}
}

// movedShare returns the fraction of keys whose owner differs between two
// rings.
func movedShare(t *testing.T, before, after *Ring, ks []string) float64 {
	t.Helper()
	moved := 0
	for _, k := range ks {
		a, err := before.Owner(k)
		if err != nil {
			t.Fatal(err)
		}
		b, err := after.Owner(k)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			moved++
		}
	}
	return float64(moved) / float64(len(ks))
}

// mapValues yields the values of m.
func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestBalanceConfigs compares candidate configurations over every member
// count in two ranges, as the basis of DefaultConfig's values: the busiest
// member's share of 50k keys over the mean, and the keys moved by a join
// (two new names) or a leave (two members) over the ideal share. It asserts
// only that the default keeps the mean movement within 1.5 times the ideal.
func TestBalanceConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("sweep of many rings")
	}
	ks := keys(50_000)
	configs := []Config{
		{PartitionCount: 271, ReplicationFactor: 20, Load: 1.25}, // consistent's defaults
		DefaultConfig(),
		{PartitionCount: 1021, ReplicationFactor: 40, Load: 1.25},
		{PartitionCount: 1021, ReplicationFactor: 20, Load: 1.15},
		{PartitionCount: 2039, ReplicationFactor: 20, Load: 1.25},
	}
	for _, cfg := range configs {
		for _, span := range [][2]int{{2, 10}, {11, 40}} {
			var bal, balWorst, moved, movedWorst float64
			changes := 0
			for n := span[0]; n <= span[1]; n++ {
				base, err := New(cfg, names("node-", n)...)
				if err != nil {
					t.Fatal(err)
				}
				count := make(map[string]int, n)
				for _, k := range ks {
					o, _ := base.Owner(k)
					count[o]++
				}
				b := float64(slices.Max(slices.Collect(mapValues(count)))) * float64(n) / float64(len(ks))
				bal += b
				balWorst = max(balWorst, b)
				var afters []*Ring
				var ideals []float64
				for _, name := range []string{fmt.Sprintf("node-%d", n+1), fmt.Sprintf("node-%d", n+2)} {
					after, err := base.WithMember(name)
					if err != nil {
						t.Fatal(err)
					}
					afters, ideals = append(afters, after), append(ideals, 1/float64(n+1))
				}
				for _, name := range base.Members()[:2] {
					after, err := base.WithoutMember(name)
					if err != nil {
						t.Fatal(err)
					}
					afters, ideals = append(afters, after), append(ideals, 1/float64(n))
				}
				for i, after := range afters {
					m := movedShare(t, base, after, ks) / ideals[i]
					moved += m
					movedWorst = max(movedWorst, m)
					changes++
				}
			}
			spanLen := float64(span[1] - span[0] + 1)
			mean := moved / float64(changes)
			t.Logf("P=%d R=%d Load=%.2f members %d..%d: keys max/mean %.2f (worst %.2f), moved/ideal %.2f (worst %.2f)",
				cfg.PartitionCount, cfg.ReplicationFactor, cfg.Load, span[0], span[1], bal/spanLen, balWorst, mean, movedWorst)
			if cfg == DefaultConfig() && mean > 1.5 {
				t.Errorf("default config, members %d..%d: mean moved/ideal %.2f > 1.5", span[0], span[1], mean)
			}
		}
	}
}
