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

// Header flags. A flag set means the field follows the header's varints, as
// a uvarint that is not zero; a limit without Guava's options writes the
// header of earlier releases, byte for byte.
const (
	flagCountRejected   = 1 << 0
	flagMaxBurstSeconds = 1 << 1
	flagColdFactor      = 1 << 2
	knownFlags          = flagCountRejected | flagMaxBurstSeconds | flagColdFactor
)

// limitFlags returns the header flags of l.
func limitFlags(l *Limit) byte {
	var flags byte
	if l.CountRejected {
		flags |= flagCountRejected
	}
	if l.MaxBurstMillis != 0 {
		flags |= flagMaxBurstSeconds
	}
	if l.ColdFactorMilli != 0 {
		flags |= flagColdFactor
	}
	return flags
}

// appendLimit writes the header shared by every state: version, algorithm,
// flags and the limit's fields.
func appendLimit(b []byte, l Limit) []byte {
	// One allocation for the header and a small state (a token bucket's is
	// about 30 bytes), instead of one per field as the buffer grows.
	b = slices.Grow(b, encodedGuess)
	flags := limitFlags(&l)
	b = append(b, stateVersion, byte(l.Algorithm), flags)
	b = binary.AppendUvarint(b, uint64(l.Limit))
	b = binary.AppendUvarint(b, uint64(l.Period))
	b = binary.AppendUvarint(b, uint64(l.Burst))
	b = binary.AppendUvarint(b, uint64(l.MaxWait))
	b = binary.AppendUvarint(b, uint64(l.MinGap))
	b = binary.AppendUvarint(b, uint64(l.WarmUp))
	if flags&flagMaxBurstSeconds != 0 {
		b = binary.AppendUvarint(b, uint64(l.MaxBurstMillis))
	}
	if flags&flagColdFactor != 0 {
		b = binary.AppendUvarint(b, uint64(l.ColdFactorMilli))
	}
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

// option reads a flagged option: a uvarint in [1, hi] (it is written only
// when set).
func (r *reader) option(what string, hi uint64) uint64 {
	v := r.uvarint(what)
	if r.err == nil && (v == 0 || v > hi) {
		r.fail(what)
		return 0
	}
	return v
}

func (r *reader) limit() Limit {
	if v := r.byte("version"); r.err == nil && v != stateVersion {
		r.err = fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	var l Limit
	l.Algorithm = Algorithm(r.byte("algorithm"))
	flags := r.byte("flags")
	if flags&^knownFlags != 0 {
		r.fail("flags")
	}
	l.CountRejected = flags&flagCountRejected != 0
	l.Limit = r.int63("limit")
	l.Period = time.Duration(r.int63("period"))
	l.Burst = r.int63("burst")
	l.MaxWait = time.Duration(r.int63("max_wait"))
	l.MinGap = time.Duration(r.int63("min_gap"))
	l.WarmUp = time.Duration(r.int63("warm_up"))
	if flags&flagMaxBurstSeconds != 0 {
		l.MaxBurstMillis = uint32(r.option("max_burst_seconds", math.MaxUint32))
	}
	if flags&flagColdFactor != 0 {
		l.ColdFactorMilli = uint16(r.option("cold_factor", math.MaxUint16))
	}
	return l
}

// uvarintAt reads the uvarint at b[i:] as binary.Uvarint does (the same
// values and the same inputs rejected) and returns it with the index after
// it, or i < 0 when it is truncated or overflows. A one-byte value, the
// common case of a limit's fields, is read inline.
func uvarintAt(b []byte, i int) (uint64, int) {
	if uint(i) < uint(len(b)) {
		if c := b[i]; c < 0x80 {
			return uint64(c), i + 1
		}
	}
	return uvarintSlow(b, i)
}

// uvarintSlow is uvarintAt for a value of more than one byte (or an index
// out of range), out of line so that uvarintAt stays small.
func uvarintSlow(b []byte, i int) (uint64, int) {
	if i < 0 {
		return 0, -1
	}
	var x uint64
	var s uint
	for k := 0; k < binary.MaxVarintLen64 && i < len(b); k++ {
		c := b[i]
		i++
		if c < 0x80 {
			if k == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -1 // overflow
			}
			return x | uint64(c)<<s, i
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, -1
}

// varintAt is uvarintAt for a zig-zag varint (binary.Varint).
func varintAt(b []byte, i int) (int64, int) {
	u, i := uvarintAt(b, i)
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x, i
}

// sameLimitAt reports whether b starts with a header (appendLimit) that
// reads as exactly l, a valid limit, and returns the index after it. It is
// the fast path of decoding a state under the limit its receiver already
// holds: no error is built, and the limit need not be validated again. When
// it reports false, the checked path (reader.limit) decides.
func sameLimitAt(b []byte, l *Limit) (int, bool) {
	if len(b) < 3 || b[0] != stateVersion || b[1] != byte(l.Algorithm) {
		return 0, false
	}
	flags := limitFlags(l)
	if b[2] != flags {
		return 0, false
	}
	// Every field of a valid limit is non-negative, so equal to one as a
	// uint64 is within int63 range, as reader.int63 requires.
	i := 3
	for _, want := range [...]int64{l.Limit, int64(l.Period), l.Burst, int64(l.MaxWait), int64(l.MinGap), int64(l.WarmUp)} {
		var v uint64
		if v, i = uvarintAt(b, i); v != uint64(want) || i < 0 {
			return 0, false
		}
	}
	if flags&flagMaxBurstSeconds != 0 {
		var v uint64
		if v, i = uvarintAt(b, i); v != uint64(l.MaxBurstMillis) || i < 0 {
			return 0, false
		}
	}
	if flags&flagColdFactor != 0 {
		var v uint64
		if v, i = uvarintAt(b, i); v != uint64(l.ColdFactorMilli) || i < 0 {
			return 0, false
		}
	}
	return i, true
}
