package peer

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The peer links measure every envelope: the sender to bound its queue in
// bytes (Send), the receiver to bound the driver's queue and reject
// envelopes over MaxEnvelopeBytes (receive). gRPC's codec measures the
// whole batch again before encoding it, and a received envelope has no
// size until it is measured: on 100-check calls in owner mode these
// passes took about 5% of the nodes' CPU (docs/bench.md "The peer
// codecs"). The codecs below let each envelope be measured once:
//
//   - linkCodec, the peer connections' codec, encodes a batch with the
//     sizes Send measured (proto.MarshalOptions.UseCachedSize), which is
//     safe because neither the core nor the transport modifies an envelope
//     once sent (rlsync.Transport);
//   - ServerCodec, the peer port server's codec, decodes the batch of a
//     Stream message envelope by envelope, each from its own bytes, whose
//     length is its encoded size: the server hands the sizes on with the
//     envelopes (deliverFrame).

// linkCodec is the codec of the connections to peers (see above): gRPC's
// protobuf codec, except that the envelopes of a DeliverRequest are
// encoded with the sizes Send measured.
type linkCodec struct{ proto encoding.CodecV2 }

// Marshal implements encoding.CodecV2.
func (c linkCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*peerv1.DeliverRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	// The request is new for each batch (its own size is not cached); its
	// envelopes were measured by Send and not modified since.
	o := proto.MarshalOptions{UseCachedSize: true}
	size := o.Size(req)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := o.MarshalAppend(make([]byte, 0, size), req)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := o.MarshalAppend((*buf)[:0], req); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal implements encoding.CodecV2.
func (c linkCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name implements encoding.CodecV2: it replaces "proto".
func (linkCodec) Name() string { return "proto" }

// deliverFrame is a DeliverRequest received on a Stream, with the encoded
// size of each envelope when the server's codec is ServerCodec (sizes is
// nil otherwise: gRPC's own codec decodes it as the DeliverRequest it is).
type deliverFrame struct {
	req   peerv1.DeliverRequest
	sizes []int
}

// ProtoReflect makes a deliverFrame a proto.Message, the DeliverRequest it
// holds, for a server codec other than ServerCodec.
func (f *deliverFrame) ProtoReflect() protoreflect.Message { return f.req.ProtoReflect() }

// ServerCodec returns the codec for the gRPC server the peer service is
// registered on (grpc.ForceServerCodecV2): gRPC's protobuf codec, except
// that it decodes the batches of Stream envelope by envelope and records
// their sizes, so that the transport need not measure them again. A
// server with another codec serves the peer service as well.
func ServerCodec() encoding.CodecV2 { return serverCodec{proto: encoding.GetCodecV2("proto")} }

// serverCodec is ServerCodec's codec.
type serverCodec struct{ proto encoding.CodecV2 }

// Marshal implements encoding.CodecV2.
func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*deliverFrame)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return f.decode(buf.ReadOnlyData())
}

// Name implements encoding.CodecV2: it replaces "proto".
func (serverCodec) Name() string { return "proto" }

// fieldEnvelopes is DeliverRequest.envelopes' field number.
const fieldEnvelopes = 1

// decode decodes the DeliverRequest b into f, as proto.Unmarshal would,
// except that a field it does not know (or of another wire type than
// envelopes') is dropped rather than kept as unknown: the request is
// never encoded again. Every envelope is decoded
// from its own bytes (proto.Unmarshal copies what it keeps), whose length
// is its size.
func (f *deliverFrame) decode(b []byte) error {
	n := 0
	for rest := b; len(rest) > 0; {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 {
			return fmt.Errorf("peer: malformed batch: %w", protowire.ParseError(l))
		}
		rest = rest[l:]
		if l = protowire.ConsumeFieldValue(num, typ, rest); l < 0 {
			return fmt.Errorf("peer: malformed batch: %w", protowire.ParseError(l))
		}
		if num == fieldEnvelopes && typ == protowire.BytesType {
			n++
		}
		rest = rest[l:]
	}
	f.req.Envelopes = make([]*peerv1.Envelope, 0, n)
	f.sizes = make([]int, 0, n)
	envs := make([]peerv1.Envelope, n) // one allocation for them all
	for rest := b; len(rest) > 0; {
		num, typ, l := protowire.ConsumeTag(rest)
		rest = rest[l:]
		if num != fieldEnvelopes || typ != protowire.BytesType {
			// proto.Unmarshal keeps it as an unknown field (a known field
			// of another wire type too).
			rest = rest[protowire.ConsumeFieldValue(num, typ, rest):]
			continue
		}
		v, l := protowire.ConsumeBytes(rest)
		rest = rest[l:]
		env := &envs[len(f.req.Envelopes)]
		if err := proto.Unmarshal(v, env); err != nil {
			return err
		}
		f.req.Envelopes = append(f.req.Envelopes, env)
		f.sizes = append(f.sizes, len(v))
	}
	return nil
}
