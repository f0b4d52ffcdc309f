package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestValidate(t *testing.T) {
	d := DefaultConfig()
	with := func(f func(*Config)) Config { c := d; f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"default", d, nil},
		{"zero config", Config{}, ErrBadPartitionCount},
		{"partitions 0", with(func(c *Config) { c.PartitionCount = 0 }), ErrBadPartitionCount},
		{"partitions -1", with(func(c *Config) { c.PartitionCount = -1 }), ErrBadPartitionCount},
		{"partitions 1", with(func(c *Config) { c.PartitionCount = 1 }), nil},
		{"partitions max", with(func(c *Config) { c.PartitionCount = MaxPartitionCount }), nil},
		{"partitions max+1", with(func(c *Config) { c.PartitionCount = MaxPartitionCount + 1 }), ErrBadPartitionCount},
		{"replication 1", with(func(c *Config) { c.ReplicationFactor = 1 }), ErrBadReplicationFactor},
		{"replication 2", with(func(c *Config) { c.ReplicationFactor = 2 }), nil},
		{"replication max+1", with(func(c *Config) { c.ReplicationFactor = MaxReplicationFactor + 1 }), ErrBadReplicationFactor},
		{"load 0", with(func(c *Config) { c.Load = 0 }), ErrBadLoad},
		{"load 1", with(func(c *Config) { c.Load = 1 }), ErrBadLoad},
		{"load 1.0001", with(func(c *Config) { c.Load = 1.0001 }), nil},
		{"load NaN", with(func(c *Config) { c.Load = math.NaN() }), ErrBadLoad},
		{"load +Inf", with(func(c *Config) { c.Load = math.Inf(1) }), ErrBadLoad},
	}
	for _, tc := range tests {
		if got := tc.cfg.Validate(); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: Validate() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		members []string
		want    error
	}{
		{"bad config", Config{}, nil, ErrBadPartitionCount},
		{"empty name", DefaultConfig(), []string{"a", ""}, ErrEmptyName},
		{"more members than partitions", Config{PartitionCount: 3, ReplicationFactor: 2, Load: 1.25}, names("m", 4), ErrTooManyMembers},
		{"as many members as partitions", Config{PartitionCount: 3, ReplicationFactor: 2, Load: 1.25}, names("m", 3), nil},
		{"duplicates", DefaultConfig(), []string{"b", "a", "b", "a"}, nil},
		{"no members", DefaultConfig(), nil, nil},
	}
	for _, tc := range tests {
		r, err := New(tc.cfg, tc.members...)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: New error = %v, want %v", tc.name, err, tc.want)
		}
		if err == nil && r == nil {
			t.Errorf("%s: New returned nil ring and nil error", tc.name)
		}
	}
}

func TestEmptyRing(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Owner("k"); !errors.Is(err, ErrNoMembers) {
		t.Errorf("Owner: got %v, want ErrNoMembers", err)
	}
	if _, err := r.Owners("k", 1); !errors.Is(err, ErrNoMembers) {
		t.Errorf("Owners: got %v, want ErrNoMembers", err)
	}
	if _, err := r.PartitionOwner(0); !errors.Is(err, ErrNoMembers) {
		t.Errorf("PartitionOwner: got %v, want ErrNoMembers", err)
	}
	pc := DefaultConfig().PartitionCount
	if p := r.PartitionOf("k"); p < 0 || p >= pc {
		t.Errorf("PartitionOf = %d, want in [0, %d)", p, pc)
	}
	s := r.Summary()
	if s.Members == nil || len(s.Members) != 0 || s.AverageLoad != 0 || s.MaxLoad != 0 || s.PartitionCount != pc {
		t.Errorf("Summary = %+v", s)
	}
	if r.Len() != 0 || r.Version() != 1 {
		t.Errorf("Len, Version = %d, %d; want 0, 1", r.Len(), r.Version())
	}
}

