package bucket

import (
	"testing"
	"time"
)

// TestContractShift: a state shifted by d and then driven at instants d
// later decides exactly as the original driven at the original instants
// (ResetAt d later), for every algorithm, forwards and backwards, and its
// encoding survives a round trip. The windows of FixedWindow and
// SlidingCounter are aligned to the clock, so for them d is a multiple of
// the period (ctLimit's 1 s); the other algorithms also take an odd d.
func TestContractShift(t *testing.T) {
	shifts := []time.Duration{30 * time.Minute, -30 * time.Minute, 2 * time.Second, -2 * time.Second, 1500 * time.Microsecond, -7 * time.Millisecond}
	for _, a := range Algorithms() {
		for _, d := range shifts {
			if (a == FixedWindow || a == SlidingCounter) && d%time.Second != 0 {
				continue // aligned windows: only whole periods keep the alignment
			}
			orig := ctNew(t, a, ctT0)
			end := ctDrive(t, orig, ctT0, 37)
			moved := orig.Clone()
			moved.Shift(d)
			dec, err := Decode(ctEncode(t, moved))
			if err != nil {
				t.Fatalf("%v shifted %v: Decode: %v", a, d, err)
			}
			for i := range 40 {
				now := end.Add(time.Duration(i) * ctStep / 2)
				want := ctTake(t, orig, now, 1)
				for _, b := range []Bucket{moved, dec} {
					got := ctTake(t, b, now.Add(d), 1)
					got.ResetAt = got.ResetAt.Add(-d)
					if !ctSame(got, want) {
						t.Fatalf("%v shifted %v, step %d: got %s, want %s", a, d, i, ctFmt(got), ctFmt(want))
					}
				}
			}
		}
	}
}

// TestShiftKeepsWindowCount: a fixed window's count moves with its window,
// so a spent window read 30 minutes earlier on another clock is still
// spent there, and a state from a clock 30 minutes behind is not in the
// future on the receiver's.
func TestShiftKeepsWindowCount(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Limit: 100, Period: time.Minute}
	ahead := ctT0.Add(30 * time.Minute) // the sender's clock
	b, err := New(l, ahead)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Drain(ahead, 100); err != nil {
		t.Fatal(err)
	}
	b.Shift(-30 * time.Minute)
	if d := ctTake(t, b, ctT0.Add(time.Second), 1); d.Allowed {
		t.Fatalf("spent window, shifted to the receiver's clock: admitted (%s)", ctFmt(d))
	}
	if d := ctTake(t, b, ctT0.Add(time.Minute), 1); !d.Allowed {
		t.Fatalf("next window on the receiver's clock: rejected (%s)", ctFmt(d))
	}
}
