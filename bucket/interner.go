package bucket

import (
	"bytes"
	"slices"
	"time"
	"unique"
)

// Interner is a one-entry memo of interned limits, for one caller that
// builds and decodes many token buckets under a few limits (a node's
// store): it remembers the last limit it interned, validated, so that a
// bucket under that limit again skips package unique's lookup (a hash of
// the whole Limit and a probe of a concurrent map: about 430 instructions,
// 4-6% of a coordinated decision in sync's BenchmarkCoreUniform) and the
// limit's validation. The buckets are those NewIn and DecodeInto return,
// under the same canonical limit. Its zero value is ready to use. An
// Interner is not safe for concurrent use.
type Interner struct {
	last Limit // validated; meaningful once ok
	h    unique.Handle[Limit]
	// enc is last's encoding (appendLimit; empty until encoded needs
	// it), with which every state under it begins: a state is read as one
	// under last when its first bytes are these, without decoding them (a
	// limit's six varints and more), and written by copying them.
	enc []byte
	ok  bool
}

// handle returns the interned l, which has its defaults applied, or l's
// validation error.
func (in *Interner) handle(l Limit) (unique.Handle[Limit], error) {
	if in.ok && l == in.last {
		return in.h, nil
	}
	if err := l.Validate(); err != nil {
		return unique.Handle[Limit]{}, err
	}
	in.remember(unique.Make(l))
	return in.h, nil
}

// remember makes h, a validated limit, the one in remembers.
func (in *Interner) remember(h unique.Handle[Limit]) {
	in.last, in.h, in.ok = h.Value(), h, true
	in.enc = in.enc[:0] // encoded when first needed: NewIn alone never does
}

// encoded returns the encoding of the limit in remembers (in.ok).
func (in *Interner) encoded() []byte {
	if len(in.enc) == 0 { // a limit's encoding is never empty
		in.enc = appendLimit(in.enc, in.last)
	}
	return in.enc
}

// NewIn is the package's NewIn, interning l through in.
func (in *Interner) NewIn(sp *Space, l Limit, now time.Time) (Bucket, error) {
	l = l.WithDefaults()
	if l.Algorithm != TokenBucket {
		return New(l, now)
	}
	h, err := in.handle(l)
	if err != nil {
		return nil, err
	}
	sp.tb = tokenBucket{l: h, whole: l.Capacity(), last: nanos(now)}
	return &sp.tb, nil
}

// DecodeInto is the package's DecodeInto, which first reads b as a state
// under the limit in remembers (b must begin with the limit's encoding,
// byte for byte), into dst when dst is a token bucket, as DecodeInto
// reuses it, and else into a new bucket. Any other state takes
// DecodeInto's path, with the same result and the same error.
func (in *Interner) DecodeInto(dst Bucket, b []byte) (Bucket, error) {
	tb, reuse := dst.(*tokenBucket)
	if in.ok && bytes.HasPrefix(b, in.encoded()) {
		if t, ok := decodeStateAt(in.h, &in.last, b, len(in.enc)); ok {
			if !reuse {
				tb = new(tokenBucket)
			}
			*tb = t
			return tb, nil
		}
	}
	bk, err := DecodeInto(dst, b)
	if tb, ok := bk.(*tokenBucket); ok && err == nil && (!in.ok || tb.l != in.h) {
		in.remember(tb.l)
	}
	return bk, err
}

// AppendBinary is b.AppendBinary(buf), which copies the limit's encoding
// when b is a token bucket under the limit in remembers, instead of
// encoding its fields again.
func (in *Interner) AppendBinary(buf []byte, b Bucket) ([]byte, error) {
	tb, ok := b.(*tokenBucket)
	if !ok || !in.ok || tb.l != in.h {
		return b.AppendBinary(buf)
	}
	buf = slices.Grow(buf, encodedGuess) // as appendLimit
	return tb.appendState(append(buf, in.encoded()...)), nil
}
