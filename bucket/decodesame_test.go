package bucket

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// checkDecodeInto checks DecodeInto(dst, b) against Decode(b) for a token
// bucket dst: the same state or both an error wrapping ErrCorrupt, dst
// reused on success and unchanged on error.
func checkDecodeInto(t *testing.T, l Limit, b []byte) {
	t.Helper()
	dst, err := New(l, fzT0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := dst.AppendBinary(nil)
	want, werr := Decode(b)
	got, gerr := DecodeInto(dst, b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("DecodeInto(%x) error %v, Decode error %v", b, gerr, werr)
	}
	if gerr != nil {
		if got != nil || !errors.Is(gerr, ErrCorrupt) {
			t.Fatalf("DecodeInto(%x) = %v, %v; want nil and an error wrapping ErrCorrupt", b, got, gerr)
		}
		if after, _ := dst.AppendBinary(nil); !bytes.Equal(after, before) {
			t.Fatalf("DecodeInto(%x) failed but changed dst", b)
		}
		return
	}
	genc, _ := got.AppendBinary(nil)
	wenc, _ := want.AppendBinary(nil)
	if !bytes.Equal(genc, wenc) {
		t.Fatalf("DecodeInto(%x) decoded %x, Decode %x", b, genc, wenc)
	}
	if tb := want.Config().Algorithm == TokenBucket; tb != (got == dst) {
		t.Fatalf("DecodeInto(%x): reused dst %v, want %v", b, got == dst, tb)
	}
}

// TestDecodeIntoSameLimit checks DecodeInto's fast path (a token state
// under the limit dst holds) against Decode on states under dst's own
// limit, mutated byte by byte: truncated, extended, bits flipped, and with
// varints padded to a longer, non-minimal form (which Decode accepts).
func TestDecodeIntoSameLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	limits := []Limit{
		{Algorithm: TokenBucket, Limit: 100, Period: time.Second},
		{Algorithm: TokenBucket, Limit: 1, Period: 1},
		{Algorithm: TokenBucket, Limit: MaxLimit, Period: MaxPeriod, Burst: MaxLimit},
		{Algorithm: TokenBucket, Limit: 300, Period: time.Minute, Burst: 50, MaxWait: time.Second, MinGap: 3, WarmUp: 127},
		{Algorithm: TokenBucket, Limit: 128, Period: 128, Burst: 16384, CountRejected: true},
	}
	for _, l := range limits {
		b, err := New(l, fzT0)
		if err != nil {
			t.Fatal(err)
		}
		now := fzT0
		for step := range 40 {
			now = now.Add(time.Duration(rng.Int64N(int64(time.Second))))
			switch step % 3 {
			case 0:
				_, _ = b.Take(now, rng.Int64N(l.Capacity()+1))
			case 1:
				_ = b.Drain(now, rng.Int64N(3*l.Capacity()/2+1))
			default:
				_ = b.Refund(now, rng.Int64N(l.Capacity()/2+1))
			}
			enc, _ := b.AppendBinary(nil)
			checkDecodeInto(t, l, enc)
			for i := range enc {
				checkDecodeInto(t, l, enc[:i])
				m := bytes.Clone(enc)
				m[i] ^= 1 << rng.IntN(8)
				checkDecodeInto(t, l, m)
				m[i] = enc[i] | 0x80 // continue a varint into the next byte
				checkDecodeInto(t, l, m)
				// A minimal one-byte value padded to two bytes.
				if enc[i] < 0x80 {
					p := append(bytes.Clone(enc[:i]), enc[i]|0x80, 0)
					checkDecodeInto(t, l, append(p, enc[i+1:]...))
				}
			}
			checkDecodeInto(t, l, append(bytes.Clone(enc), 0))
		}
	}
}