func TestLookupErrors(t *testing.T) {
	r, err := New(DefaultConfig(), "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"Owners n=0", second(r.Owners("k", 0)), ErrBadReplicaCount},
		{"Owners n=-1", second(r.Owners("k", -1)), ErrBadReplicaCount},
		{"Owners n=3", second(r.Owners("k", 3)), nil},
		{"Owners n=4", second(r.Owners("k", 4)), ErrTooFewMembers},
		{"PartitionOwner -1", second(r.PartitionOwner(-1)), ErrBadPartition},
		{"PartitionOwner 0", second(r.PartitionOwner(0)), nil},
		{"PartitionOwner last", second(r.PartitionOwner(r.Config().PartitionCount - 1)), nil},
		{"PartitionOwner count", second(r.PartitionOwner(r.Config().PartitionCount)), ErrBadPartition},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) || (tc.want == nil) != (tc.err == nil) {
			t.Errorf("%s: error = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	owners, _ := r.Owners("k", 3)
	if sorted := slices.Sorted(slices.Values(owners)); !slices.Equal(sorted, []string{"a", "b", "c"}) {
		t.Errorf("Owners(k, 3) = %v, want a permutation of [a b c]", owners)
	}
	if o, _ := r.Owner("k"); owners[0] != o {
		t.Errorf("Owners(k, 3)[0] = %q, Owner(k) = %q", owners[0], o)
	}
}

func second[T any](_ T, err error) error { return err }

func TestMembersIsACopy(t *testing.T) {
	in := []string{"b", "a"}
	r, err := New(DefaultConfig(), in...)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = "z"
	m := r.Members()
	m[0] = "z"
	if got := r.Members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Members() = %v after caller writes, want [a b]", got)
	}
}

// TestPlacementNeverFails builds rings over a sweep of configurations and
// member counts up to PartitionCount, the inputs on which consistent's
// placement can run out of room, and checks every build succeeds and
// respects the load bound.
func TestPlacementNeverFails(t *testing.T) {
	for _, p := range []int{1, 2, 3, 7, 31} {
		for _, rf := range []int{2, 3, 20} {
			for _, load := range []float64{1.0001, 1.25, 3} {
				cfg := Config{PartitionCount: p, ReplicationFactor: rf, Load: load}
				for n := 1; n <= p; n++ {
					checkPlacement(t, cfg, names("m", n))
				}
			}
		}
	}
	d := DefaultConfig()
	for _, n := range []int{1, 2, 3, 4, 5, 7, 10, 20, 50, 51, 102, 103, 204, 205} {
		checkPlacement(t, d, names("node-", n))
	}
}

func checkPlacement(t *testing.T, cfg Config, members []string) {
	t.Helper()
	r, err := New(cfg, members...)
	if err != nil {
		t.Fatalf("%+v, %d members: %v", cfg, len(members), err)
	}
	s := r.Summary()
	total := 0
	for _, m := range s.Members {
		if float64(m.Partitions) > s.MaxLoad {
			t.Fatalf("%+v, %d members: %q owns %d > bound %v", cfg, len(members), m.Name, m.Partitions, s.MaxLoad)
		}
		total += m.Partitions
	}
	if total != cfg.PartitionCount {
		t.Fatalf("%+v, %d members: %d partitions owned, want %d", cfg, len(members), total, cfg.PartitionCount)
	}
}

// TestHolderSteps applies a script of membership changes to one Holder.
func TestHolderSteps(t *testing.T) {
	h, err := NewHolder(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		name        string
		do          func() (Change, error)
		wantErr     error
		wantJoined  []string
		wantLeft    []string
		wantMembers []string
		wantVersion uint64
	}
	steps := []step{
		{name: "add a to empty", do: func() (Change, error) { return h.Add("a") },
			wantJoined: []string{"a"}, wantMembers: []string{"a"}, wantVersion: 2},
		{name: "add a again is a no-op", do: func() (Change, error) { return h.Add("a") },
			wantMembers: []string{"a"}, wantVersion: 2},
		{name: "add empty name", do: func() (Change, error) { return h.Add("") },
			wantErr: ErrEmptyName, wantMembers: []string{"a"}, wantVersion: 2},
		{name: "set b c a", do: func() (Change, error) { return h.SetMembers([]string{"c", "b", "a", "c"}) },
			wantJoined: []string{"b", "c"}, wantMembers: []string{"a", "b", "c"}, wantVersion: 3},
		{name: "set same members is a no-op", do: func() (Change, error) { return h.SetMembers([]string{"a", "b", "c"}) },
			wantMembers: []string{"a", "b", "c"}, wantVersion: 3},
		{name: "set a d: b c left, d joined", do: func() (Change, error) { return h.SetMembers([]string{"d", "a"}) },
			wantJoined: []string{"d"}, wantLeft: []string{"b", "c"}, wantMembers: []string{"a", "d"}, wantVersion: 4},
		{name: "remove absent x is a no-op", do: func() (Change, error) { return h.Remove("x") },
			wantMembers: []string{"a", "d"}, wantVersion: 4},
		{name: "remove a", do: func() (Change, error) { return h.Remove("a") },
			wantLeft: []string{"a"}, wantMembers: []string{"d"}, wantVersion: 5},
		{name: "remove the last member", do: func() (Change, error) { return h.Remove("d") },
			wantLeft: []string{"d"}, wantMembers: []string{}, wantVersion: 6},
		{name: "set with an empty name fails", do: func() (Change, error) { return h.SetMembers([]string{"a", ""}) },
			wantErr: ErrEmptyName, wantMembers: []string{}, wantVersion: 6},
	}
	for _, s := range steps {
		before := h.Load()
		c, err := s.do()
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: error = %v, want %v", s.name, err, s.wantErr)
		}
		if !slices.Equal(c.Joined, s.wantJoined) || !slices.Equal(c.Left, s.wantLeft) {
			t.Errorf("%s: joined, left = %v, %v; want %v, %v", s.name, c.Joined, c.Left, s.wantJoined, s.wantLeft)
		}
		if got := h.Load().Members(); !slices.Equal(got, s.wantMembers) {
			t.Errorf("%s: members = %v, want %v", s.name, got, s.wantMembers)
		}
		if got := h.Version(); got != s.wantVersion {
			t.Errorf("%s: version = %d, want %d", s.name, got, s.wantVersion)
		}
		if err == nil && (c.Before != before || c.After != h.Load()) {
			t.Errorf("%s: Change rings are not the holder's before and after rings", s.name)
		}
		if changed := len(c.Joined)+len(c.Left) > 0; c.Changed() != changed {
			t.Errorf("%s: Changed() = %v, want %v", s.name, c.Changed(), changed)
		}
	}
}

