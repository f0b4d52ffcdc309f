package sync

import (
	"iter"
	"math/bits"
	"slices"
)

// table maps the keys of a shard's owned and cached entries to the
// entries: an open-addressing hash table, linear probing over slots that
// each hold a tag of its key's store hash (store.hash, seeded: linear
// probing is only as good as its hash is unpredictable) and its entry.
// Every entry in it is keyed (allocKeyed): the key is the entry's own copy,
// in the entry's allocation, so the key compare reads memory the caller
// reads next anyway. The tags and the entries are two arrays: a probe
// walks the tags, 16 to a cache line, and reads an entry only where its
// tag matches, where a Go map of strings reads a control word and a slot,
// often two lines, and hashes the key again with a function of its own. A
// slot is 12 bytes (a 4-byte tag and an 8-byte pointer), at most 3/4 of the
// slots are used: half the bytes per key of the map's 24-byte slots (issue
// 16: memory per key).
//
// A removal shifts the entries that follow back (no tombstones), so that a
// lookup never probes past an empty slot. The zero table is empty and
// ready to use.
type table struct {
	// tags holds the tag of each slot's key (tagOf), 0 for an empty slot;
	// es the entries, at the same index (nil where the slot is empty).
	tags []uint32
	es   []*entry
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
func (t *table) len() int { return t.n }

// get returns the entry of key, whose store hash is h, or nil.
func (t *table) get(h uint64, key string) *entry {
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
			if e := t.es[i]; e.keyIs(key) {
				return e
			}
		}
	}
}

// keyIs reports whether the key of e, a keyed entry, is key.
func (e *entry) keyIs(key string) bool {
	k, _ := e.key()
	return k == key
}

// put adds e, a keyed entry whose key hashes to h and is not in t.
func (t *table) put(h uint64, e *entry) {
	if (t.n+1)*4 > len(t.tags)*3 {
		t.grow()
	}
	t.place(tagOf(h), e)
	t.n++
}

// place puts e, whose tag is tag, in the first empty slot from its home
// slot on.
func (t *table) place(tag uint32, e *entry) {
	mask := uint32(len(t.tags) - 1)
	i := tag >> t.shift
	for t.tags[i] != 0 {
		i = (i + 1) & mask
	}
	t.tags[i], t.es[i] = tag, e
}

// grow doubles the slots (or makes the first ones) and places the entries
// again.
func (t *table) grow() {
	oldTags, oldEs := t.tags, t.es
	size := max(tableMin, 2*len(oldTags))
	t.tags, t.es = make([]uint32, size), make([]*entry, size)
	t.shift = uint(32 - bits.TrailingZeros(uint(size)))
	for i, g := range oldTags {
		if g != 0 {
			t.place(g, oldEs[i])
		}
	}
}

// del removes e, whose key hashes to h, and reports whether it was in t.
func (t *table) del(h uint64, e *entry) bool {
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

// all iterates over the keys and entries of t, in slot order. The loop's
// body may remove the entry it is given (del), and must not otherwise add
// or remove entries: the iteration starts after an empty slot, and a
// removal only moves entries of the run after it back into the hole, so
// the entry moved into the current slot is visited next and none twice.
func (t *table) all() iter.Seq2[string, *entry] {
	return func(yield func(string, *entry) bool) {
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
			key, _ := e.key()
			if !yield(key, e) {
				return
			}
			if t.es[i] == e {
				k++
			} // else removed: the slot holds the next entry of its run, or none
		}
	}
}

// sortedKeys returns the keys of s.m, sorted: for the passes whose
// messages must not depend on where the keys sit in the table.
func (s *shard) sortedKeys() []string {
	keys := make([]string, 0, s.m.len())
	for k := range s.m.all() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
