package ring

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Ring is an immutable consistent-hash ring: a set of member names and, for
// each of Config.PartitionCount partitions, the member that owns it. A key's
// partition is xxhash(key) mod PartitionCount; its owner is the partition's
// owner. Partitions are placed as github.com/buraksezer/consistent v0.10.0
// places them (consistent hashing with bounded loads; place.go computes the
// library's placement with one sort instead of one per member), and every
// lookup answers exactly what that library's LocateKey and GetClosestN
// would.
//
// A Ring never changes after New returns it: WithMembers, WithMember and
// WithoutMember return a new Ring and leave the receiver as it was. A *Ring
// is therefore safe for concurrent use without any lock, and a caller that
// keeps one *Ring for a whole batch sees one membership throughout. To share
// a changing ring between goroutines, use a Holder.
type Ring struct {
	cfg     Config
	version uint64
	members []string // sorted by name

	// byHash lists the members in the order of xxhash of their encoded name:
	// the order in which consistent.GetClosestN picks replicas.
	byHash []string
	// slot maps each partition to its owner's index in byHash. It is empty
	// when the ring has no members.
	slot []int32
	// maxLoad is the load bound of the placement: the most partitions a
	// member may own (consistent's AverageLoad).
	maxLoad float64
}

// New returns a ring of the given members, at version 1. Duplicate names are
// ignored; an empty name is an error (ErrEmptyName). A ring may have no
// members: its lookups then return ErrNoMembers. New returns an error
// wrapping ErrTooManyMembers if there are more members than partitions, and
// the error of cfg.Validate for an invalid cfg.
func New(cfg Config, members ...string) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names, err := normalize(members)
	if err != nil {
		return nil, err
	}
	return build(cfg, names, 1)
}

// WithMembers returns a ring with exactly the given members and the
// receiver's Config. If the membership is unchanged it returns the receiver
// itself; otherwise the new ring's version is the receiver's plus one.
// Duplicate names are ignored. On error the receiver is still valid.
func (r *Ring) WithMembers(members []string) (*Ring, error) {
	names, err := normalize(members)
	if err != nil {
		return nil, err
	}
	if slices.Equal(names, r.members) {
		return r, nil
	}
	return build(r.cfg, names, r.version+1)
}

// WithMember returns a ring that also has member name. If name is already a
// member it returns the receiver itself.
func (r *Ring) WithMember(name string) (*Ring, error) {
	if name == "" {
		return nil, ErrEmptyName
	}
	if r.Has(name) {
		return r, nil
	}
	return r.WithMembers(append(slices.Clip(r.members), name))
}

// WithoutMember returns a ring without member name. If name is not a member
// it returns the receiver itself. Removing the last member yields a ring
// with no members, not an error.
func (r *Ring) WithoutMember(name string) (*Ring, error) {
	i, ok := slices.BinarySearch(r.members, name)
	if !ok {
		return r, nil
	}
	rest := make([]string, 0, len(r.members)-1)
	rest = append(append(rest, r.members[:i]...), r.members[i+1:]...)
	return r.WithMembers(rest)
}

// Owner returns the name of the member that owns key, or ErrNoMembers. It
// does not allocate and takes no lock: it hashes key once and reads one
// table entry.
func (r *Ring) Owner(key string) (string, error) { return r.OwnerOfHash(KeyHash(key)) }

// KeyHash returns the hash that places key on every ring: xxhash(key),
// 64-bit XXH64, unseeded, the same in every process. A caller that needs
// several of a key's lookups (its owner, its partition, on one ring or
// several) hashes the key once and passes the hash to OwnerOfHash and
// PartitionOfHash, which answer what Owner and PartitionOf answer for the
// key.
func KeyHash(key string) uint64 { return xxhash.Sum64String(key) }

// OwnerOfHash returns the owner of the key whose KeyHash is h: what
// Owner returns for that key.
func (r *Ring) OwnerOfHash(h uint64) (string, error) {
	if len(r.slot) == 0 {
		return "", ErrNoMembers
	}
	return r.byHash[r.slot[h%uint64(len(r.slot))]], nil
}

// Owners returns n distinct members for key, the owner first and then its
// replicas, in the order of consistent's GetClosestN. It returns
// ErrNoMembers on an empty ring, ErrBadReplicaCount if n < 1 and
// ErrTooFewMembers if n exceeds Len.
func (r *Ring) Owners(key string, n int) ([]string, error) {
	switch {
	case len(r.slot) == 0:
		return nil, ErrNoMembers
	case n < 1:
		return nil, ErrBadReplicaCount
	case n > len(r.members):
		return nil, fmt.Errorf("%w: %d replicas, %d members", ErrTooFewMembers, n, len(r.members))
	}
	i := int(r.slot[r.PartitionOf(key)])
	out := make([]string, n)
	for k := range out {
		out[k] = r.byHash[(i+k)%len(r.byHash)]
	}
	return out, nil
}

