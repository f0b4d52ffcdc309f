package sync

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestTableAgainstMap runs random puts, dels and gets on a table and on a
// map (the reference), and compares lookups, lengths and iteration after
// every step. Hashes are drawn from a few values spread over the high bits
// (the home slot), so that runs form, collide, wrap around the end of the
// slots and keys share a hash.
func TestTableAgainstMap(t *testing.T) {
	for _, hashes := range []int{1, 3, 64, 1 << 20} {
		t.Run(fmt.Sprint(hashes, " hashes"), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(hashes)))
			hashOf := func(i int) uint64 {
				// Deterministic per key: its home slot in the high bits.
				return uint64(i%hashes)*0x9e3779b97f4a7c15 | 1
			}
			var tb table[cachedKey]
			ref := map[string]*cachedKey{}
			es := map[string]*cachedKey{}
			for step := range 4000 {
				i := rng.IntN(300)
				key := fmt.Sprintf("k%d", i)
				if i%7 == 0 {
					key += "-a-key-longer-than-forty-seven-bytes-stored-on-its-own"
				}
				h := hashOf(i)
				switch op := rng.IntN(3); {
				case op == 0 && ref[key] == nil:
					e := cachedWith(key, nil, 0)
					tb.put(h, e)
					ref[key], es[key] = e, e
				case op == 1 && ref[key] != nil:
					if !tb.del(h, ref[key]) {
						t.Fatalf("step %d: del(%q) found nothing", step, key)
					}
					delete(ref, key)
				case op == 1:
					if e := es[key]; e != nil && tb.del(h, e) {
						t.Fatalf("step %d: del(%q) of an entry not in the table reported true", step, key)
					}
				}
				if got, want := tb.get(h, key), ref[key]; got != want {
					t.Fatalf("step %d: get(%q) = %p, want %p", step, key, got, want)
				}
				if tb.len() != len(ref) {
					t.Fatalf("step %d: len = %d, want %d", step, tb.len(), len(ref))
				}
				if step%100 == 0 {
					checkAll(t, &tb, ref)
				}
			}
			checkAll(t, &tb, ref)
		})
	}
}

// checkAll checks that iterating over tb yields exactly ref's keys and
// entries, once each.
func checkAll(t *testing.T, tb *table[cachedKey], ref map[string]*cachedKey) {
	t.Helper()
	seen := map[string]bool{}
	for k, e := range tb.all() {
		if seen[k] {
			t.Fatalf("all: %q twice", k)
		}
		seen[k] = true
		if ref[k] != e {
			t.Fatalf("all: %q with entry %p, want %p", k, e, ref[k])
		}
	}
	if len(seen) != len(ref) {
		t.Fatalf("all: %d keys, want %d", len(seen), len(ref))
	}
}

// TestTableDeleteWhileIterating removes entries from within the loop over
// all(), as sweeps do, and checks that every entry is visited once and that
// exactly the removed ones are gone, with colliding hashes.
func TestTableDeleteWhileIterating(t *testing.T) {
	for _, hashes := range []int{1, 5, 1 << 20} {
		var tb table[cachedKey]
		hs := map[*cachedKey]uint64{}
		var keys []string
		for i := range 200 {
			key := fmt.Sprintf("key-%d", i)
			e := cachedWith(key, nil, 0)
			h := uint64(i%hashes) * 0x9e3779b97f4a7c15
			tb.put(h, e)
			hs[e] = h
			keys = append(keys, key)
		}
		seen := map[string]int{}
		for k, e := range tb.all() {
			seen[k]++
			if len(k)%2 == 0 { // remove about half
				if !tb.del(hs[e], e) {
					t.Fatalf("%d hashes: del(%q) from within all found nothing", hashes, k)
				}
			}
		}
		for _, k := range keys {
			if seen[k] != 1 {
				t.Fatalf("%d hashes: %q visited %d times, want 1", hashes, k, seen[k])
			}
			i := slices.Index(keys, k)
			h := uint64(i%hashes) * 0x9e3779b97f4a7c15
			if got := tb.get(h, k) != nil; got != (len(k)%2 != 0) {
				t.Fatalf("%d hashes: %q held %v after the loop, want %v", hashes, k, got, len(k)%2 != 0)
			}
		}
	}
}

// TestTableEmpty checks the zero table.
func TestTableEmpty(t *testing.T) {
	var tb table[cachedKey]
	e := cachedWith("k", nil, 0)
	if tb.get(1, "k") != nil || tb.del(1, e) || tb.len() != 0 {
		t.Fatal("zero table: not empty")
	}
	for range tb.all() {
		t.Fatal("zero table: all yielded an entry")
	}
}

