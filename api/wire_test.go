package api

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// wireRequests are requests of every field, valid and not, that
// decodeItems must take and decode as fromProto does.
func wireRequests() []*ringlimitv1.CheckRequest {
	return []*ringlimitv1.CheckRequest{
		{Items: []*ringlimitv1.CheckItem{item1("a", "k", 5, ringlimitv1.Mode_MODE_LOCAL)}},
		{Items: []*ringlimitv1.CheckItem{item1("a", "k", 5, ringlimitv1.Mode_MODE_OWNER), item1("b", "ü", 7, ringlimitv1.Mode_MODE_CACHED),
			{Name: "no hits", UniqueKey: "k", Limit: 3, Period: durationpb.New(time.Minute)}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a", UniqueKey: "k", Hits: proto.Int64(1 << 62), Limit: 1e18, Burst: 1e18,
			Period: durationpb.New(1), Algorithm: ringlimitv1.Algorithm_ALGORITHM_GCRA, Mode: ringlimitv1.Mode_MODE_CACHED}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a", UniqueKey: "k", Hits: proto.Int64(0), Limit: 3,
			Period: &durationpb.Duration{Seconds: 315_576_000_000}, Algorithm: ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, Lease: "h", Release: true}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a", UniqueKey: "k", Hits: proto.Int64(2), Limit: 10, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, WarmUp: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_LEASED,
			Policy: ringlimitv1.Policy_POLICY_FAIL_CLOSED, MaxBurstSeconds: 2.5, ColdFactor: 3}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a\x00b", Hits: proto.Int64(-1), Limit: -1, Period: &durationpb.Duration{Seconds: -1, Nanos: 5},
			Algorithm: 99, Mode: -1, Policy: 42, MaxWait: &durationpb.Duration{Nanos: -1}, MinGap: &durationpb.Duration{Seconds: 1, Nanos: -1}}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a", UniqueKey: "k", Limit: 1, Period: &durationpb.Duration{Seconds: math.MaxInt64},
			MinGap: &durationpb.Duration{Nanos: 1e9}, CountRejected: true, Rule: "r"}}},
		{Items: []*ringlimitv1.CheckItem{{Name: "a", UniqueKey: "k", Limit: 1, Period: &durationpb.Duration{Seconds: -315_576_000_000, Nanos: -999_999_999},
			MaxWait: &durationpb.Duration{}}}},
	}
}

