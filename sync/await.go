package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// awaitFrom marks a partition this node has just gained from a member that
// is still alive: that member holds the partition's states and is about to
// hand them off. Until then, a check of a key this node holds no state for
// is sent to that previous owner rather than decided on a fresh bucket: the
// previous owner either still sees itself as owner and answers
// authoritatively, or answers "not owner", by which time its hand-off has
// arrived (one queue per peer keeps the two in order) and the key is decided
// here on the handed-off state. This is what keeps a restarted or newly
// joined owner from starting a spent key at a full bucket.
type awaitFrom struct {
	from  string
	until time.Time
}

// gainedPartitions returns the partitions that move to this node between
// before and after from a member still in after, marked until now plus the
// await window, with the still-running marks of old carried over. before is
// nil on the first membership (or holds only this node, just started): then
// the previous owners are those of the ring without this node, which is
// what the rest of the cluster used.
func (n *Node) gainedPartitions(now time.Time, old map[int]awaitFrom, before, after *ring.Ring) map[int]awaitFrom {
	if n.cfg.HandoffWait == 0 {
		return nil
	}
	if before == nil || (before.Len() == 1 && before.Has(n.cfg.Self)) {
		// A node alone on its ring has just started: nothing was handed to
		// it, and the rest of the cluster used the ring without it.
		var err error
		if before, err = after.WithoutMember(n.cfg.Self); err != nil || before.Len() == 0 {
			return nil
		}
	}
	marks := make(map[int]awaitFrom)
	for id, a := range old {
		if now.Before(a.until) && after.Has(a.from) {
			if o, err := after.PartitionOwner(id); err == nil && o == n.cfg.Self {
				marks[id] = a
			}
		}
	}
	moves, err := ring.Diff(before, after)
	if err != nil {
		return marks
	}
	for _, m := range moves {
		if m.To == n.cfg.Self && m.From != "" && m.From != n.cfg.Self && after.Has(m.From) {
			marks[m.Partition] = awaitFrom{from: m.From, until: now.Add(n.cfg.HandoffWait)}
		}
	}
	if len(marks) == 0 {
		return nil
	}
	return marks
}

// awaitingOwner returns the previous owner to ask about key, if key's
// partition awaits its hand-off at now and this node holds no state for it.
func (n *Node) awaitingOwner(now time.Time, v *view, key string) (string, bool) {
	if len(v.await) == 0 {
		return "", false
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	if !ok || !now.Before(a.until) {
		return "", false
	}
	p := v.peers[a.from]
	if p == nil || p.gone || p.down(now) {
		return "", false
	}
	s := n.st.shardOf(key)
	s.mu.Lock()
	_, held := s.m[key]
	s.mu.Unlock()
	if held {
		return "", false
	}
	return a.from, true
}