// TestStoreHashSeeded checks that each store seeds its hash: two stores
// hash the same keys differently and so lay them out in different orders,
// while a store hashes a key the same way every time.
func TestStoreHashSeeded(t *testing.T) {
	a, b := newStore(1<<20, 0, 0, new(Metrics)), newStore(1<<20, 0, 0, new(Metrics))
	var ta, tb table[cachedKey]
	same := 0
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		if a.hash(key) != a.hash(key) {
			t.Fatalf("store a hashes %q two ways", key)
		}
		if a.hash(key) == b.hash(key) {
			same++
		}
		ea := cachedWith(key, nil, 0)
		eb := cachedWith(key, nil, 0)
		ta.put(a.hash(key), ea)
		tb.put(b.hash(key), eb)
	}
	// Two 64-bit hashes of a key agree with probability 2^-64 if the seeds
	// differ; a few of 1000 would mean the seed is ignored.
	if same > 0 {
		t.Errorf("%d of 1000 keys hash the same in two stores, want 0", same)
	}
	var oa, ob []string
	for k := range ta.all() {
		oa = append(oa, k)
	}
	for k := range tb.all() {
		ob = append(ob, k)
	}
	if slices.Equal(oa, ob) {
		t.Errorf("two stores lay out 1000 keys in the same order")
	}
}

// TestTableSameXXHash builds keys that all have the same xxhash64 (the
// ring's hash, unseeded) as a client could, and checks that in a table
// under the store hash they do not pile up in one probe run, as they do
// under xxhash: with it, the last one put is found after walking all the
// others.
func TestTableSameXXHash(t *testing.T) {
	const n = 1000
	keys := sameXXHashKeys(n)
	want := xxhash.Sum64String(keys[0])
	for _, k := range keys {
		if len(k) != 64 || xxhash.Sum64String(k) != want {
			t.Fatalf("key %x: xxhash %x, want %x (64 bytes)", k, xxhash.Sum64String(k), want)
		}
	}
	st := newStore(1<<20, 0, 0, new(Metrics))
	for _, tc := range []struct {
		name string
		hash func(string) uint64
		max  int // the longest distance allowed from a home slot
	}{
		{"xxhash", xxhash.Sum64String, n - 1},
		// At most 3/4 full, linear probing's longest run over n random
		// hashes is some tens of slots (expected O(log n)).
		{"store hash", st.hash, 64},
	} {
		var tb table[cachedKey]
		for _, k := range keys {
			e := cachedWith(k, nil, 0)
			tb.put(tc.hash(k), e)
		}
		for _, k := range keys {
			if e := tb.get(tc.hash(k), k); e == nil {
				t.Fatalf("%s: %x not found", tc.name, k)
			}
		}
		if got := maxDisplacement(&tb); got > tc.max {
			t.Errorf("%s: a key sits %d slots after its home slot, want at most %d", tc.name, got, tc.max)
		} else if tc.name == "xxhash" && got != n-1 {
			t.Errorf("xxhash: longest distance %d, want %d (the keys share one home slot)", got, n-1)
		}
	}
}

// maxDisplacement returns the longest distance of an entry of t from its
// home slot: the number of slots a lookup of it walks past.
func maxDisplacement(t *table[cachedKey]) int {
	mask := uint32(len(t.tags) - 1)
	d := 0
	for j, g := range t.tags {
		if g != 0 {
			d = max(d, int((uint32(j)-g>>t.shift)&mask))
		}
	}
	return d
}

// The primes of xxhash64.
const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
)

// sameXXHashKeys returns n distinct 64-byte keys with one xxhash64 (seed
// 0). xxhash64 runs each 32-byte stripe of a long key through four lanes,
// lane = rotl(lane+x*prime2, 31) * prime1 for the stripe's word x, a
// bijection of x: a first stripe that differs from key to key, and a
// second stripe solved to bring every lane to one fixed state, give keys
// whose hashes are equal, since the hash then depends on that state and
// the length alone.
func sameXXHashKeys(n int) []string {
	inv1, inv2 := inverse(xxPrime1), inverse(xxPrime2)
	target := [4]uint64{1, 2, 3, 4} // any state will do
	keys := make([]string, n)
	for i := range keys {
		// The lanes start from seed 0 (in variables: the sums wrap).
		p1, p2 := xxPrime1, xxPrime2
		lanes := [4]uint64{p1 + p2, p2, 0, -p1}
		buf := make([]byte, 64)
		for j := range lanes {
			x := uint64(i)<<8 | uint64(j) // the first stripe: key i's own
			binary.LittleEndian.PutUint64(buf[8*j:], x)
			lanes[j] = bits.RotateLeft64(lanes[j]+x*xxPrime2, 31) * xxPrime1
			// The second stripe's word takes the lane to target[j].
			y := (bits.RotateLeft64(target[j]*inv1, -31) - lanes[j]) * inv2
			binary.LittleEndian.PutUint64(buf[32+8*j:], y)
		}
		keys[i] = string(buf)
	}
	return keys
}

// inverse returns the inverse of the odd x modulo 2^64 (Newton's method:
// each step doubles the correct low bits, from 3 for x itself).
func inverse(x uint64) uint64 {
	y := x
	for range 5 {
		y *= 2 - x*y
	}
	return y
}
