package sync

import (
	"strings"
	"testing"
	"unsafe"
)

// TestKeyedEntryForms pins the keyed forms of an entry: each in the size
// class it is meant for, each with its key length where keyedHead has it
// (entry.key relies on that), and each giving back its key.
func TestKeyedEntryForms(t *testing.T) {
	forms := []struct {
		name       string
		size, want uintptr
		nOff       uintptr
	}{
		{"entryBucket", unsafe.Sizeof(entryBucket{}), 80, unsafe.Offsetof(keyedHead{}.n)},
		{"entryKey16", unsafe.Sizeof(entryKey16{}), 96, unsafe.Offsetof(entryKey16{}.n)},
		{"entryKey32", unsafe.Sizeof(entryKey32{}), 112, unsafe.Offsetof(entryKey32{}.n)},
		{"entryKey48", unsafe.Sizeof(entryKey48{}), 128, unsafe.Offsetof(entryKey48{}.n)},
		{"entryKeyLong", unsafe.Sizeof(entryKeyLong{}), 104, unsafe.Offsetof(entryKeyLong{}.n)},
	}
	for _, f := range forms {
		if f.size != f.want {
			t.Errorf("%s is %d bytes, want %d", f.name, f.size, f.want)
		}
		if f.nOff != unsafe.Offsetof(keyedHead{}.n) {
			t.Errorf("%s has its key length at %d, keyedHead at %d", f.name, f.nOff, unsafe.Offsetof(keyedHead{}.n))
		}
	}
	for _, n := range []int{0, 1, 15, 16, 31, 32, 47, 48, 254, 255, 256, 1000} {
		key := strings.Repeat("k", n)
		e, own, err := newKeyedEntry(key, perMinute(60), t0, 7)
		if err != nil {
			t.Fatal(err)
		}
		if own != key || mustKey(t, e) != key {
			t.Errorf("len %d: copy %q, key() %q", n, own, mustKey(t, e))
		}
		if !e.has(flagKeyed) || e.used() != 7 || e.b == nil {
			t.Errorf("len %d: meta %#x, bucket %v", n, e.meta, e.b)
		}
		e.makeOwned()
		e.makeCached(true)
		e.touch(9, 1, false)
		if !e.has(flagKeyed) || mustKey(t, e) != key {
			t.Errorf("len %d: after role changes, meta %#x", n, e.meta)
		}
		e2 := newKeyedEntryFor(key, e.b, 3)
		if mustKey(t, e2) != key || e2.b != e.b || e2.used() != 3 {
			t.Errorf("len %d: newKeyedEntryFor: key %q, used %d", n, mustKey(t, e2), e2.used())
		}
	}
	e, _ := newEntry(perMinute(60), t0, 0)
	if key, ok := e.key(); e.has(flagKeyed) || ok {
		t.Errorf("newEntry's entry: flagged keyed %v, key() %q, %v; want neither", e.has(flagKeyed), key, ok)
	}
}

// mustKey returns e's key, failing t if e does not hold it.
func mustKey(t *testing.T, e *entry) string {
	t.Helper()
	key, ok := e.key()
	if !ok {
		t.Fatalf("entry %p holds no key", e)
	}
	return key
}
