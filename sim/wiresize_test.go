package sim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestWireSize checks wireSize against proto.Size over randomly filled
// envelopes: every body type, every field of every message (found through
// the descriptors, so a field added to peer.proto is filled too), values at
// the edges of their encodings (zero, -0 and NaN floats, negative ints,
// lengths around the varint boundaries) and items sharing one Limit.
func TestWireSize(t *testing.T) {
	const seed = 1
	rng := rand.New(rand.NewPCG(seed, 0))
	body := (&peerv1.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields()
	for i := range 20_000 {
		env := &peerv1.Envelope{}
		fillMessage(t, rng, env.ProtoReflect(), 0)
		// Every body type in turn, the last round with none.
		if k := i % (body.Len() + 1); k < body.Len() {
			f := body.Get(k)
			m := env.ProtoReflect()
			v := m.NewField(f)
			fillMessage(t, rng, v.Message(), 1)
			m.Set(f, v)
		} else {
			env.Body = nil
		}
		if rng.IntN(4) == 0 {
			shareLimits(rng, env)
		}
		if got, want := wireSize(env), proto.Size(env); got != want {
			t.Fatalf("seed %d, envelope %d: wireSize %d, proto.Size %d: %v", seed, i, got, want, env)
		}
	}
}

// TestWireSizeNil checks the messages that a descriptor-driven filler
// cannot build: set oneof members and items that are nil pointers.
func TestWireSizeNil(t *testing.T) {
	lim := &peerv1.Limit{Limit: 10, PeriodNs: 1e9}
	for i, env := range []*peerv1.Envelope{
		{},
		{Body: &peerv1.Envelope_Flush{}},
		{Body: &peerv1.Envelope_FlushAck{}},
		{Body: &peerv1.Envelope_Push{}},
		{Body: &peerv1.Envelope_Forward{}},
		{Body: &peerv1.Envelope_ForwardReply{}},
		{Body: &peerv1.Envelope_Handoff{}},
		{Body: &peerv1.Envelope_HandoffAck{}},
		{Body: &peerv1.Envelope_Backup{}},
		{Body: &peerv1.Envelope_BackupAck{}},
		{Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Items: []*peerv1.FlushItem{
			nil, {Limit: lim}, nil, {Limit: lim, Key: "k"}, {}, {Limit: &peerv1.Limit{}}, {Limit: lim}}}}},
		{Body: &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Items: []*peerv1.ForwardItem{
			{Limit: lim}, nil, {}, {Limit: lim, Hits: -1}}}}},
		{Body: &peerv1.Envelope_ForwardReply{ForwardReply: &peerv1.ForwardReply{Items: []*peerv1.Decision{nil, {}}}}},
		{Body: &peerv1.Envelope_Push{Push: &peerv1.Push{Items: []*peerv1.KeyState{nil, {}}}}},
	} {
		if got, want := wireSize(env), proto.Size(env); got != want {
			t.Errorf("envelope %d: wireSize %d, proto.Size %d: %v", i, got, want, env)
		}
	}
}

// shareLimits makes the items of a flush or forward share Limits, as the
// Node builds them, with some items keeping their own or none.
func shareLimits(rng *rand.Rand, env *peerv1.Envelope) {
	shared := &peerv1.Limit{Limit: rng.Int64N(1 << 20), PeriodNs: rng.Int64(), CountRejected: true}
	pick := func(l *peerv1.Limit) *peerv1.Limit {
		switch rng.IntN(4) {
		case 0:
			return l
		case 1:
			return nil
		}
		return shared
	}
	switch b := env.Body.(type) {
	case *peerv1.Envelope_Flush:
		for _, it := range b.Flush.Items {
			it.Limit = pick(it.Limit)
		}
	case *peerv1.Envelope_Forward:
		for _, it := range b.Forward.Items {
			it.Limit = pick(it.Limit)
		}
	}
}

// fillMessage sets m's fields at random: each left unset at times, one
// member of each oneof (below the top level, whose body the caller sets).
func fillMessage(t *testing.T, rng *rand.Rand, m protoreflect.Message, depth int) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.ContainingOneof() != nil || rng.IntN(4) == 0 {
			continue
		}
		switch {
		case f.IsList():
			l := m.Mutable(f).List()
			n := rng.IntN(4)
			if rng.IntN(8) == 0 {
				n = rng.IntN(300) // past a 2-byte length
			}
			for range n {
				if f.Kind() == protoreflect.MessageKind {
					v := l.NewElement()
					fillMessage(t, rng, v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(randomScalar(t, rng, f))
				}
			}
		case f.IsMap():
			t.Fatalf("%s: map fields are not sized by wireSize", f.FullName())
		case f.Kind() == protoreflect.MessageKind:
			v := m.NewField(f)
			fillMessage(t, rng, v.Message(), depth+1)
			m.Set(f, v)
		default:
			m.Set(f, randomScalar(t, rng, f))
		}
	}
}

// randomScalar returns a value of f's kind, at the edges of its encoding
// often.
func randomScalar(t *testing.T, rng *rand.Rand, f protoreflect.FieldDescriptor) protoreflect.Value {
	t.Helper()
	bits := rng.Uint64() >> rng.IntN(64) // every varint length
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.Int64Kind:
		v := int64(bits)
		if rng.IntN(3) == 0 {
			v = -v
		}
		return protoreflect.ValueOfInt64(v)
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(bits)
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(bits))
	case protoreflect.EnumKind:
		v := int32(rng.IntN(5))
		if rng.IntN(8) == 0 {
			v = -v - 1 // an unknown, negative number: ten bytes
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(v))
	case protoreflect.FloatKind:
		vs := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), rng.Float32(), -rng.Float32() * 1e30}
		return protoreflect.ValueOfFloat32(vs[rng.IntN(len(vs))])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strings.Repeat("k", randomLen(rng)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(make([]byte, randomLen(rng)))
	}
	t.Fatalf("%s: kind %v is not sized by wireSize", f.FullName(), f.Kind())
	return protoreflect.Value{}
}

// randomLen returns a string or bytes length, around the varint
// boundaries of a length prefix at times.
func randomLen(rng *rand.Rand) int {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return 120 + rng.IntN(16)
	case 2:
		return 16380 + rng.IntN(8)
	}
	return rng.IntN(24)
}
