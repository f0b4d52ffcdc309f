package bucket

import (
	"math"
	"math/bits"
	"time"
)

// nanos converts a time to Unix nanoseconds, the unit of every stored
// timestamp.
func nanos(t time.Time) int64 { return t.UnixNano() }

// unix converts Unix nanoseconds back to a time.
func unix(ns int64) time.Time { return time.Unix(0, ns) }

// elapsed returns now - last, or zero when the clock went backwards.
func elapsed(last, now int64) int64 {
	if now <= last {
		return 0
	}
	d := now - last
	if d < 0 { // overflow: now - last exceeds MaxInt64
		return math.MaxInt64
	}
	return d
}

// later returns the later of two instants.
func later(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// addSat returns a + b, saturated to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) && b != 0 {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// mulSat returns a * b for non-negative a and b, saturated at MaxInt64.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// mulDiv returns a * b / c for non-negative a, b and positive c, without
// intermediate overflow, saturated at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// toInt64 converts a non-negative float to int64, truncating, saturated to
// [0, MaxInt64]; NaN gives 0.
func toInt64(f float64) int64 {
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(f)
}

// toDuration converts a non-negative number of nanoseconds held in a float to
// a Duration, rounding up so that a caller who waits that long is admitted,
// saturated at MaxRetry.
func toDuration(ns float64) time.Duration {
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return MaxRetry
	}
	return time.Duration(math.Ceil(ns))
}
