package bucket

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

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