// TestDiff checks, key by key, that a key changes owner exactly when Diff
// lists its partition, with the right From and To.
func TestDiff(t *testing.T) {
	base := names("node-", 5)
	tests := []struct {
		name          string
		before, after []string
	}{
		{"join", base, append(slices.Clone(base), "node-6")},
		{"leave", base, base[1:]},
		{"replace", base, append(slices.Clone(base[1:]), "node-6")},
		{"from empty", nil, base},
		{"to empty", base, nil},
		{"same", base, base},
	}
	ks := keys(20000)
	for _, tc := range tests {
		before, err := New(DefaultConfig(), tc.before...)
		if err != nil {
			t.Fatal(err)
		}
		after, err := before.WithMembers(tc.after)
		if err != nil {
			t.Fatal(err)
		}
		moves, err := Diff(before, after)
		if err != nil {
			t.Fatal(err)
		}
		byID := make(map[int]PartitionMove, len(moves))
		for _, m := range moves {
			byID[m.Partition] = m
		}
		for _, k := range ks {
			from, _ := before.Owner(k)
			to, _ := after.Owner(k)
			m, listed := byID[before.PartitionOf(k)]
			if listed != (from != to) || (listed && (m.From != from || m.To != to)) {
				t.Fatalf("%s: key %q owner %q -> %q, Diff entry %+v (listed %v)", tc.name, k, from, to, m, listed)
			}
		}
		t.Logf("%s: %d of %d partitions move", tc.name, len(moves), before.Config().PartitionCount)
	}

	other, _ := New(Config{PartitionCount: 7, ReplicationFactor: 2, Load: 1.25}, "a")
	one, _ := New(DefaultConfig(), "a")
	if _, err := Diff(one, other); !errors.Is(err, ErrPartitionCountMismatch) {
		t.Errorf("Diff over different partition counts: error %v, want ErrPartitionCountMismatch", err)
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	h, err := NewHolder(DefaultConfig(), names("node-", 5)...)
	if err != nil {
		t.Fatal(err)
	}
	key := string([]byte("a-key-built-at-run-time"))
	if n := testing.AllocsPerRun(1000, func() { _, _ = h.Owner(key) }); n != 0 {
		t.Errorf("Holder.Owner allocates %v times per call, want 0", n)
	}
}

// TestLookupsByHash checks that OwnerOfHash and PartitionOfHash, given a
// key's KeyHash, answer what Owner and PartitionOf answer for the key, on
// rings of several sizes and partition counts, and on an empty ring.
func TestLookupsByHash(t *testing.T) {
	for _, pc := range []int{1, 7, 271, 1024} {
		cfg := DefaultConfig()
		cfg.PartitionCount = pc
		for _, members := range []int{0, 1, 3, 5} {
			if members > pc {
				continue
			}
			r, err := New(cfg, names("node-", members)...)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2000 {
				key := fmt.Sprintf("user:%07d", i*7919)
				h := KeyHash(key)
				if h != xxhash.Sum64String(key) {
					t.Fatalf("KeyHash(%q) = %d, want xxhash %d", key, h, xxhash.Sum64String(key))
				}
				wo, werr := r.Owner(key)
				o, err := r.OwnerOfHash(h)
				if o != wo || !errors.Is(err, werr) {
					t.Fatalf("partitions %d, members %d, key %q: OwnerOfHash = %q, %v; Owner = %q, %v", pc, members, key, o, err, wo, werr)
				}
				if p, wp := r.PartitionOfHash(h), r.PartitionOf(key); p != wp {
					t.Fatalf("partitions %d, members %d, key %q: PartitionOfHash = %d, PartitionOf = %d", pc, members, key, p, wp)
				}
				if p, wp := PartitionOfHash(h, pc), PartitionOf(key, pc); p != wp {
					t.Fatalf("partitions %d, key %q: package PartitionOfHash = %d, PartitionOf = %d", pc, key, p, wp)
				}
			}
		}
	}
}