// PartitionOf returns the partition of key, in [0, PartitionCount). It
// depends only on key and PartitionCount, not on the members.
func (r *Ring) PartitionOf(key string) int { return PartitionOf(key, r.cfg.PartitionCount) }

// PartitionOfHash returns the partition of the key whose KeyHash is h:
// what PartitionOf returns for that key.
func (r *Ring) PartitionOfHash(h uint64) int { return PartitionOfHash(h, r.cfg.PartitionCount) }

// PartitionOf returns the partition of key on any ring of count
// partitions (Config.PartitionCount, at least 1): xxhash(key) mod count.
func PartitionOf(key string, count int) int { return PartitionOfHash(KeyHash(key), count) }

// PartitionOfHash returns the partition, on any ring of count partitions
// (at least 1), of the key whose KeyHash is h: what PartitionOf returns
// for that key.
func PartitionOfHash(h uint64, count int) int { return int(h % uint64(count)) }

// PartitionOwner returns the owner of partition id. It returns
// ErrBadPartition for an id outside [0, PartitionCount) and ErrNoMembers on
// an empty ring.
func (r *Ring) PartitionOwner(id int) (string, error) {
	if id < 0 || id >= r.cfg.PartitionCount {
		return "", fmt.Errorf("%w: %d not in [0, %d)", ErrBadPartition, id, r.cfg.PartitionCount)
	}
	if len(r.slot) == 0 {
		return "", ErrNoMembers
	}
	return r.byHash[r.slot[id]], nil
}

// Members returns the member names, sorted. The slice is a copy.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Has reports whether name is a member.
func (r *Ring) Has(name string) bool {
	_, ok := slices.BinarySearch(r.members, name)
	return ok
}

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Version returns the ring's version: 1 for a ring from New, plus one for
// each derivation (WithMembers and friends) that changed the membership.
// Versions only order rings derived from one another, as in one Holder;
// callers can cache anything computed from a ring under its version.
func (r *Ring) Version() uint64 { return r.version }

// Config returns the configuration the ring was built with.
func (r *Ring) Config() Config { return r.cfg }

// normalize returns names sorted and deduplicated, in a new slice, or
// ErrEmptyName.
func normalize(members []string) ([]string, error) {
	names := slices.Clone(members)
	for _, n := range names {
		if n == "" {
			return nil, ErrEmptyName
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// build places the partitions of cfg over names (valid, sorted, distinct)
// with the consistent library and reads back the owner table.
func build(cfg Config, names []string, version uint64) (*Ring, error) {
	r := &Ring{cfg: cfg, version: version, members: names}
	if len(names) == 0 {
		return r, nil
	}
	if len(names) > cfg.PartitionCount {
		return nil, fmt.Errorf("%w: %d members, %d partitions", ErrTooManyMembers, len(names), cfg.PartitionCount)
	}
	owners, maxLoad, err := placement(names, cfg) // place.go
	if err != nil {
		return nil, err
	}
	r.maxLoad = maxLoad

	// Replica order: consistent.getClosestN sorts members by the hash of
	// their String(). Ties (a 64-bit collision) are broken by name here;
	// the library would drop one of the two, which no test can reach.
	type hashed struct {
		h    uint64
		name string
	}
	hs := make([]hashed, len(names))
	for i, n := range names {
		hs[i] = hashed{xxhash.Sum64String(string(encode(n))), n}
	}
	slices.SortFunc(hs, func(a, b hashed) int {
		return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.name, b.name))
	})
	r.byHash = make([]string, len(hs))
	pos := make(map[string]int32, len(hs))
	for i, h := range hs {
		r.byHash[i] = h.name
		pos[h.name] = int32(i)
	}

	r.slot = make([]int32, cfg.PartitionCount)
	for id, m := range owners {
		r.slot[id] = pos[names[m]]
	}
	return r, nil
}

// The library types of a ring.
var (
	_ consistent.Hasher = hasher{}
	_ consistent.Member = member("")
)

// hasher is the consistent.Hasher of every ring: 64-bit xxhash.
type hasher struct{}

// Sum64 returns the xxhash of b.
func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// member is how a name is handed to consistent: the name followed by a NUL
// byte. consistent names virtual node i of member m by fmt.Sprintf("%s%d",
// m, i), so the raw names "n1" and "n11" would share virtual nodes ("n1"+"10"
// = "n11"+"0"), and removing one of them leaves the library's circle
// pointing at a deleted entry. A terminator that is not a digit makes the
// virtual node names distinct for all distinct names.
type member string

// encode returns the library member for name.
func encode(name string) member { return member(name + "\x00") }

// String returns the encoded name, as consistent.Member requires.
func (m member) String() string { return string(m) }

// name returns the member name that m encodes.
func (m member) name() string { return string(m[:len(m)-1]) }
