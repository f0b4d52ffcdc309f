package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
)

// names returns n member names with the given prefix: prefix1 ... prefixN.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// keys returns n keys key-0 ... key-(n-1).
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%d", i)
	}
	return out
}

// reference builds, independently of build, the consistent instance a ring
// of cfg and members must agree with.
func reference(t testing.TB, cfg Config, members []string) *consistent.Consistent {
	t.Helper()
	ms := make([]consistent.Member, len(members))
	for i, n := range members {
		ms[i] = encode(n)
	}
	return consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.PartitionCount,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
}

// libraryCases are the rings whose lookups are checked against consistent.
var libraryCases = []struct {
	name    string
	cfg     Config
	members []string
}{
	{"default/1", DefaultConfig(), names("node-", 1)},
	{"default/2", DefaultConfig(), names("node-", 2)},
	{"default/3", DefaultConfig(), names("node-", 3)},
	{"default/10", DefaultConfig(), names("node-", 10)},
	{"default/n1..n20", DefaultConfig(), names("n", 20)}, // n1 and n11 share raw virtual node names
	{"default/100", DefaultConfig(), names("node-", 100)},
	{"default/200", DefaultConfig(), names("node-", 200)},
	{"small/P7R2", Config{PartitionCount: 7, ReplicationFactor: 2, Load: 1.01}, names("m", 7)},
	{"large/P1021R50", Config{PartitionCount: 1021, ReplicationFactor: 50, Load: 1.1}, names("node-", 6)},
}

func TestOwnerMatchesLocateKey(t *testing.T) {
	ks := keys(20000)
	for _, tc := range libraryCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, tc.members...)
			if err != nil {
				t.Fatal(err)
			}
			c := reference(t, tc.cfg, tc.members)
			for _, k := range ks {
				got, err := r.Owner(k)
				if err != nil {
					t.Fatal(err)
				}
				want := c.LocateKey([]byte(k)).(member).name()
				if got != want {
					t.Fatalf("Owner(%q) = %q, LocateKey = %q", k, got, want)
				}
				if p, wp := r.PartitionOf(k), c.FindPartitionID([]byte(k)); p != wp {
					t.Fatalf("PartitionOf(%q) = %d, FindPartitionID = %d", k, p, wp)
				}
			}
		})
	}
}

func TestOwnersMatchesGetClosestN(t *testing.T) {
	ks := keys(500)
	for _, tc := range libraryCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, tc.members...)
			if err != nil {
				t.Fatal(err)
			}
			c := reference(t, tc.cfg, tc.members)
			for _, n := range []int{1, 2, 3, len(tc.members)} {
				if n > len(tc.members) {
					continue
				}
				for _, k := range ks {
					got, err := r.Owners(k, n)
					if err != nil {
						t.Fatal(err)
					}
					ms, err := c.GetClosestN([]byte(k), n)
					if err != nil {
						t.Fatal(err)
					}
					want := make([]string, len(ms))
					for i, m := range ms {
						want[i] = m.(member).name()
					}
					if !slices.Equal(got, want) {
						t.Fatalf("Owners(%q, %d) = %v, GetClosestN = %v", k, n, got, want)
					}
				}
			}
		})
	}
}

func TestSummaryMatchesLoadDistribution(t *testing.T) {
	for _, tc := range libraryCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, tc.members...)
			if err != nil {
				t.Fatal(err)
			}
			c := reference(t, tc.cfg, tc.members)
			s := r.Summary()
			dist := c.LoadDistribution()
			total := 0
			for _, m := range s.Members {
				if want := dist[string(encode(m.Name))]; float64(m.Partitions) != want {
					t.Errorf("member %q: %d partitions, LoadDistribution %v", m.Name, m.Partitions, want)
				}
				if float64(m.Partitions) > s.MaxLoad {
					t.Errorf("member %q: %d partitions > MaxLoad %v", m.Name, m.Partitions, s.MaxLoad)
				}
				total += m.Partitions
			}
			if total != tc.cfg.PartitionCount {
				t.Errorf("partitions sum to %d, want %d", total, tc.cfg.PartitionCount)
			}
			if s.MaxLoad != c.AverageLoad() {
				t.Errorf("MaxLoad = %v, consistent AverageLoad = %v", s.MaxLoad, c.AverageLoad())
			}
			if want := float64(tc.cfg.PartitionCount) / float64(len(tc.members)); s.AverageLoad != want {
				t.Errorf("AverageLoad = %v, want %v", s.AverageLoad, want)
			}
		})
	}
}

// TestLibraryRawNamesCollide documents why names are encoded before they
// reach consistent: with raw names "n1" and "n11", virtual node 10 of n1 and
// virtual node 0 of n11 are both "n110", and consistent's Remove then leaves
// a dangling entry on its circle and panics. The ring does the same change
// without trouble.
func TestLibraryRawNamesCollide(t *testing.T) {
	raw := consistent.New([]consistent.Member{rawMember("n1"), rawMember("n11")},
		consistent.Config{Hasher: hasher{}, PartitionCount: 271, ReplicationFactor: 20, Load: 1.25})
	panicked := func() (p any) {
		defer func() { p = recover() }()
		raw.Remove("n1")
		return nil
	}()
	t.Logf("consistent v0.10.0, raw names: Remove(n1) after {n1, n11} panics with %v", panicked)
	if panicked == nil {
		t.Log("the raw library did not panic: the encoding may no longer be needed")
	}

	r, err := New(DefaultConfig(), "n1", "n11")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := r.WithoutMember("n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys(1000) {
		if got, err := r2.Owner(k); got != "n11" || err != nil {
			t.Fatalf("after removing n1: Owner(%q) = %q, %v; want n11", k, got, err)
		}
	}
}

// rawMember is a consistent.Member without the ring's encoding.
type rawMember string

func (m rawMember) String() string { return string(m) }

// TestPlacementMatchesLibrary: for random memberships of 1 to 120 members
// (random names, some sharing prefixes) and configurations, the owner of
// every partition is the library's: placement reproduces consistent.New.
func TestPlacementMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 4))
	for trial := range 40 {
		cfg := DefaultConfig()
		if trial%4 == 3 {
			cfg = Config{PartitionCount: 97 + rng.IntN(400), ReplicationFactor: 2 + rng.IntN(30), Load: 1.05 + rng.Float64()}
		}
		n := 1 + rng.IntN(120)
		seen := map[string]bool{}
		var members []string
		for len(members) < n {
			name := fmt.Sprintf("n%d", rng.IntN(3*n))
			if !seen[name] {
				seen[name] = true
				members = append(members, name)
			}
		}
		r, err := New(cfg, members...)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		c := reference(t, cfg, r.Members())
		for id := range cfg.PartitionCount {
			want := c.GetPartitionOwner(id).(member).name()
			if got, _ := r.PartitionOwner(id); got != want {
				t.Fatalf("trial %d (%d members, %+v): partition %d owned by %s, library says %s", trial, n, cfg, id, got, want)
			}
		}
	}
}
