package peer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// fuzzMembers are the members the fuzzed node "a" knows; "eve" is not one.
var fuzzMembers = []string{"a", "b", "c"}

// fuzzSeeds are DeliverRequests of every message kind, from members and
// from a stranger, with sound and unsound contents.
func fuzzSeeds(t testing.TB) []*peerv1.DeliverRequest {
	lim := &peerv1.Limit{Algorithm: uint32(bucket.TokenBucket), Limit: 10, PeriodNs: int64(time.Second)}
	b, err := bucket.New(bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: time.Second}, t0)
	if err != nil {
		t.Fatal(err)
	}
	state, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	ks := func(key string, st []byte) *peerv1.KeyState {
		return &peerv1.KeyState{Key: key, State: st, Demand: 3, Share: 0.5, LeaseGranted: 2}
	}
	e := func(from string, body func(*peerv1.Envelope)) *peerv1.Envelope {
		env := &peerv1.Envelope{From: from, To: "a", Incarnation: 7}
		body(env)
		return env
	}
	flush := func(env *peerv1.Envelope) {
		env.Body = &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1, Items: []*peerv1.FlushItem{
			{Key: "api\x00k1", Limit: lim, Hits: 3, Demand: 4, Rate: 1.5, LeaseWant: 2},
			{Key: "api\x00k2", Limit: &peerv1.Limit{Algorithm: 200, Limit: -1, PeriodNs: -5}, Hits: -7, View: []byte{1, 2, 3}},
			{Key: "api\x00k3", Limit: lim, Hits: 1 << 62, View: state, LeaseReturn: 1 << 62},
		}}}
	}
	return []*peerv1.DeliverRequest{
		{Envelopes: []*peerv1.Envelope{e("b", flush)}},
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_FlushAck{FlushAck: &peerv1.FlushAck{Seq: 1, FlushIncarnation: 1,
				Items: []*peerv1.KeyState{ks("api\x00k1", state), ks("api\x00k2", []byte{0xff})}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("c", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_Push{Push: &peerv1.Push{AppliedSeq: 1, AppliedIncarnation: 1,
				Items: []*peerv1.KeyState{ks("api\x00k1", state), ks("", nil)}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Id: 9, Items: []*peerv1.ForwardItem{
				{Key: "api\x00k1", Limit: lim, Hits: 1},
				{Key: "api\x00k4", Limit: &peerv1.Limit{Algorithm: uint32(bucket.Concurrency), Limit: 2, PeriodNs: 1}, Hits: 1, Lease: "h", Release: true},
				{Key: "api\x00k5"},
			}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_ForwardReply{ForwardReply: &peerv1.ForwardReply{Id: 1, ForwardIncarnation: 1,
				Items: []*peerv1.Decision{{Allowed: true, Limit: 10, Remaining: 9}, {Error: peerv1.ErrorCode(99)}}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("c", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 1, Items: []*peerv1.KeyState{ks("api\x00k6", state), ks("api\x00k7", []byte("junk"))}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("c", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_HandoffAck{HandoffAck: &peerv1.HandoffAck{Seq: 1, HandoffIncarnation: 1}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("eve", flush), e("a", flush), {From: "b", To: "z"}, nil, {From: "b", To: "a"}}},
		// The fields of the lease grants one by one and of the join hold
		// (sync/leasecap.go, sync/fence.go), sound and hostile: settled
		// ids of grants never made, negative or far ahead; ids longer or
		// shorter than the items; handed grants of no key, to no one, to
		// a itself, held < 0 or beyond any capacity, repeated; questions
		// about members no one knows, answers naming members never asked.
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 2, Items: []*peerv1.FlushItem{
				{Key: "api\x00k1", Limit: lim, Hits: 1, Rate: 1, LeaseWant: 3, LeaseReturn: 2, LeaseSpent: 1, LeaseSettled: t0.Add(time.Second).UnixNano()},
				{Key: "api\x00k2", Limit: lim, LeaseSettled: -1},
				{Key: "api\x00k3", Limit: lim, LeaseSettled: 1<<63 - 1, LeaseReturn: 5},
			}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_FlushAck{FlushAck: &peerv1.FlushAck{Seq: 1, FlushIncarnation: 1,
				Items: []*peerv1.KeyState{ks("api\x00k1", state)}, LeaseGrantIds: []int64{t0.UnixNano(), -1, 1<<63 - 1}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("c", func(env *peerv1.Envelope) {
			id := t0.Add(500 * time.Millisecond).UnixNano()
			env.Body = &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 2, Items: []*peerv1.KeyState{ks("api\x00k6", state)}, Grants: []*peerv1.LeaseGrant{
				{Key: "api\x00k6", To: "b", Id: id, Held: 3},
				{Key: "api\x00k6", To: "b", Id: id, Held: 3},
				{Key: "api\x00k6", To: "a", Id: id + 1, Held: 1<<63 - 1},
				{Key: "api\x00k6", To: "eve", Id: id + 2, Held: -5},
				{Key: "", To: "b", Id: -id, Held: 1},
				{Key: "api\x00k7", Id: 1<<63 - 1, Held: 2},
				nil,
			}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("b", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_Backup{Backup: &peerv1.Backup{Seq: 1, Items: []*peerv1.KeyState{ks("api\x00k1", state)},
				AskMembers: []string{"c", "c", "eve", "", "a"}}}
		})}},
		{Envelopes: []*peerv1.Envelope{e("c", func(env *peerv1.Envelope) {
			env.Body = &peerv1.Envelope_BackupAck{BackupAck: &peerv1.BackupAck{Seq: 1, BackupIncarnation: 1, KnownMembers: []string{"b", "eve", "zed"}}}
		})}},
	}
}

// FuzzPeerDeliver feeds arbitrary bytes, as a DeliverRequest, to the peer
// server of node "a", whose Handler is a real rlsync.Node that knows the
// members a, b and c. Nothing may panic; a request that decodes is either
// refused whole (too many envelopes) or each envelope is accepted or
// rejected and counted, and an envelope from a stranger, from a itself or
// to another node is never accepted.
func FuzzPeerDeliver(f *testing.F) {
	for _, req := range fuzzSeeds(f) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x80, 0x01}) // a truncated envelope

	cfg := DefaultTransportConfig()
	cfg.Self = "a"
	cfg.Clock = fixedClock{t0}
	cfg.MaxRecvEnvelopes = 64
	tr, err := NewTransport(cfg)
	if err != nil {
		f.Fatal(err)
	}
	scfg := rlsync.DefaultConfig()
	scfg.Self = "a"
	scfg.Incarnation = 1
	scfg.MaxKeys = 10000
	core, err := rlsync.NewNode(scfg, tr)
	if err != nil {
		f.Fatal(err)
	}
	var ms []Member
	for _, name := range fuzzMembers {
		ms = append(ms, Member{Name: name}) // no address: nothing is dialled
	}
	tr.SetPeers(ms)
	core.SetMembers(t0, fuzzMembers)
	ctx, cancel := context.WithCancel(context.Background())
	if err := tr.Start(ctx, core); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cancel(); _ = tr.Close() })
	srv := &server{t: tr}
	now := t0

	f.Fuzz(func(t *testing.T, b []byte) {
		req := &peerv1.DeliverRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		received := counterValue(t, tr.metrics.received)
		strangers := counterValue(t, tr.metrics.rejected.WithLabelValues(rejectUnknownSender))
		misrouted := counterValue(t, tr.metrics.rejected.WithLabelValues(rejectWrongRecipient))
		_, err := srv.Deliver(context.Background(), req)
		if len(req.Envelopes) > cfg.MaxRecvEnvelopes {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%d envelopes: %v, want InvalidArgument", len(req.Envelopes), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		var wantStrangers, wantMisrouted, maxAccepted float64
		for _, env := range req.Envelopes {
			switch {
			case env.GetTo() != "a":
				wantMisrouted++
			case env.GetFrom() == "b" || env.GetFrom() == "c":
				maxAccepted++
			default:
				wantStrangers++
			}
		}
		if got := counterValue(t, tr.metrics.rejected.WithLabelValues(rejectUnknownSender)) - strangers; got != wantStrangers {
			t.Errorf("rejected %v envelopes from strangers, want %v", got, wantStrangers)
		}
		if got := counterValue(t, tr.metrics.rejected.WithLabelValues(rejectWrongRecipient)) - misrouted; got != wantMisrouted {
			t.Errorf("rejected %v misrouted envelopes, want %v", got, wantMisrouted)
		}
		if got := counterValue(t, tr.metrics.received) - received; got > maxAccepted {
			t.Errorf("accepted %v envelopes, at most %v are from members to a", got, maxAccepted)
		}
		// Drive the core's timers too: replies, retries and sweeps run on
		// Tick.
		now = now.Add(50 * time.Millisecond)
		core.Tick(now)
	})
}
