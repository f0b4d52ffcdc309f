// Package ring maps keys to the cluster members that own them: members in,
// owner of a key out. It is a thin, immutable layer over
// github.com/buraksezer/consistent v0.10.0 (consistent hashing with bounded
// loads) hashed with xxhash, and it knows nothing of the network: a member
// is a node name, never an address.
//
// The key space is cut into Config.PartitionCount partitions (a key's
// partition is xxhash(key) mod PartitionCount); each partition has one owner,
// and no member owns more than Config.Load times its fair share. A
// membership change moves whole partitions, about 1/members of the keys.
//
// # Why immutable
//
// A Ring never changes; a membership change builds a new one and a Holder
// publishes it with an atomic pointer. This is both the fastest and the
// simplest design here:
//
//   - Owner, on the path of every check, is one atomic load, one hash and
//     one table read: no lock, no allocation, no shared cache line written,
//     so it scales with cores (an RWMutex's RLock writes its reader count).
//   - The sync layer needs the rings before and after a change to find the
//     keys that moved; with immutable rings it simply keeps both (Change,
//     Diff), and a batch that holds one *Ring sees one membership.
//   - Rebuilding costs no more than a change in place: consistent's Add and
//     Remove re-place every partition anyway. And consistent can panic or
//     misbehave: New panics on an empty (non-nil) member list or when the
//     load bound leaves no room, places a duplicated member's virtual nodes
//     twice, and Remove can dereference nil when two names share a virtual
//     node name ("n1" and "n11"). A ring only ever calls New, on validated,
//     deduplicated, encoded input, and recovers any panic into ErrPlacement.
//
// The owner table is read out of consistent once per build; lookups then
// answer exactly what consistent's LocateKey and GetClosestN would (tests
// assert it), without its lock or its []byte conversion.
//
// # The caller's loop
//
//	h, err := ring.NewHolder(ring.DefaultConfig(), "node-a", "node-b")
//	if err != nil { ... } // invalid Config or member names
//
//	// On every check:
//	owner, err := h.Owner(key) // ErrNoMembers on an empty ring
//	if owner == self { decide locally } else { forward or cache }
//
//	// On a membership event:
//	ch, err := h.SetMembers(live) // or h.Add(name), h.Remove(name)
//	for _, m := range ch.Moves() { // partitions that changed owner
//	    hand off the keys k with ch.Before.PartitionOf(k) == m.Partition
//	}
package ring
