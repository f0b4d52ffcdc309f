package sync

import (
	"math/bits"
	"slices"
)

// The interest of an owned key is four sets of members, by their index in
// the view (view.index), exact at any number of members:
//
//   - cur: the members that flushed the key since its last scheduled push;
//   - prev: those that flushed it between its last two scheduled pushes;
//   - held: those that flushed it within InterestTTL and may still hold a
//     view of it (cur and prev among them);
//   - stale: those among held whose copy predates the key's last change (a
//     member's own flush answers it with the current state: the answer is
//     its push).
//
// A flush of the key, or a forwarded cached-mode check of a key too small
// for shares (keepView), adds its sender to cur and held. A push of the key
// goes to the stale members of cur, and to the stale members of held when
// the key is nearly spent (nearlySpent); a key too small for shares is
// pushed only then, to the stale members of held, since each of its
// members' checks is answered with its state. Then, on
// the FlushInterval schedule, prev becomes cur and cur empties, and a
// member sent the spent state leaves held. So a member is sent at most one
// scheduled push of a key per flush of it, and one more when the key is
// spent: the pushes are bounded by the flushes, whatever the number of
// members. A member that keeps checking the key flushes it every
// FlushInterval (and is answered with its state); one that stopped is
// still told when the key is spent, so that the partition policy, which
// starts from the view (policy.go), finds a spent key spent. Before, every
// change of a key was pushed to every member that had flushed it within
// InterestTTL, which made the messages per decision grow with the number
// of members (issue #19). The members counted for the shares (activeShare)
// are cur and prev, the nodes that check the key: a node that keeps
// checking it flushes it between two rotations and stays counted.
//
// In a view of up to inlineMembers members the four sets are held in the
// record's interest (inlineMembers bits each); in a larger view interest is
// 1 when the key has interest (0 when none) and the sets are in the Node's
// wide table, one bit per member. Interest older than InterestTTL is
// forgotten by the store's sweep (interest = 0), whatever the view.
const inlineMembers = 15

const inlineMask = 1<<inlineMembers - 1

// memberSets is the interest of one owned key, read out of its record for
// a change: word i of each set holds the members 64i to 64i+63.
type memberSets struct {
	cur, prev, held, stale []uint64
}

// wideSets is the interest of a key of a view of more than inlineMembers
// members, and the record it belongs to: a record evicted and created
// again, or replaced by a change of role, does not inherit it.
type wideSets struct {
	e    *ownedKey
	sets memberSets
}

// wordsFor returns the words of a set of v's members.
func wordsFor(v *view) int { return (len(v.names) + 63) / 64 }

// wide reports whether v keeps interest in the wide table.
func (v *view) wide() bool { return len(v.names) > inlineMembers }

// shardIndex returns the index of s in the store.
func shardIndex(s *shard) int { return bits.TrailingZeros64(s.bit) }

// readSets returns the interest of the owned record e of key under the
// current view, in buf's storage if it has room.
func (n *Node) readSets(s *shard, key string, e *ownedKey, buf *[4]uint64) memberSets {
	return n.readSetsIn(n.view, s, key, e, buf)
}

// readSetsIn returns the interest of the owned record e of key under v.
func (n *Node) readSetsIn(v *view, s *shard, key string, e *ownedKey, buf *[4]uint64) memberSets {
	if !v.wide() {
		for i := range buf {
			buf[i] = uint64(e.interest) >> (i * inlineMembers) & inlineMask
		}
		return memberSets{cur: buf[0:1], prev: buf[1:2], held: buf[2:3], stale: buf[3:4]}
	}
	w := wordsFor(v)
	t := n.wide[shardIndex(s)]
	ws := t[key]
	if ws == nil || ws.e != e || len(ws.sets.cur) != w {
		if ws == nil {
			ws = &wideSets{}
			if t == nil {
				t = map[string]*wideSets{}
				n.wide[shardIndex(s)] = t
			}
			t[key] = ws
		}
		ws.e = e
		all := make([]uint64, 4*w)
		ws.sets = memberSets{cur: all[:w:w], prev: all[w : 2*w : 2*w], held: all[2*w : 3*w : 3*w], stale: all[3*w:]}
	} else if !e.interested() {
		clear(ws.sets.cur)
		clear(ws.sets.prev)
		clear(ws.sets.held)
		clear(ws.sets.stale)
	}
	return ws.sets
}

// writeSets stores m, read by readSets, as e's interest.
func (n *Node) writeSets(s *shard, key string, e *ownedKey, m memberSets) {
	n.writeSetsIn(n.view, s, key, e, m)
}

// writeSetsIn stores m, read by readSetsIn, as e's interest under v.
func (n *Node) writeSetsIn(v *view, s *shard, key string, e *ownedKey, m memberSets) {
	if !v.wide() {
		e.interest = int64(m.cur[0] | m.prev[0]<<inlineMembers | m.held[0]<<(2*inlineMembers) | m.stale[0]<<(3*inlineMembers))
		return
	}
	for i := range m.held {
		if m.held[i] != 0 {
			e.interest = 1
			return
		}
	}
	e.interest = 0
	delete(n.wide[shardIndex(s)], key)
}

func setAdd(set []uint64, m int) { set[m/64] |= 1 << (m % 64) }
func setDel(set []uint64, m int) { set[m/64] &^= 1 << (m % 64) }

