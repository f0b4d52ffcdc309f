package sync

import (
	"iter"
	"math/bits"
	"slices"
)

// table maps the keys of a shard's owned records, or of its cached views
// (record.go: R is ownedKey or cachedKey, one table for each), to the
// records: an open-addressing hash table, linear probing over slots that
// each hold a tag of its key's store hash (store.hash, seeded: linear
// probing is only as good as its hash is unpredictable) and its record.
// The key is the record's own (keyHead.key). The tags and the records are
// two arrays: a probe walks the tags, 16 to a cache line, and reads a
// record only where its tag matches, where a Go map of strings reads a
// control word and a slot, often two lines, and hashes the key again with a
// function of its own. A slot is 12 bytes (a 4-byte tag and an 8-byte
// pointer), at most 3/4 of the slots are used: half the bytes per key of
// the map's 24-byte slots (issue 16: memory per key). Against a Go map
// per role (map[string]*R, 148 bytes of live heap per key at 100k keys
// instead of 141), CoreUniform under cachegrind measured the map 8% (owner)
// and 10% (cached) more costly in estimated cycles, and 2% less in leased
// mode (docs/bench.md, "Typed records"): at the 10% bar of issue 14 item 5
// in cached mode only.
//
// A removal shifts the entries that follow back (no tombstones), so that a
// lookup never probes past an empty slot. The zero table is empty and
// ready to use.
type table[R ownedKey | cachedKey] struct {
	// tags holds the tag of each slot's key (tagOf), 0 for an empty slot;
	// es the records, at the same index (nil where the slot is empty).
	tags []uint32
	es   []*R
	// n is the number of entries; shift is 32 - log2(len(tags)), so that
	// tag>>shift is the home slot of a tag (its high bits).
	n     int
	shift uint
}

// tagOf returns the tag of store hash h: its high 32 bits, the lowest of
// them set so that no tag is 0 (an empty slot). The home slot is the tag's
// high bits, which the set bit leaves alone.
func tagOf(h uint64) uint32 { return uint32(h>>32) | 1 }

// tableMin is the number of slots of a table's first allocation.
const tableMin = 8

// len returns the number of entries.
func (t *table[R]) len() int { return t.n }

// keyOf returns the key of r, the record's own copy.
func keyOf[R ownedKey | cachedKey](r *R) string {
	switch r := any(r).(type) {
	case *ownedKey:
		return r.key
	case *cachedKey:
		return r.key
	}
	return ""
}

// get returns the record of key, whose store hash is h, or nil.
func (t *table[R]) get(h uint64, key string) *R {
	if t.n == 0 {
		return nil
	}
	tag := tagOf(h)
	mask := uint32(len(t.tags) - 1)
	for i := tag >> t.shift; ; i = (i + 1) & mask {
		g := t.tags[i]
		if g == 0 {
			return nil
		}
		if g == tag {
			if r := t.es[i]; keyOf(r) == key {
				return r
			}
		}
	}
}

// put adds e, a record whose key hashes to h and is not in t.
func (t *table[R]) put(h uint64, e *R) {
	if (t.n+1)*4 > len(t.tags)*3 {
		t.grow()
	}
	t.place(tagOf(h), e)
	t.n++
}

// place puts e, whose tag is tag, in the first empty slot from its home
// slot on.
func (t *table[R]) place(tag uint32, e *R) {
	mask := uint32(len(t.tags) - 1)
	i := tag >> t.shift
	for t.tags[i] != 0 {
		i = (i + 1) & mask
	}
	t.tags[i], t.es[i] = tag, e
}

// grow doubles the slots (or makes the first ones) and places the entries
// again.
func (t *table[R]) grow() {
	oldTags, oldEs := t.tags, t.es
	size := max(tableMin, 2*len(oldTags))
	t.tags, t.es = make([]uint32, size), make([]*R, size)
	t.shift = uint(32 - bits.TrailingZeros(uint(size)))
	for i, g := range oldTags {
		if g != 0 {
			t.place(g, oldEs[i])
		}
	}
}

// del removes e, whose key hashes to h, and reports whether it was in t.
func (t *table[R]) del(h uint64, e *R) bool {
	if t.n == 0 {
		return false
	}
	tag := tagOf(h)
	mask := uint32(len(t.tags) - 1)
	i := tag >> t.shift
	for ; t.tags[i] != tag || t.es[i] != e; i = (i + 1) & mask {
		if t.tags[i] == 0 {
			return false
		}
	}
	// Shift back each following entry of the run that may sit in the
	// hole: one whose home slot is not after the hole (cyclically).
	for j := i; ; {
		j = (j + 1) & mask
		g := t.tags[j]
		if g == 0 {
			break
		}
		if home := g >> t.shift; (j-home)&mask < (j-i)&mask {
			continue // home is in (i, j]: it cannot move before it
		}
		t.tags[i], t.es[i] = g, t.es[j]
		i = j
	}
	t.tags[i], t.es[i] = 0, nil
	t.n--
	return true
}

// all iterates over the keys and records of t, in slot order. The loop's
// body may remove the entry it is given (del), and must not otherwise add
// or remove entries: the iteration starts after an empty slot, and a
// removal only moves entries of the run after it back into the hole, so
// the entry moved into the current slot is visited next and none twice.
func (t *table[R]) all() iter.Seq2[string, *R] {
	return func(yield func(string, *R) bool) {
		if t.n == 0 {
			return
		}
		mask := len(t.tags) - 1
		start := 0
		for t.tags[start] != 0 {
			start++ // at most 3/4 of the slots are used: one is empty
		}
		for k := 1; k <= len(t.tags); {
			i := (start + k) & mask
			e := t.es[i]
			if e == nil {
				k++
				continue
			}
			if !yield(keyOf(e), e) {
				return
			}
			if t.es[i] == e {
				k++
			} // else removed: the slot holds the next entry of its run, or none
		}
	}
}

// sortedKeys returns the keys of s's owned records and cached views,
// sorted: for the passes whose messages must not depend on where the keys
// sit in the tables.
func (s *shard) sortedKeys() []string {
	keys := make([]string, 0, s.own.len()+s.view.len())
	for k := range s.own.all() {
		keys = append(keys, k)
	}
	for k := range s.view.all() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
