package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/checkertest"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// fuzzServer returns a Server over an in-memory Backend (real buckets, one
// per key, on a fixed clock: the core's coordination is not what these
// targets fuzz, the decoding and validation in front of it are).
func fuzzServer(f *testing.F) *Server {
	clock := checkertest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := New(Config{Node: "fuzz", MaxKeyLen: 1024, MaxBatchItems: 1000, MaxBodyBytes: 1 << 20},
		checkertest.NewChecker(clock), nil)
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// goodJSON is one valid item of POST /v1/check.
const goodJSON = `{"name":"api","unique_key":"good","hits":1,"limit":100,"period":"1h","mode":"local"}`

// item1 is a valid item of limit (10 if 0) per hour in mode.
func item1(name, key string, limit int64, mode ringlimitv1.Mode) *ringlimitv1.CheckItem {
	if limit == 0 {
		limit = 10
	}
	return &ringlimitv1.CheckItem{Name: name, UniqueKey: key, Hits: proto.Int64(1), Limit: limit,
		Period: durationpb.New(time.Hour), Mode: mode}
}

// checkItemError fails t unless msg is an item error of the API's form,
// "field: reason".
func checkItemError(t *testing.T, msg string) {
	t.Helper()
	field, reason, ok := strings.Cut(msg, ": ")
	if !ok || field == "" || reason == "" {
		t.Fatalf("item error %q is not \"field: reason\"", msg)
	}
}

// FuzzHTTPCheck posts arbitrary bytes as the JSON body of POST /v1/check
// through the Server's handler: it answers 200 with one well-formed result
// per item, or 400 or 413 with a message; never anything else, never a
// panic.
func FuzzHTTPCheck(f *testing.F) {
	for _, s := range []string{
		`{"items":[` + goodJSON + `]}`,
		`{"items":[{"name":"a","unique_key":"k","hits":3,"limit":5,"period":"1s","algorithm":"sliding_log","min_gap":"10ms","count_rejected":true}]}`,
		`{"items":[{"name":"a","unique_key":"k","hits":1,"limit":2,"period":"1m","algorithm":"concurrency","lease":"h1"},{"name":"a","unique_key":"k","algorithm":"concurrency","limit":2,"period":"1m","lease":"h1","release":true}]}`,
		`{"items":[{"name":"a","unique_key":"k","hits":1,"limit":10,"period":"1s","algorithm":"smooth_warming_up","warm_up":"5s","mode":"leased","policy":"fail-closed"}]}`,
		`{"items":[{"name":"a","unique_key":"k","hits":9223372036854775807,"limit":1000000000000000000,"period":"1ns","burst":1000000000000000000,"mode":"cached"}]}`,
		`{"items":[{"name":"a","unique_key":"k","hits":1,"limit":5,"period":"2562047h47m16.854775807s","algorithm":"leaky_queue","max_wait":"1h","mode":"owner"}]}`,
		`{"items":[{"name":"a\u0000","unique_key":"","hits":-1,"limit":0,"period":"-1s","algorithm":"bogus"}]}`,
		`{"items":[]}`, `null`, `[]`, `{"items":[{"name":"a","colour":1}]}`, `{"items":[` + "\xff" + `]}`, `{"items":[[[[`,
	} {
		f.Add([]byte(s))
	}
	h := fuzzServer(f).HTTP()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var e JSONError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("HTTP %d with body %q: want a JSON error message", rec.Code, rec.Body.Bytes())
			}
			return
		default:
			t.Fatalf("HTTP %d %q", rec.Code, rec.Body.Bytes())
		}
		var in JSONCheckRequest
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("HTTP 200 for a body that does not decode: %v", err)
		}
		var resp JSONCheckResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("answer %q: %v", rec.Body.Bytes(), err)
		}
		if len(resp.Items) != len(in.Items) {
			t.Fatalf("%d answers to %d items", len(resp.Items), len(in.Items))
		}
		for i, r := range resp.Items {
			switch r.Status {
			case check.StatusError.String():
				checkItemError(t, r.Error)
			case check.StatusUnderLimit.String(), check.StatusOverLimit.String():
				if r.Error != "" {
					t.Fatalf("item %d: %s with an error %q", i, r.Status, r.Error)
				}
			default:
				t.Fatalf("item %d: status %q", i, r.Status)
			}
		}
	})
}

// FuzzGRPCCheck decodes arbitrary bytes as a CheckRequest, as the gRPC
// server does, and decides it: a request that does not decode is an
// InvalidArgument; one that does gets one answer per item, and each item
// that validation refuses is answered with that error, "field: reason".
// Nothing panics.
func FuzzGRPCCheck(f *testing.F) {
	lim := func(it *ringlimitv1.CheckItem) *ringlimitv1.CheckItem { return it }
	for _, req := range []*ringlimitv1.CheckRequest{
		{Items: []*ringlimitv1.CheckItem{item1("a", "k", 5, ringlimitv1.Mode_MODE_LOCAL)}},
		{Items: []*ringlimitv1.CheckItem{lim(&ringlimitv1.CheckItem{Name: "a", UniqueKey: "k", Hits: proto.Int64(1 << 62), Limit: 1e18, Burst: 1e18,
			Period: durationpb.New(1), Algorithm: ringlimitv1.Algorithm_ALGORITHM_GCRA, Mode: ringlimitv1.Mode_MODE_CACHED})}},
		{Items: []*ringlimitv1.CheckItem{lim(&ringlimitv1.CheckItem{Name: "a", UniqueKey: "k", Hits: proto.Int64(1), Limit: 3,
			Period: &durationpb.Duration{Seconds: 315_576_000_000}, Algorithm: ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, Lease: "h", Release: true})}},
		{Items: []*ringlimitv1.CheckItem{lim(&ringlimitv1.CheckItem{Name: "a", UniqueKey: "k", Hits: proto.Int64(2), Limit: 10, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, WarmUp: durationpb.New(time.Minute), Mode: ringlimitv1.Mode_MODE_LEASED,
			Policy: ringlimitv1.Policy_POLICY_FAIL_CLOSED})}},
		{Items: []*ringlimitv1.CheckItem{lim(&ringlimitv1.CheckItem{Name: "a\x00b", Hits: proto.Int64(-1), Limit: -1, Period: &durationpb.Duration{Seconds: -1, Nanos: 5},
			Algorithm: 99, Mode: -1, Policy: 42, MaxWait: &durationpb.Duration{Nanos: -1}})}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x10, 0x0a, 0x03, 'a'})
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff})
	n := fuzzServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &ringlimitv1.CheckRequest{}
		if err := decodeRequest(b, req); err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("decoding: %v, want InvalidArgument", err)
			}
			return
		}
		resp, err := n.Check(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "items: ") {
				t.Fatalf("Check: %v, want InvalidArgument about items", err)
			}
			return
		}
		if len(resp.Items) != len(req.Items) {
			t.Fatalf("%d answers to %d items", len(resp.Items), len(req.Items))
		}
		for i, r := range resp.Items {
			it := fromProto(req.Items[i])
			_, verr := it.request(n.cfg.MaxKeyLen)
			switch {
			case verr != nil && (r.Status != ringlimitv1.Status_STATUS_ERROR || r.Error != errorMessage(verr)):
				t.Fatalf("item %d: invalid (%v) but answered %v %q", i, verr, r.Status, r.Error)
			case r.Status == ringlimitv1.Status_STATUS_ERROR:
				checkItemError(t, r.Error)
			case r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT && r.Status != ringlimitv1.Status_STATUS_OVER_LIMIT:
				t.Fatalf("item %d: status %v", i, r.Status)
			}
		}
	})
}
