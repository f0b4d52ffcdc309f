package ring

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned by this package. Compare with errors.Is: some are wrapped
// with the values that caused them.
var (
	// ErrNoMembers is returned by lookups on a ring with no members.
	ErrNoMembers = errors.New("ring: no members")
	// ErrEmptyName is returned when a member name is the empty string.
	ErrEmptyName = errors.New("ring: empty member name")
	// ErrTooManyMembers is returned when a ring would have more members than
	// partitions: some member would own nothing and the bounded-load placement
	// has no room to place every partition.
	ErrTooManyMembers = errors.New("ring: more members than partitions")
	// ErrTooFewMembers is returned by Owners when more replicas are asked
	// for than the ring has members.
	ErrTooFewMembers = errors.New("ring: fewer members than replicas requested")
	// ErrBadReplicaCount is returned by Owners when n < 1.
	ErrBadReplicaCount = errors.New("ring: replica count must be at least 1")
	// ErrBadPartition is returned for a partition id outside [0, PartitionCount).
	ErrBadPartition = errors.New("ring: partition id out of range")
	// ErrPartitionCountMismatch is returned by Diff for two rings whose
	// partition counts differ: a key's partition is not comparable between them.
	ErrPartitionCountMismatch = errors.New("ring: rings have different partition counts")
	// ErrPlacement is returned when the underlying consistent-hashing library
	// fails to place the partitions (it panics in that case; the panic is
	// recovered and wrapped in this error). Validate and the member-count check
	// rule out every cause known for consistent v0.10.0, so seeing it means a
	// broken invariant worth reporting.
	ErrPlacement = errors.New("ring: partition placement failed")

	// ErrBadPartitionCount is returned by Validate for a PartitionCount
	// outside [1, MaxPartitionCount].
	ErrBadPartitionCount = errors.New("ring: partition count out of range")
	// ErrBadReplicationFactor is returned by Validate for a ReplicationFactor
	// outside [2, MaxReplicationFactor].
	ErrBadReplicationFactor = errors.New("ring: replication factor out of range")
	// ErrBadLoad is returned by Validate for a Load that is not a finite
	// number greater than 1.
	ErrBadLoad = errors.New("ring: load must be a finite number greater than 1")
)

const (
	// MaxPartitionCount bounds Config.PartitionCount. Every membership change
	// rebuilds the whole partition table, so a huge count would make each
	// join or leave stall the caller; 65536 partitions rebuild in about
	// 20 ms at 10 members and give a granularity of 0.0015% of the key space.
	MaxPartitionCount = 1 << 16
	// MaxReplicationFactor bounds Config.ReplicationFactor. A rebuild hashes
	// members x ReplicationFactor virtual nodes and sorts them, so the bound
	// keeps a configuration typo from stalling every membership change.
	MaxReplicationFactor = 1024
)

// Config describes the shape of a ring. All members of a cluster must use
// the same Config, or they disagree about owners. The hash function is not
// configurable: it is always xxhash (64-bit XXH64), for the same reason.
type Config struct {
	// PartitionCount is the number of partitions the key space is cut into:
	// a key's partition is xxhash(key) mod PartitionCount, and each partition
	// has one owner. It is also the largest number of members a ring can
	// hold, and one partition is the unit of key movement on a change.
	PartitionCount int
	// ReplicationFactor is the number of virtual nodes each member places on
	// the hash circle. More virtual nodes spread a member's partitions more
	// evenly before the load bound is applied. Must be at least 2: with one
	// virtual node the placement walk of consistent v0.10.0 can miss the only
	// member with room and panic.
	ReplicationFactor int
	// Load is the bound on partitions per member, as a multiple of the mean:
	// no member owns more than ceil(floor(PartitionCount/members) x Load)
	// partitions ("consistent hashing with bounded loads"). Must be greater
	// than 1 so the bound always leaves room for every partition.
	Load float64
}

// DefaultConfig returns the configuration every node uses unless told
// otherwise. The values were chosen by measurement (docs/ring.md, and
// TestBalanceConfigs which reproduces it):
//
//   - PartitionCount 1021 (a prime, as consistent recommends). One partition
//     is the unit of movement, and the load bound is rounded to whole
//     partitions: ceil(floor(1021/members) x Load). With consistent's own
//     default of 271, that rounding makes the bound jump on a join or leave
//     at 11 to 40 members, and a single change moved 1.7 times the ideal
//     share of keys on average (up to 3.9 times); with 1021 it moves 1.3
//     times (at most 2). It also caps the cluster at 1021 members instead of
//     271, which matters for sidecar deployments. The cost is a 4 KiB owner
//     table and a rebuild of about 0.35 ms at 10 members.
//   - ReplicationFactor 20 virtual nodes per member (consistent's default).
//     40 balances slightly better, but consistent's New sorts its circle once
//     per member, so a rebuild grows with members^2 x ReplicationFactor:
//     with 20 it takes about 6 ms at 100 members and 0.4 s at 1000, and
//     doubling it doubles that, on every membership change.
//   - Load 1.25: no member owns more than 25% above the mean number of
//     partitions, and the measured busiest member gets 1.1 to 1.3 times
//     the mean share of keys. A tighter bound (1.15) balances better but
//     makes overflowing partitions cascade further round the circle, moving
//     more keys on each change (1.5 instead of 1.3 times the ideal at 11 to
//     40 members).
func DefaultConfig() Config {
	return Config{
		PartitionCount:    1021,
		ReplicationFactor: 20,
		Load:              1.25,
	}
}

// Validate reports whether c can build a ring. The error wraps one of
// ErrBadPartitionCount, ErrBadReplicationFactor or ErrBadLoad.
func (c Config) Validate() error {
	if c.PartitionCount < 1 || c.PartitionCount > MaxPartitionCount {
		return fmt.Errorf("%w: %d not in [1, %d]", ErrBadPartitionCount, c.PartitionCount, MaxPartitionCount)
	}
	if c.ReplicationFactor < 2 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("%w: %d not in [2, %d]", ErrBadReplicationFactor, c.ReplicationFactor, MaxReplicationFactor)
	}
	if !(c.Load > 1) || math.IsInf(c.Load, 1) {
		return fmt.Errorf("%w: %v", ErrBadLoad, c.Load)
	}
	return nil
}
