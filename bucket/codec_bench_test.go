package bucket

import (
	"testing"
	"time"
)

// benchTokenState returns a token bucket under a typical limit (100 per
// second) with a few hits taken, and its encoded state.
func benchTokenState(b *testing.B) (Bucket, []byte) {
	t0 := time.Unix(1_700_000_000, 123_456_789)
	bk, err := New(Limit{Algorithm: TokenBucket, Limit: 100, Period: time.Second}, t0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bk.Take(t0, 3); err != nil {
		b.Fatal(err)
	}
	if _, err := bk.Take(t0.Add(7*time.Millisecond), 1); err != nil {
		b.Fatal(err)
	}
	enc, _ := bk.AppendBinary(nil)
	return bk, enc
}

// BenchmarkDecodeIntoSame measures DecodeInto of a token state under the
// limit dst already has, the common case of an owner's answer or push.
func BenchmarkDecodeIntoSame(b *testing.B) {
	dst, enc := benchTokenState(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeInto(dst, enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeToken measures Decode of a token state.
func BenchmarkDecodeToken(b *testing.B) {
	_, enc := benchTokenState(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendToken measures AppendBinary of a token state into a
// buffer with room.
func BenchmarkAppendToken(b *testing.B) {
	bk, _ := benchTokenState(b)
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = bk.AppendBinary(buf[:0])
	}
}
