package ring

// Summary describes a ring for operators, as served at GET /v1/cluster.
type Summary struct {
	// Version is the ring's Version.
	Version uint64 `json:"version"`
	// PartitionCount, ReplicationFactor and Load are the ring's Config.
	PartitionCount    int     `json:"partition_count"`
	ReplicationFactor int     `json:"replication_factor"`
	Load              float64 `json:"load"`
	// Members lists every member, sorted by name, with the number of
	// partitions it owns (consistent's LoadDistribution). Never nil.
	Members []MemberLoad `json:"members"`
	// AverageLoad is the mean number of partitions per member,
	// PartitionCount / len(Members); 0 when there are no members.
	AverageLoad float64 `json:"average_load"`
	// MaxLoad is the bound no member exceeds, ceil(floor(PartitionCount /
	// len(Members)) x Load). consistent calls this number AverageLoad.
	MaxLoad float64 `json:"max_load"`
}

// MemberLoad is one member's share of a ring.
type MemberLoad struct {
	// Name is the member's name.
	Name string `json:"name"`
	// Partitions is the number of partitions the member owns.
	Partitions int `json:"partitions"`
}

// Summary returns a description of the ring. It allocates; it is meant for
// status pages, not for the request path.
func (r *Ring) Summary() Summary {
	s := Summary{
		Version:           r.version,
		PartitionCount:    r.cfg.PartitionCount,
		ReplicationFactor: r.cfg.ReplicationFactor,
		Load:              r.cfg.Load,
		Members:           make([]MemberLoad, len(r.members)),
	}
	if len(r.members) == 0 {
		return s
	}
	count := make(map[string]int, len(r.members))
	for _, i := range r.slot {
		count[r.byHash[i]]++
	}
	for i, n := range r.members {
		s.Members[i] = MemberLoad{Name: n, Partitions: count[n]}
	}
	s.AverageLoad = float64(r.cfg.PartitionCount) / float64(len(r.members))
	s.MaxLoad = r.maxLoad
	return s
}
