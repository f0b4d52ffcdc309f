package bucket

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeInto checks DecodeInto against Decode: the same state or an
// error wrapping ErrCorrupt for the same inputs, dst reused only for a token
// bucket and left unchanged on error.
func FuzzDecodeInto(f *testing.F) {
	for _, s := range fzSeeds(f) {
		f.Add(s)
	}
	for _, g := range fzGarbage {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, a := range []Algorithm{TokenBucket, GCRA} {
			checkDecodeInto(t, ctLimit(a), b)
		}
	})
}

// checkDecodeInto checks DecodeInto(dst, b) against Decode(b) for dst a
// fresh bucket of l: the same state or both an error wrapping ErrCorrupt,
// dst reused only when both it and the state are token buckets, and left
// unchanged on error.
func checkDecodeInto(t *testing.T, l Limit, b []byte) {
	t.Helper()
	checkInternedDecode(t, l, b)
	dst, err := New(l, fzT0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := dst.AppendBinary(nil)
	want, werr := Decode(b)
	got, gerr := DecodeInto(dst, b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("DecodeInto(%v, %x) error %v, Decode error %v", l.Algorithm, b, gerr, werr)
	}
	if gerr != nil {
		if got != nil || !errors.Is(gerr, ErrCorrupt) {
			t.Fatalf("DecodeInto(%v, %x) = %v, %v; want nil and an error wrapping ErrCorrupt", l.Algorithm, b, got, gerr)
		}
		if after, _ := dst.AppendBinary(nil); !bytes.Equal(after, before) {
			t.Fatalf("DecodeInto(%v, %x) failed but changed dst", l.Algorithm, b)
		}
		return
	}
	genc, _ := got.AppendBinary(nil)
	wenc, _ := want.AppendBinary(nil)
	if !bytes.Equal(genc, wenc) {
		t.Fatalf("DecodeInto(%v, %x) decoded %x, Decode %x", l.Algorithm, b, genc, wenc)
	}
	reused := got == dst
	if wantReuse := l.Algorithm == TokenBucket && want.Config().Algorithm == TokenBucket; reused != wantReuse {
		t.Fatalf("DecodeInto(%v, %x): reused dst %v, want %v", l.Algorithm, b, reused, wantReuse)
	}
}
