package bucket

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// stateVersion is the first byte of every encoded state. Bump it when an
// algorithm's layout changes, and keep decoding the old one.
const stateVersion = 1

// encodedGuess is the room appendLimit makes for a whole state: enough for
// the header and the state of the small algorithms.
const encodedGuess = 48

// appendLimit writes the header shared by every state: version, algorithm and
// the limit's fields.
func appendLimit(b []byte, l Limit) []byte {
	// One allocation for the header and a small state (a token bucket's is
	// about 30 bytes), instead of one per field as the buffer grows.
	b = slices.Grow(b, encodedGuess)
	var flags byte
	if l.CountRejected {
		flags |= 1
	}
	b = append(b, stateVersion, byte(l.Algorithm), flags)
	b = binary.AppendUvarint(b, uint64(l.Limit))
	b = binary.AppendUvarint(b, uint64(l.Period))
	b = binary.AppendUvarint(b, uint64(l.Burst))
	b = binary.AppendUvarint(b, uint64(l.MaxWait))
	b = binary.AppendUvarint(b, uint64(l.MinGap))
	b = binary.AppendUvarint(b, uint64(l.WarmUp))
	return b
}

// appendVarint, appendUvarint and appendFloat write one state field.
func appendVarint(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }
func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// reader decodes a state. The first error sticks: later reads return zero
// values, and the caller checks err once at the end.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s at byte %d", ErrCorrupt, what, r.off)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.buf) {
		r.fail(what)
		return 0
	}
	c := r.buf[r.off]
	r.off++
	return c
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.off += n
	return v
}

// int63 reads a uvarint that must fit in a non-negative int64.
func (r *reader) int63(what string) int64 {
	v := r.uvarint(what)
	if v > math.MaxInt64 {
		r.fail(what)
		return 0
	}
	return int64(v)
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.off:])
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.off += n
	return v
}

// float reads a float64 that must be finite.
func (r *reader) float(what string) float64 {
	if r.err != nil {
		return 0
	}
	if len(r.buf)-r.off < 8 {
		r.fail(what)
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.buf[r.off:]))
	if math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail(what)
		return 0
	}
	r.off += 8
	return f
}

func (r *reader) limit() Limit {
	if v := r.byte("version"); r.err == nil && v != stateVersion {
		r.err = fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	var l Limit
	l.Algorithm = Algorithm(r.byte("algorithm"))
	flags := r.byte("flags")
	if flags&^1 != 0 {
		r.fail("flags")
	}
	l.CountRejected = flags&1 != 0
	l.Limit = r.int63("limit")
	l.Period = time.Duration(r.int63("period"))
	l.Burst = r.int63("burst")
	l.MaxWait = time.Duration(r.int63("max_wait"))
	l.MinGap = time.Duration(r.int63("min_gap"))
	l.WarmUp = time.Duration(r.int63("warm_up"))
	return l
}
