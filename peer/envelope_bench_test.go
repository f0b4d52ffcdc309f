package peer

import (
	"strconv"
	"testing"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers "proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// BenchmarkForwardEnvelopes measures what protobuf costs a forwarded
// check on the peer links, as a 100-check call's forward to one owner
// makes them (50 checks of one limit in a Forward, their 50 decisions in
// the ForwardReply): each envelope sized by Transport.Send, marshalled by
// gRPC's codec (a size pass and the marshal), unmarshalled by the
// receiver's codec and sized by Transport.receive. One op is the Forward
// and its reply, both ways; divide by 50 for a check.
func BenchmarkForwardEnvelopes(b *testing.B) {
	const items = 50
	lim := &peerv1.Limit{Algorithm: 1, Limit: 1000, PeriodNs: 1e9}
	fwd := &peerv1.Forward{Id: 7}
	rep := &peerv1.ForwardReply{Id: 7, ForwardIncarnation: 1_700_000_000_000_000_000}
	for i := range items {
		fwd.Items = append(fwd.Items, &peerv1.ForwardItem{Key: "bench\x00k" + strconv.Itoa(1000+i), Limit: lim, Hits: 1, Fenced: true})
		rep.Items = append(rep.Items, &peerv1.Decision{Allowed: true, Limit: 1000, Remaining: 998, ResetAtNs: 1_764_000_000_123_456_789})
	}
	envs := []*peerv1.Envelope{
		{From: "n1", To: "n2", Incarnation: 1_700_000_000_000_000_000, ClockNs: 1_764_000_000_123_456_789, Body: &peerv1.Envelope_Forward{Forward: fwd}},
		{From: "n2", To: "n1", Incarnation: 1_700_000_000_000_000_001, ClockNs: 1_764_000_000_123_456_789, Body: &peerv1.Envelope_ForwardReply{ForwardReply: rep}},
	}
	codec := encoding.GetCodecV2("proto")
	b.ReportAllocs()
	for b.Loop() {
		for _, env := range envs {
			_ = proto.Size(env) // Transport.Send
			data, err := codec.Marshal(&peerv1.DeliverRequest{Envelopes: []*peerv1.Envelope{env}})
			if err != nil {
				b.Fatal(err)
			}
			var got peerv1.DeliverRequest
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data.Materialize())}, &got); err != nil {
				b.Fatal(err)
			}
			data.Free()
			_ = proto.Size(got.Envelopes[0]) // Transport.receive
		}
	}
}
