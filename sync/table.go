package sync

import (
	"iter"
	"math/bits"
	"slices"
)

// table maps the keys of a shard's owned and cached entries to the
// entries: an open-addressing hash table, linear probing over slots that
// each hold a key's store hash (store.hash, seeded: linear probing is only
// as good as its hash is unpredictable) and its entry. Every entry in it
// is keyed (allocKeyed): the key is the entry's own copy, in the entry's
// allocation, so the key compare reads memory the caller reads next
// anyway. A lookup reads one slot's cache line, where a Go map of strings
// reads a control word and a slot, often two lines, and hashes the key
// again with a function of its own. A slot is 16 bytes, at most 3/4 of the
// slots are used: fewer bytes per key than the map's 24-byte slots.
//
// A removal shifts the entries that follow back (no tombstones), so that a
// lookup never probes past an empty slot. The zero table is empty and
// ready to use.
type table struct {
	slots []tslot
	// n is the number of entries; shift is 64 - log2(len(slots)), so that
	// h>>shift is the home slot of hash h (its high bits).
	n     int
	shift uint
}

// tslot is one slot of a table; e is nil when the slot is empty.
type tslot struct {
	h uint64
	e *entry
}

// tableMin is the number of slots of a table's first allocation.
const tableMin = 8

// len returns the number of entries.
func (t *table) len() int { return t.n }

// get returns the entry of key, whose store hash is h, or nil.
func (t *table) get(h uint64, key string) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h >> t.shift; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.h == h {
			if k, _ := s.e.key(); k == key {
				return s.e
			}
		}
	}
}

// put adds e, a keyed entry whose key hashes to h and is not in t.
func (t *table) put(h uint64, e *entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.place(h, e)
	t.n++
}

// place puts e in the first empty slot from h's home slot on.
func (t *table) place(h uint64, e *entry) {
	mask := uint64(len(t.slots) - 1)
	i := h >> t.shift
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = tslot{h: h, e: e}
}

// grow doubles the slots (or makes the first ones) and places the entries
// again.
func (t *table) grow() {
	old := t.slots
	size := max(tableMin, 2*len(old))
	t.slots = make([]tslot, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, s := range old {
		if s.e != nil {
			t.place(s.h, s.e)
		}
	}
}

// del removes e, whose key hashes to h, and reports whether it was in t.
func (t *table) del(h uint64, e *entry) bool {
	if t.n == 0 {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	i := h >> t.shift
	for ; t.slots[i].e != e; i = (i + 1) & mask {
		if t.slots[i].e == nil {
			return false
		}
	}
	// Shift back each following entry of the run that may sit in the
	// hole: one whose home slot is not after the hole (cyclically).
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.e == nil {
			break
		}
		if home := s.h >> t.shift; (j-home)&mask < (j-i)&mask {
			continue // home is in (i, j]: it cannot move before it
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = tslot{}
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
		mask := len(t.slots) - 1
		start := 0
		for t.slots[start].e != nil {
			start++ // at most 3/4 of the slots are used: one is empty
		}
		for k := 1; k <= len(t.slots); {
			i := (start + k) & mask
			e := t.slots[i].e
			if e == nil {
				k++
				continue
			}
			key, _ := e.key()
			if !yield(key, e) {
				return
			}
			if t.slots[i].e == e {
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
