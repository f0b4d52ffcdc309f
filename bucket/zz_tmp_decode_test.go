package bucket

import (
	"testing"
	"time"
)

func FuzzTmpDecodeMine(f *testing.F) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, l := range []Limit{
		{Algorithm: FixedWindow, Limit: 3, Period: time.Second},
		{Algorithm: SlidingLog, Limit: 3, Period: time.Second, MinGap: 10, CountRejected: true},
		{Algorithm: SlidingCounter, Limit: 3, Period: time.Second},
		{Algorithm: Concurrency, Limit: 3, Period: time.Second},
	} {
		b, _ := New(l, t0)
		b.Take(t0, 1)
		b.Drain(t0.Add(3), 5)
		if s, ok := b.(Semaphore); ok {
			s.Acquire(t0.Add(4), "x", 1)
		}
		enc, _ := b.AppendBinary(nil)
		f.Add(enc, int64(5), int64(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, dt, hits int64) {
		b, err := Decode(data)
		if err != nil {
			return
		}
		a := b.Config().Algorithm
		if a != FixedWindow && a != SlidingLog && a != SlidingCounter && a != Concurrency {
			return
		}
		enc, _ := b.AppendBinary(nil)
		c, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		now := time.Unix(0, dt)
		for _, h := range []int64{hits, 0, 1} {
			d, err := b.Take(now, h)
			if err == nil {
				fwCheckDecision(t, "take", b.Config(), h, d)
			}
		}
		if s, ok := b.(Semaphore); ok {
			s.Acquire(now, "x", hits)
			s.Release(now, "x")
		}
		b.Drain(now, hits)
		b.Refund(now, hits)
		b.Merge(now, c)
		c.Merge(now, b)
		l := b.Config()
		l.Limit = max(1, l.Limit/2)
		b.Reconfigure(now, l)
		b.Idle(now)
		fwRoundTrip(t, b)
		fwRoundTrip(t, c)
		fwRoundTrip(t, b.Clone())
	})
}
