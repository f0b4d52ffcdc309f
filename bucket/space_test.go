package bucket

import (
	"errors"
	"testing"
	"time"
)

// TestNewIn: a bucket built in a Space behaves as New's, step by step, and
// shares its memory with the Space; other algorithms and invalid limits go
// through New.
func TestNewIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 5}
	var sp Space
	got, err := NewIn(&sp, l, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.(*tokenBucket) != &sp.tb {
		t.Error("the token bucket was not built in the Space")
	}
	want, _ := New(l, t0)
	steps := []struct {
		at   time.Duration
		hits int64
	}{{0, 3}, {0, 3}, {50 * time.Millisecond, 1}, {time.Second, 5}, {time.Second, 1}}
	for i, s := range steps {
		g, _ := got.Take(t0.Add(s.at), s.hits)
		w, _ := want.Take(t0.Add(s.at), s.hits)
		if g != w {
			t.Errorf("step %d: got %+v, want %+v", i, g, w)
		}
	}
	gb, _ := got.AppendBinary(nil)
	wb, _ := want.AppendBinary(nil)
	if string(gb) != string(wb) {
		t.Errorf("state %x, want %x", gb, wb)
	}
	if _, err := DecodeInto(got, wb); err != nil || got.(*tokenBucket) != &sp.tb {
		t.Errorf("DecodeInto: %v, or not in place", err)
	}
	if err := want.Merge(t0, got); err != nil {
		t.Errorf("Merge with a bucket built in a Space: %v", err)
	}

	var other Space
	g, err := NewIn(&other, Limit{Algorithm: GCRA, Limit: 10, Period: time.Second}, t0)
	if err != nil || g.Config().Algorithm != GCRA {
		t.Errorf("GCRA: %v, %v", g, err)
	}
	if _, err := NewIn(&other, Limit{Algorithm: TokenBucket, Period: time.Second}, t0); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("invalid limit: %v, want ErrInvalidLimit", err)
	}
	if other != (Space{}) {
		t.Error("NewIn wrote a Space it did not build in")
	}
}

// TestMoveIn: a token bucket moved into a Space lives there with the same
// state and goes on deciding as the original would; another algorithm's
// bucket is returned as it is.
func TestMoveIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 5}
	var from, to Space
	b, _ := NewIn(&from, l, t0)
	_, _ = b.Take(t0.Add(30*time.Millisecond), 4)
	ref := b.Clone()
	moved := MoveIn(&to, b)
	if moved.(*tokenBucket) != &to.tb {
		t.Fatal("the token bucket was not moved into the Space")
	}
	for i, at := range []time.Duration{0, 40 * time.Millisecond, time.Second} {
		g, _ := moved.Take(t0.Add(at), 2)
		w, _ := ref.Take(t0.Add(at), 2)
		if g != w {
			t.Errorf("step %d: got %+v, want %+v", i, g, w)
		}
	}
	var other Space
	g, _ := New(Limit{Algorithm: GCRA, Limit: 10, Period: time.Second}, t0)
	if MoveIn(&other, g) != g || other != (Space{}) {
		t.Error("MoveIn moved a GCRA bucket, or wrote the Space")
	}
}