// The functions below read and write the interest of key, whose owned
// record is e, under the current view (n.view): the sets are remapped
// when it changes (remapInterest, from moveKeys).

// addInterest records a flush of key from member m (its index in the
// view, -1 if none): m is
// in cur, and not stale (the flush's answer carries the current state).
func (n *Node) addInterest(s *shard, key string, e *ownedKey, m int) {
	if m < 0 {
		return
	}
	if n.late != nil {
		n.lateShown(key, m) // lateview.go
	}
	var buf [4]uint64
	sets := n.readSets(s, key, e, &buf)
	setAdd(sets.cur, m)
	setAdd(sets.held, m)
	setDel(sets.stale, m)
	n.writeSets(s, key, e, sets)
}

// markStale makes every interested member but except (an index in the
// view, or -1) stale, and reports whether any member is stale: the key is
// then to be listed for the next push.
func (n *Node) markStale(s *shard, key string, e *ownedKey, except int) bool {
	if !e.interested() {
		return false
	}
	var buf [4]uint64
	sets := n.readSets(s, key, e, &buf)
	stale := false
	for i := range sets.stale {
		st := sets.stale[i] | sets.held[i]
		if except >= 0 && except/64 == i {
			st &^= 1 << (except % 64)
		}
		stale = stale || st != 0
		sets.stale[i] = st
	}
	n.writeSets(s, key, e, sets)
	return stale
}

// interestCount returns the number of members in cur or prev.
func (n *Node) interestCount(s *shard, key string, e *ownedKey) int {
	if !e.interested() {
		return 0
	}
	var buf [4]uint64
	sets := n.readSets(s, key, e, &buf)
	k := 0
	for i := range sets.cur {
		k += bits.OnesCount64(sets.cur[i] | sets.prev[i])
	}
	return k
}

// pushInterest calls visit with each member to push key to, in index
// order: the stale members of cur if cur is set, and those of held if
// spent. (cur is unset for a key too small for shares: its checks go to
// the owner, whose answers refresh the members' views, keepView; they are
// pushed the key only when it is spent.) If rotate
// (the pushes of the FlushInterval schedule; an early push, pushSoon, does
// not rotate, so that a member flushing every FlushInterval stays
// counted) it then rotates the sets (see above). It returns the number of
// members in cur and prev before the rotation, for the pushed share.
func (n *Node) pushInterest(s *shard, key string, e *ownedKey, rotate, cur, spent bool, visit func(m int)) int {
	if !e.interested() {
		return 0
	}
	var buf [4]uint64
	sets := n.readSets(s, key, e, &buf)
	k := 0
	for i := range sets.stale {
		var to uint64
		if cur {
			to = sets.stale[i] & sets.cur[i]
		}
		if spent {
			to = sets.stale[i] & sets.held[i]
			sets.held[i] &^= to &^ sets.cur[i] // told it is spent: no longer held
		}
		sets.stale[i] &^= to
		k += bits.OnesCount64(sets.cur[i] | sets.prev[i])
		for to != 0 {
			b := bits.TrailingZeros64(to)
			to &^= 1 << b
			visit(64*i + b)
		}
		if rotate {
			sets.prev[i], sets.cur[i] = sets.cur[i], 0
		}
		sets.held[i] |= sets.cur[i] | sets.prev[i]
	}
	n.writeSets(s, key, e, sets)
	return k
}

// dormantStale reports whether key has stale members beyond cur: members
// a push reaches only when the key is spent.
func (n *Node) dormantStale(s *shard, key string, e *ownedKey) bool {
	if !e.interested() {
		return false
	}
	var buf [4]uint64
	sets := n.readSets(s, key, e, &buf)
	for i := range sets.stale {
		if sets.stale[i]&^sets.cur[i] != 0 {
			return true
		}
	}
	return false
}

// remapInterest carries the interest of an owned record from view old to
// view nv: each member keeps its place in each set under its new index
// (to[its old index], -1 when it left).
func (n *Node) remapInterest(old, nv *view, s *shard, key string, e *ownedKey, to []int) {
	if !e.interested() {
		if old.wide() {
			delete(n.wide[shardIndex(s)], key)
		}
		return
	}
	var ob, nb [4]uint64
	from := n.readSetsIn(old, s, key, e, &ob)
	// The old sets are copied out first: the wide table's storage is
	// replaced when the number of words changes.
	src := [4][]uint64{slices.Clone(from.cur), slices.Clone(from.prev), slices.Clone(from.held), slices.Clone(from.stale)}
	e.interest = 0
	if old.wide() || nv.wide() {
		delete(n.wide[shardIndex(s)], key)
	}
	dst := n.readSetsIn(nv, s, key, e, &nb)
	for k, set := range [4][]uint64{dst.cur, dst.prev, dst.held, dst.stale} {
		for i, w := range src[k] {
			for w != 0 {
				b := bits.TrailingZeros64(w)
				w &^= 1 << b
				if j := to[64*i+b]; j >= 0 {
					setAdd(set, j)
				}
			}
		}
	}
	n.writeSetsIn(nv, s, key, e, dst)
}

// sweepWide forgets the wide interest of shard i's keys that no longer
// have it: the sweep forgot it, the key left or was handed off.
func (n *Node) sweepWide(i int) {
	t := n.wide[i]
	s := &n.st.shards[i]
	for key, ws := range t {
		if e := n.st.lookupOwned(s, key); e != ws.e || e == nil || !e.interested() {
			delete(t, key)
		}
	}
}
