package bucket

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestInternerNewIn: an Interner builds the bucket NewIn builds, or fails
// as NewIn fails, whatever limit it remembers from the step before: the
// same limit again, another, an invalid one, one of another algorithm.
func TestInternerNewIn(t *testing.T) {
	limits := []Limit{
		{Limit: 100, Period: time.Second}, // TokenBucket by default
		{Algorithm: TokenBucket, Limit: 100, Period: time.Second},
		{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 7},
		{Algorithm: TokenBucket, Limit: 0, Period: time.Second}, // invalid
		{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 7},
		{Algorithm: GCRA, Limit: 10, Period: time.Second},
		{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 7},
		{Algorithm: TokenBucket, Limit: 100, Period: -1}, // invalid
		{Limit: 100, Period: time.Second},
	}
	var in Interner
	for step, l := range limits {
		now := fzT0.Add(time.Duration(step) * time.Millisecond)
		var sw, sg Space
		want, werr := NewIn(&sw, l, now)
		got, gerr := in.NewIn(&sg, l, now)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("step %d: Interner.NewIn error %v, NewIn error %v", step, gerr, werr)
		}
		if werr != nil {
			if werr.Error() != gerr.Error() {
				t.Fatalf("step %d: Interner.NewIn error %q, NewIn error %q", step, gerr, werr)
			}
			continue
		}
		wenc, _ := want.AppendBinary(nil)
		genc, _ := got.AppendBinary(nil)
		if !bytes.Equal(genc, wenc) || got.Config() != want.Config() {
			t.Fatalf("step %d: Interner.NewIn built %x under %+v, NewIn %x under %+v", step, genc, got.Config(), wenc, want.Config())
		}
		if tb, ok := got.(*tokenBucket); ok && tb.l != want.(*tokenBucket).l {
			t.Fatalf("step %d: Interner.NewIn's limit is not the canonical one", step)
		}
		checkInternedAppend(t, &in, want)
		checkInternedAppend(t, &in, mustNew(t, Limit{Algorithm: TokenBucket, Limit: 9, Period: time.Minute}))
	}
}

// checkInternedAppend checks that in encodes b as b.AppendBinary does,
// after what the buffer held.
func checkInternedAppend(t *testing.T, in *Interner, b Bucket) {
	t.Helper()
	_, _ = b.Take(fzT0.Add(time.Second), 1)
	want, _ := b.AppendBinary([]byte("head"))
	got, err := in.AppendBinary([]byte("head"), b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Interner(%+v).AppendBinary = %x, %v; AppendBinary %x", in.last, got, err, want)
	}
}

// mustNew is New, failing t on an error.
func mustNew(t *testing.T, l Limit) Bucket {
	t.Helper()
	b, err := New(l, fzT0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkInternedDecode checks that an Interner that remembers l, or another
// limit, decodes b as Decode does: into a bucket of its own when given no
// dst, and into dst, a token bucket under the limit it remembers or under
// another, when DecodeInto would reuse dst, leaving dst unchanged on an
// error.
func checkInternedDecode(t *testing.T, l Limit, b []byte) {
	t.Helper()
	want, werr := Decode(b)
	for _, prime := range []Limit{l, {Algorithm: TokenBucket, Limit: 3, Period: time.Hour}} {
		for into := range 3 {
			var in Interner
			var sp, dsp Space
			if _, err := in.NewIn(&sp, prime, fzT0); err != nil {
				t.Fatal(err)
			}
			var dst Bucket
			switch into {
			case 1:
				dst, _ = in.NewIn(&dsp, prime, fzT0)
			case 2:
				dst, _ = NewIn(&dsp, Limit{Algorithm: TokenBucket, Limit: 7, Period: time.Minute}, fzT0)
			}
			var before []byte
			if dst != nil {
				before, _ = dst.AppendBinary(nil)
			}
			got, gerr := in.DecodeInto(dst, b)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("Interner(%+v).DecodeInto(%v, %x) error %v, Decode error %v", prime, dst, b, gerr, werr)
			}
			if gerr != nil {
				if got != nil || !errors.Is(gerr, ErrCorrupt) {
					t.Fatalf("Interner.DecodeInto(%x) = %v, %v; want nil and an error wrapping ErrCorrupt", b, got, gerr)
				}
				if dst != nil {
					if after, _ := dst.AppendBinary(nil); !bytes.Equal(after, before) {
						t.Fatalf("Interner.DecodeInto(dst, %x) failed but changed dst", b)
					}
				}
				continue
			}
			genc, _ := got.AppendBinary(nil)
			wenc, _ := want.AppendBinary(nil)
			if !bytes.Equal(genc, wenc) || got.Config() != want.Config() {
				t.Fatalf("Interner(%+v).DecodeInto(%v, %x) decoded %x, Decode %x", prime, dst, b, genc, wenc)
			}
			if got == Bucket(&sp.tb) {
				t.Fatalf("Interner.DecodeInto(%x) returned a bucket it had built before", b)
			}
			_, tokens := dst.(*tokenBucket)
			if reused, wantReuse := dst != nil && got == dst, tokens && want.Config().Algorithm == TokenBucket; reused != wantReuse {
				t.Fatalf("Interner.DecodeInto(dst, %x): reused dst %v, want %v", b, reused, wantReuse)
			}
		}
	}
}