// TestDecodeItemsAsFromProto: every marshalled request above is taken by
// decodeItems and decoded item for item as proto.Unmarshal and fromProto
// decode it.
func TestDecodeItemsAsFromProto(t *testing.T) {
	for i, req := range wireRequests() {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeItems(nil, b, 1000)
		if !ok {
			t.Fatalf("request %d: decodeItems did not take it", i)
		}
		if want := fromProtoAll(t, b); !sameItems(got, want) {
			t.Errorf("request %d: decodeItems\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// TestDecodeItemsLeaves: what decodeItems must leave to the general path.
func TestDecodeItemsLeaves(t *testing.T) {
	one, _ := proto.Marshal(&ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item1("a", "k", 5, 0)}})
	item := one[2:] // the item's bytes (one byte of tag, one of length)
	for _, c := range []struct {
		what string
		b    []byte
	}{
		{"no items", nil},
		{"more items than the maximum", append(append([]byte{}, one...), one...)},
		{"a name twice", append([]byte{0x0a, byte(len(item) + 3)}, append(append([]byte{}, item...), 0x0a, 0x01, 'b')...)},
		{"a name not UTF-8", []byte{0x0a, 0x03, 0x0a, 0x01, 0xff}},
		{"a truncated item", []byte{0x0a, 0x10, 0x0a, 0x03, 'a'}},
		{"limit as bytes", []byte{0x0a, 0x03, 0x22, 0x01, 'x'}},
		{"a group", []byte{0x0b, 0x0c}},
		{"seconds twice", []byte{0x0a, 0x06, 0x2a, 0x04, 0x08, 0x01, 0x08, 0x02}},
	} {
		if _, ok := decodeItems(nil, c.b, 1); ok {
			t.Errorf("%s: decodeItems took %x", c.what, c.b)
		}
	}
}

// fromProtoAll is the general path: proto.Unmarshal, then fromProto.
func fromProtoAll(t testing.TB, b []byte) []item {
	var req ringlimitv1.CheckRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatalf("decodeItems took %x, which proto.Unmarshal refuses: %v", b, err)
	}
	var out []item
	for _, pi := range req.Items {
		out = append(out, fromProto(pi))
	}
	return out
}

// sameItems is reflect.DeepEqual with a float compared by its bits, so a
// NaN both paths read from the same eight bytes is the same item (a NaN is
// refused later, by validation, not by decoding).
func sameItems(a, b []item) bool {
	if len(a) != len(b) {
		return false
	}
	bits := math.Float64bits
	for i := range a {
		x, y := a[i], b[i]
		if bits(x.coldFactor) != bits(y.coldFactor) || bits(x.maxBurstSeconds) != bits(y.maxBurstSeconds) {
			return false
		}
		x.coldFactor, x.maxBurstSeconds, y.coldFactor, y.maxBurstSeconds = 0, 0, 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// FuzzDecodeItems holds decodeItems to the general path: whatever bytes it
// takes, proto.Unmarshal takes too, and fromProto gives the same items.
func FuzzDecodeItems(f *testing.F) {
	for _, req := range wireRequests() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff})
	f.Add([]byte{0x0a, 0x06, 0x2a, 0x04, 0x08, 0x01, 0x10, 0x02})
	f.Add([]byte{0x0a, 0x05, 0x98, 0x01, 0x01, 0x18, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeItems(nil, b, 1000)
		if !ok {
			return
		}
		if want := fromProtoAll(t, b); !sameItems(got, want) {
			t.Fatalf("decodeItems(%x)\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// TestAppendResponse: the wire form appendResponse writes decodes to the
// CheckResponse toProto's results make, for answers of every field and
// for random ones.
func TestAppendResponse(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123_456_789)
	dec := func(d bucket.Decision, r check.Response) check.Response { r.Decision = d; return r }
	rs := []check.Response{
		dec(bucket.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAt: t0}, check.Response{Owner: "n1", Mode: check.ModeOwner}),
		dec(bucket.Decision{Limit: 10, ResetAt: t0, RetryAfter: 1500 * time.Millisecond}, check.Response{Owner: "n2", Mode: check.ModeCached, Degraded: true}),
		dec(bucket.Decision{Allowed: true, Limit: 1, Wait: time.Nanosecond}, check.Response{Mode: check.ModeLeased, Reconfigured: true}),
		dec(bucket.Decision{Allowed: true, ResetAt: time.Unix(0, 0)}, check.Response{}),
		dec(bucket.Decision{Allowed: true, Limit: -5, Remaining: -7, ResetAt: time.Unix(-3, 5), RetryAfter: 2 * time.Second}, check.Response{}),
		{Err: &FieldError{Field: "limit", Reason: "must be positive"}, Owner: "n3", Mode: check.ModeLocal},
		dec(bucket.Decision{Allowed: true, Limit: 3}, check.Response{Err: errors.New("ringlimit: something else")}),
		{},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var d bucket.Decision
		d.Allowed, d.Limit, d.Remaining = rng.IntN(2) == 0, rng.Int64()>>rng.IntN(64), rng.Int64N(1000)-10
		if rng.IntN(4) > 0 {
			d.ResetAt = time.Unix(rng.Int64N(1<<34)-1<<33, rng.Int64N(1e9))
		}
		if rng.IntN(2) == 0 {
			d.RetryAfter = time.Duration(rng.Int64() >> rng.IntN(64))
		}
		if rng.IntN(3) == 0 {
			d.Wait = time.Duration(rng.Int64N(1e12))
		}
		rs = append(rs, dec(d, check.Response{Owner: []string{"", "n1", "node-ü"}[rng.IntN(3)], Mode: check.Mode(rng.IntN(5)),
			Degraded: rng.IntN(3) == 0, Reconfigured: rng.IntN(5) == 0}))
	}
	for _, node := range []string{"n1", ""} {
		for i := range rs {
			for _, out := range [][]check.Response{rs[i : i+1], rs[:i+1]} {
				var got ringlimitv1.CheckResponse
				if err := proto.Unmarshal(appendResponse(nil, node, out), &got); err != nil {
					t.Fatalf("answers %d: the wire form does not decode: %v", i, err)
				}
				want := &ringlimitv1.CheckResponse{Node: node}
				for j := range out {
					want.Items = append(want.Items, toProto(&out[j]))
				}
				if !proto.Equal(&got, want) {
					t.Fatalf("answers %d, node %q:\n got %v\nwant %v", i, node, &got, want)
				}
			}
		}
	}
	// A Duration or Timestamp of zero seconds and nanos is present, empty.
	b := appendResult(nil, &rs[3])
	if num, typ, n := protowire.ConsumeTag(b[2:]); num != fieldResultResetTime || typ != protowire.BytesType || b[2+n] != 0 {
		t.Errorf("reset time at the epoch: %x, want field 5 empty", b)
	}
}

// BenchmarkCheckWire compares the two ways of a 100-check call through the
// API's decoding and encoding (the Backend answers at once).
func BenchmarkCheckWire(b *testing.B) {
	req := &ringlimitv1.CheckRequest{}
	for i := range 100 {
		req.Items = append(req.Items, item1("bench", "key-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1000, ringlimitv1.Mode_MODE_OWNER))
	}
	raw, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]check.Response, 100)
	for i := range out {
		out[i] = check.Response{Decision: bucket.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAt: time.Unix(1_700_000_000, 5)},
			Owner: "n2", Mode: check.ModeOwner}
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in ringlimitv1.CheckRequest
			if err := decodeRequest(raw, &in); err != nil {
				b.Fatal(err)
			}
			items := make([]item, len(in.Items))
			for i, pi := range in.Items {
				items[i] = fromProto(pi)
			}
			resp := &ringlimitv1.CheckResponse{Items: make([]*ringlimitv1.CheckResult, len(out)), Node: "n1"}
			for i := range out {
				resp.Items[i] = toProto(&out[i])
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			items, ok := decodeItems(nil, raw, 1000)
			if !ok || len(items) != 100 {
				b.Fatal("not taken")
			}
			_ = appendResponse(make([]byte, 0, 48*len(out)+10), "n1", out)
		}
	})
}

// intoBackend answers every request allowed, and records which method the
// Server called.
type intoBackend struct{ into, plain int }

func (b *intoBackend) Check(_ context.Context, reqs []check.Request) ([]check.Response, error) {
	b.plain++
	out := make([]check.Response, len(reqs))
	for i := range out {
		out[i].Allowed, out[i].Owner = true, reqs[i].Key
	}
	return out, nil
}

func (b *intoBackend) CheckInto(_ context.Context, reqs []check.Request, out []check.Response) error {
	b.into++
	for i := range out {
		out[i].Allowed, out[i].Owner = true, reqs[i].Key
	}
	return nil
}

// TestBackendInto: a call whose items are all valid is answered by
// CheckInto, straight into the answers; one with an invalid item by Check,
// each answer in its item's place.
func TestBackendInto(t *testing.T) {
	b := &intoBackend{}
	s, err := New(Config{Node: "n", MaxKeyLen: 100, MaxBatchItems: 10, MaxBodyBytes: 1 << 10}, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := item1("a", "k1", 5, ringlimitv1.Mode_MODE_LOCAL)
	bad := item1("a", "k2", -1, ringlimitv1.Mode_MODE_LOCAL)
	for _, c := range []struct {
		items       []*ringlimitv1.CheckItem
		into, plain int
	}{
		{[]*ringlimitv1.CheckItem{good, good}, 1, 0},
		{[]*ringlimitv1.CheckItem{bad, good}, 1, 1},
	} {
		resp, err := s.Check(t.Context(), &ringlimitv1.CheckRequest{Items: c.items})
		if err != nil {
			t.Fatal(err)
		}
		if b.into != c.into || b.plain != c.plain {
			t.Errorf("after %d items: CheckInto %d, Check %d times; want %d, %d", len(c.items), b.into, b.plain, c.into, c.plain)
		}
		for i, r := range resp.Items {
			if c.items[i] == bad {
				if r.Status != ringlimitv1.Status_STATUS_ERROR {
					t.Errorf("invalid item %d answered %v", i, r.Status)
				}
			} else if r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || r.Owner != Key("a", c.items[i].UniqueKey) {
				t.Errorf("item %d answered %v, owner %q", i, r.Status, r.Owner)
			}
		}
	}
}

// TestCallSlicesReused: calls through the gRPC handler one after another,
// of more items, fewer, and with an invalid item, reuse one call's slices
// (Server.calls) and each gets only its own answers; a call's slices are
// put back with no key or answer left in them.
func TestCallSlicesReused(t *testing.T) {
	s, err := New(Config{Node: "n", MaxKeyLen: 100, MaxBatchItems: 10, MaxBodyBytes: 1 << 10}, &intoBackend{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	handler := rateLimiterDesc.Methods[0].Handler
	good := func(k string) *ringlimitv1.CheckItem { return item1("a", k, 5, ringlimitv1.Mode_MODE_LOCAL) }
	bad := item1("a", "bad", -1, ringlimitv1.Mode_MODE_LOCAL)
	for n, items := range [][]*ringlimitv1.CheckItem{
		{good("k1"), good("k2"), good("k3")},
		{bad, good("k4")},
		{good("k5")},
		{good("k6"), bad},
	} {
		raw, err := proto.Marshal(&ringlimitv1.CheckRequest{Items: items})
		if err != nil {
			t.Fatal(err)
		}
		out, err := handler(grpcAPI{s: s}, t.Context(), func(v any) error {
			v.(*rawFrame).b = raw
			return nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var resp ringlimitv1.CheckResponse
		if err := proto.Unmarshal(out.(*rawFrame).b, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Items) != len(items) {
			t.Fatalf("call %d: %d answers for %d items", n, len(resp.Items), len(items))
		}
		for i, r := range resp.Items {
			switch {
			case items[i] == bad && (r.Status != ringlimitv1.Status_STATUS_ERROR || r.Owner != ""):
				t.Errorf("call %d, invalid item %d: %v, owner %q", n, i, r.Status, r.Owner)
			case items[i] != bad && (r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || r.Error != "" || r.Owner != Key("a", items[i].UniqueKey)):
				t.Errorf("call %d, item %d: %v %q, owner %q", n, i, r.Status, r.Error, r.Owner)
			}
		}
	}
	c := &callSlices{}
	c.items = append(c.items, item{name: "a", uniqueKey: "k", err: errDecidedByRule})
	c.answers(2)[1] = check.Response{Owner: "n2", Err: errDecidedByRule}
	c.reqs = append(c.reqs, check.Request{Key: "a\x00k"})
	c.idx = append(c.idx, 0)
	s.putCall(c)
	if len(c.items)+len(c.out)+len(c.reqs)+len(c.idx) != 0 {
		t.Fatalf("put back with %d items, %d answers, %d requests, %d indexes", len(c.items), len(c.out), len(c.reqs), len(c.idx))
	}
	if c.items[:1][0] != (item{}) || c.out[:2][1].Owner != "" || c.out[:2][1].Err != nil || c.reqs[:1][0].Key != "" {
		t.Fatal("put back holding a key or an answer")
	}
}

// BenchmarkCheckCall measures the API's whole share of a 100-check gRPC
// call: decoding the request (decodeItems), validating its items and
// building their requests, the Backend (CheckInto, answering at once), the
// Observer and encoding the answer (checkWire). The node adds its core and
// gRPC to it (BenchmarkNodePath in the module root).
func BenchmarkCheckCall(b *testing.B) {
	req := &ringlimitv1.CheckRequest{}
	for i := range 100 {
		req.Items = append(req.Items, item1("bench", "k"+strconv.Itoa(i), 1000, ringlimitv1.Mode_MODE_OWNER))
	}
	raw, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Node: "n1", MaxKeyLen: 1024, MaxBatchItems: 1000, MaxBodyBytes: 1 << 20}, &intoBackend{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c := s.getCall()
		items, ok := decodeItems(c.items[:0], raw, s.cfg.MaxBatchItems)
		if !ok {
			b.Fatal("not taken")
		}
		c.items = items
		if _, err := s.checkWire(b.Context(), c, false, time.Time{}); err != nil {
			b.Fatal(err)
		}
		s.putCall(c)
	}
}

// TestRequestKeyAllocatedOnce: an item's request allocates its key once,
// whatever its algorithm or rule; the token bucket's key was built twice
// (Key, then bucketKey), an allocation per item of every call more.
func TestRequestKeyAllocatedOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		it   item
		want string
	}{
		{"token bucket", item{name: "a", uniqueKey: "k", hits: 1, limit: 5, period: time.Second}, "a\x00k"},
		{"fixed window", item{name: "a", uniqueKey: "k", hits: 1, limit: 5, period: time.Second, algorithm: int64(bucket.FixedWindow)},
			"\x00" + string(rune(bucket.FixedWindow)) + "a\x00k"},
		{"rule's bucket", item{name: "r", uniqueKey: "k", hits: 1, limit: 5, period: time.Second, algorithm: int64(bucket.FixedWindow), ruleBucket: true}, "r\x00k"},
	} {
		var r check.Request
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if r, err = c.it.request(100); err != nil {
				t.Fatal(err)
			}
		})
		if r.Key != c.want || allocs != 1 {
			t.Errorf("%s: key %q in %v allocations; want %q in 1", c.name, r.Key, allocs, c.want)
		}
	}
}
