package peer

import (
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// codecBatch is a batch of envelopes of several kinds, one body shared by
// two envelopes (as the core shares the message of a flush it resends).
func codecBatch() *peerv1.DeliverRequest {
	push := &peerv1.Push{AppliedSeq: 7, Items: []*peerv1.KeyState{{Key: "a\x00b", State: []byte{1, 2, 3}, Demand: 1.5}}}
	return &peerv1.DeliverRequest{Envelopes: []*peerv1.Envelope{
		{From: "n1", To: "n2", Incarnation: 3, ClockNs: 12345, Body: &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Id: 9, Items: []*peerv1.ForwardItem{
			{Key: "k1", Limit: &peerv1.Limit{Limit: 1000, PeriodNs: 1e9}, Hits: 1, Fenced: true},
			{Key: "k2", Hits: 2, Lease: "l"},
		}}}},
		{From: "n1", To: "n2", Body: &peerv1.Envelope_Push{Push: push}},
		{From: "n1", To: "n2", Incarnation: 4, Body: &peerv1.Envelope_Push{Push: push}},
		{},
		{From: "n1", To: "n2", Body: &peerv1.Envelope_ForwardReply{ForwardReply: &peerv1.ForwardReply{Id: 9, Items: []*peerv1.Decision{{Allowed: true, Limit: 5, Remaining: 4}}}}},
	}}
}

// TestServerCodecDecodesAsProto: the peer server's codec decodes a batch
// as proto.Unmarshal does (unknown fields aside, which it drops), and
// gives each envelope its encoded size, as proto.Size measures it.
func TestServerCodecDecodesAsProto(t *testing.T) {
	b, err := proto.Marshal(codecBatch())
	if err != nil {
		t.Fatal(err)
	}
	// An unknown field, and the envelopes' field with another wire type:
	// proto.Unmarshal keeps both as unknown fields.
	withUnknown := protowire.AppendTag(append([]byte(nil), b...), 99, protowire.VarintType)
	withUnknown = protowire.AppendVarint(withUnknown, 5)
	withUnknown = protowire.AppendTag(withUnknown, fieldEnvelopes, protowire.VarintType)
	withUnknown = protowire.AppendVarint(withUnknown, 1)
	for name, in := range map[string][]byte{"plain": b, "unknown fields": withUnknown, "empty": nil} {
		var want peerv1.DeliverRequest
		if err := proto.Unmarshal(in, &want); err != nil {
			t.Fatal(err)
		}
		want.ProtoReflect().SetUnknown(nil)
		var f deliverFrame
		// Split in two buffers, as gRPC may hand it over.
		half := len(in) / 2
		if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(in[:half]), mem.SliceBuffer(in[half:])}, &f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !proto.Equal(&f.req, &want) {
			t.Fatalf("%s: decoded\n%v\nwant\n%v", name, &f.req, &want)
		}
		if len(f.sizes) != len(want.Envelopes) {
			t.Fatalf("%s: %d sizes for %d envelopes", name, len(f.sizes), len(want.Envelopes))
		}
		for i, env := range want.Envelopes {
			if f.sizes[i] != proto.Size(env) {
				t.Fatalf("%s: envelope %d: size %d, proto.Size %d", name, i, f.sizes[i], proto.Size(env))
			}
		}
	}
	// Malformed input fails, as with proto.Unmarshal.
	bad := protowire.AppendTag(nil, fieldEnvelopes, protowire.BytesType)
	bad = protowire.AppendVarint(bad, 10) // 10 bytes announced, none follow
	var f deliverFrame
	if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, &f); err == nil {
		t.Fatal("a truncated batch decoded")
	}
	inner := protowire.AppendTag(nil, fieldEnvelopes, protowire.BytesType)
	inner = protowire.AppendBytes(inner, []byte{0xff}) // not an envelope
	if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(inner)}, &f); err == nil {
		t.Fatal("a malformed envelope decoded")
	}
}

// TestDeliverFrameWithProtoCodec: with gRPC's own codec (a server not
// given ServerCodec), a deliverFrame decodes as the DeliverRequest it
// holds, with no sizes (receive measures them).
func TestDeliverFrameWithProtoCodec(t *testing.T) {
	want := codecBatch()
	data, err := encoding.GetCodecV2("proto").Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var f deliverFrame
	if err := encoding.GetCodecV2("proto").Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&f.req, want) || f.sizes != nil {
		t.Fatalf("decoded %v (sizes %v), want %v", &f.req, f.sizes, want)
	}
}

// TestLinkCodecUsesSendSizes: the peer connections' codec encodes a batch
// whose envelopes Send measured exactly as proto.Marshal does.
func TestLinkCodecUsesSendSizes(t *testing.T) {
	req := codecBatch()
	for _, env := range req.Envelopes {
		proto.Size(env) // as Send does
	}
	want, err := proto.Marshal(codecBatch())
	if err != nil {
		t.Fatal(err)
	}
	data, err := linkCodec{proto: encoding.GetCodecV2("proto")}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := data.Materialize(); string(got) != string(want) {
		t.Fatalf("encoded %x\nwant %x", got, want)
	}
	// Another message goes through gRPC's codec.
	if _, err := (linkCodec{proto: encoding.GetCodecV2("proto")}).Marshal(&peerv1.DeliverResponse{}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLinkCodecs measures one batch of 4 envelopes of 33 forwarded
// checks each (a 100-check call's forwards) from Send to receive: the
// sender's measure, the encoding, the decoding and the receiver's
// measure, with gRPC's codec on both sides (proto) and with the peer
// codecs (peer). Run it with
//
//	go test -run '^$' -bench BenchmarkLinkCodecs -count 4 ./peer
func BenchmarkLinkCodecs(b *testing.B) {
	batch := func() *peerv1.DeliverRequest {
		req := &peerv1.DeliverRequest{}
		for range 4 {
			fw := &peerv1.Forward{Id: 1}
			for i := range 33 {
				fw.Items = append(fw.Items, &peerv1.ForwardItem{Key: "bench\x00key-" + string(rune('a'+i%26)), Limit: &peerv1.Limit{Limit: 1 << 40, PeriodNs: 1e9}, Hits: 1, Fenced: true})
			}
			req.Envelopes = append(req.Envelopes, &peerv1.Envelope{From: "n1", To: "n2", Incarnation: 7, ClockNs: 1 << 50, Body: &peerv1.Envelope_Forward{Forward: fw}})
		}
		return req
	}
	protoCodec := encoding.GetCodecV2("proto")
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		req := batch()
		for b.Loop() {
			for _, env := range req.Envelopes {
				proto.Size(env)
			}
			data, err := protoCodec.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			var got peerv1.DeliverRequest
			if err := protoCodec.Unmarshal(data, &got); err != nil {
				b.Fatal(err)
			}
			for _, env := range got.Envelopes {
				proto.Size(env)
			}
		}
	})
	b.Run("peer", func(b *testing.B) {
		b.ReportAllocs()
		link, server := linkCodec{proto: protoCodec}, ServerCodec()
		req := batch()
		for b.Loop() {
			for _, env := range req.Envelopes {
				proto.Size(env)
			}
			data, err := link.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			var f deliverFrame
			if err := server.Unmarshal(data, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
