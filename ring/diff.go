package ring

// PartitionMove says that a partition changed owner between two rings. An
// empty From or To means the ring on that side had no members.
type PartitionMove struct {
	// Partition is the partition id, in [0, PartitionCount).
	Partition int
	// From is the owner before the change.
	From string
	// To is the owner after the change.
	To string
}

// Diff returns the partitions whose owner differs between before and after,
// by increasing partition id. A key moved iff its partition (PartitionOf)
// is listed; for a handful of keys, comparing before.Owner(key) with
// after.Owner(key) is simpler. Diff returns ErrPartitionCountMismatch if the
// rings have different partition counts, since then partitions (and most
// keys' owners) are not comparable at all.
func Diff(before, after *Ring) ([]PartitionMove, error) {
	if before.cfg.PartitionCount != after.cfg.PartitionCount {
		return nil, ErrPartitionCountMismatch
	}
	return diff(before, after), nil
}

// diff is Diff for two rings with the same partition count.
func diff(before, after *Ring) []PartitionMove {
	var moves []PartitionMove
	for id := range before.cfg.PartitionCount {
		from, to := before.ownerOf(id), after.ownerOf(id)
		if from != to {
			moves = append(moves, PartitionMove{Partition: id, From: from, To: to})
		}
	}
	return moves
}

// ownerOf returns the owner of partition id (in range), or "" on an empty
// ring.
func (r *Ring) ownerOf(id int) string {
	if len(r.slot) == 0 {
		return ""
	}
	return r.byHash[r.slot[id]]
}
