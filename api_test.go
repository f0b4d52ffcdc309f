package ringlimit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestGRPCBadItems(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	client := dial(t, n)
	good := func() *ringlimitv1.CheckItem { return item1("api", "good", 100, ringlimitv1.Mode_MODE_LOCAL) }
	tests := []struct {
		name    string
		edit    func(*ringlimitv1.CheckItem)
		wantErr string // prefix of the item's error message
	}{
		{"empty name", func(i *ringlimitv1.CheckItem) { i.Name = "" }, "name: must not be empty"},
		{"NUL in name", func(i *ringlimitv1.CheckItem) { i.Name = "a\x00b" }, "name: must not contain a NUL byte"},
		{"empty unique key", func(i *ringlimitv1.CheckItem) { i.UniqueKey = "" }, "unique_key: must not be empty"},
		{"oversized key", func(i *ringlimitv1.CheckItem) { i.UniqueKey = strings.Repeat("k", 1022) }, "unique_key: name and unique_key together are 1025 bytes"},
		{"negative hits", func(i *ringlimitv1.CheckItem) { i.Hits = proto.Int64(-1) }, "hits: must not be negative"},
		{"zero limit", func(i *ringlimitv1.CheckItem) { i.Limit = 0 }, "limit: must be positive"},
		{"negative limit", func(i *ringlimitv1.CheckItem) { i.Limit = -5 }, "limit: must be positive"},
		{"huge limit", func(i *ringlimitv1.CheckItem) { i.Limit = 1 << 62 }, "limit: must be at most"},
		{"missing period", func(i *ringlimitv1.CheckItem) { i.Period = nil }, "period: must be positive"},
		{"negative period", func(i *ringlimitv1.CheckItem) { i.Period = durationpb.New(-time.Second) }, "period: must be positive"},
		{"invalid period", func(i *ringlimitv1.CheckItem) { i.Period = &durationpb.Duration{Seconds: 1, Nanos: -5} }, "period: invalid duration"},
		{"negative burst", func(i *ringlimitv1.CheckItem) { i.Burst = -1 }, "burst:"},
		{"unknown algorithm", func(i *ringlimitv1.CheckItem) { i.Algorithm = 42 }, "algorithm: unknown algorithm 42"},
		{"negative algorithm", func(i *ringlimitv1.CheckItem) { i.Algorithm = -1 }, "algorithm: unknown algorithm -1"},
		{"unknown mode", func(i *ringlimitv1.CheckItem) { i.Mode = 9 }, "mode: unknown mode 9"},
		{"unknown policy", func(i *ringlimitv1.CheckItem) { i.Policy = 7 }, "policy: unknown policy 7"},
		{"warming up without warm-up", func(i *ringlimitv1.CheckItem) {
			i.Algorithm = ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP
		}, "warm_up:"},
		{"negative max wait", func(i *ringlimitv1.CheckItem) { i.MaxWait = durationpb.New(-time.Second) }, "max_wait:"},
		{"max burst seconds on a token bucket", func(i *ringlimitv1.CheckItem) { i.MaxBurstSeconds = 2 }, "max_burst_seconds: applies to smooth_bursty only"},
		{"negative max burst seconds", func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.MaxBurstSeconds = ringlimitv1.Algorithm_ALGORITHM_SMOOTH_BURSTY, -1
		}, "max_burst_seconds: must be between 0.001 and"},
		{"max burst seconds with burst", func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.MaxBurstSeconds, i.Burst = ringlimitv1.Algorithm_ALGORITHM_SMOOTH_BURSTY, 2, 3
		}, "max_burst_seconds: set burst or max_burst_seconds, not both"},
		{"cold factor below 1", func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.WarmUp, i.ColdFactor = ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, durationpb.New(time.Second), 0.5
		}, "cold_factor: must be at least 1, got 0.5"},
		{"lease on a token bucket", func(i *ringlimitv1.CheckItem) { i.Lease = "holder" }, "lease: lease and release are only for the concurrency algorithm"},
		{"release without lease", func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.Release = ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, true
		}, "lease: must name the holder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := item1("api", "bad", 100, ringlimitv1.Mode_MODE_LOCAL)
			tt.edit(bad)
			resp, err := client.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{good(), bad, good()}})
			if err != nil {
				t.Fatalf("call failed: %v; want per-item errors", err)
			}
			if got := resp.Items[1]; got.Status != ringlimitv1.Status_STATUS_ERROR || !strings.HasPrefix(got.Error, tt.wantErr) {
				t.Errorf("bad item: status %v, error %q; want STATUS_ERROR and %q...", got.Status, got.Error, tt.wantErr)
			}
			for _, i := range []int{0, 2} {
				if got := resp.Items[i]; got.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || got.Error != "" {
					t.Errorf("good item %d: status %v, error %q; want UNDER_LIMIT", i, got.Status, got.Error)
				}
			}
		})
	}
}

func TestGRPCBadCalls(t *testing.T) {
	cfg := testConfig("solo")
	cfg.API.MaxBatchItems = 3
	n := startNode(t, cfg)
	client := dial(t, n)
	it := item1("api", "k", 10, ringlimitv1.Mode_MODE_LOCAL)
	tests := []struct {
		name    string
		items   []*ringlimitv1.CheckItem
		wantMsg string
	}{
		{"no items", nil, "items: must not be empty"},
		{"too many items", []*ringlimitv1.CheckItem{it, it, it, it}, "items: 4 items, more than the maximum 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Check(t.Context(), &ringlimitv1.CheckRequest{Items: tt.items})
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != tt.wantMsg {
				t.Errorf("got %v %q, want InvalidArgument %q", s.Code(), s.Message(), tt.wantMsg)
			}
		})
	}
}

// post sends body to n's POST /v1/check.
func post(t *testing.T, n *Node, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+n.HTTPAddr()+"/v1/check", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

const goodJSON = `{"name":"api","unique_key":"good","hits":1,"limit":100,"period":"1h","mode":"local"}`

func TestHTTPBadItems(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	tests := []struct {
		name    string
		item    string
		wantErr string
	}{
		{"empty name", `{"unique_key":"k","hits":1,"limit":1,"period":"1s"}`, "name: must not be empty"},
		{"empty unique key", `{"name":"a","hits":1,"limit":1,"period":"1s"}`, "unique_key: must not be empty"},
		{"oversized key", `{"name":"a","unique_key":"` + strings.Repeat("k", 1024) + `","hits":1,"limit":1,"period":"1s"}`, "unique_key: name and unique_key together are 1025 bytes"},
		{"negative hits", `{"name":"a","unique_key":"k","hits":-3,"limit":1,"period":"1s"}`, "hits: must not be negative"},
		{"zero limit", `{"name":"a","unique_key":"k","hits":1,"period":"1s"}`, "limit: must be positive"},
		{"missing period", `{"name":"a","unique_key":"k","hits":1,"limit":1}`, "period: must be positive"},
		{"negative period", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"-1s"}`, "period: must be positive"},
		{"malformed period", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"one minute"}`, `period: invalid duration "one minute"`},
		{"malformed max wait", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"1s","max_wait":"5"}`, `max_wait: invalid duration "5"`},
		{"unknown algorithm", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"1s","algorithm":"bogus"}`, `algorithm: unknown algorithm "bogus" (want token_bucket, leaky_meter, leaky_queue, fixed_window, sliding_log, sliding_counter, gcra, concurrency, smooth_bursty, smooth_warming_up)`},
		{"unknown mode", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"1s","mode":"eventual"}`, `mode: unknown mode "eventual"`},
		{"unknown policy", `{"name":"a","unique_key":"k","hits":1,"limit":1,"period":"1s","policy":"open"}`, `policy: unknown policy "open"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, n, "application/json", []byte(`{"items":[`+goodJSON+`,`+tt.item+`,`+goodJSON+`]}`))
			if code != http.StatusOK {
				t.Fatalf("HTTP %d %s; want 200 with per-item errors", code, body)
			}
			var resp api.JSONCheckResponse
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if got := resp.Items[1]; got.Status != check.StatusError.String() || !strings.HasPrefix(got.Error, tt.wantErr) {
				t.Errorf("bad item: %+v; want status error and %q...", got, tt.wantErr)
			}
			for _, i := range []int{0, 2} {
				if got := resp.Items[i]; got.Status != check.StatusUnderLimit.String() {
					t.Errorf("good item %d: %+v; want under_limit", i, got)
				}
			}
		})
	}
}

func TestHTTPBadRequests(t *testing.T) {
	cfg := testConfig("solo")
	cfg.API.MaxBodyBytes = 4096
	cfg.API.MaxBatchItems = 3
	n := startNode(t, cfg)
	tests := []struct {
		name        string
		contentType string
		body        string
		wantCode    int
		wantMsg     string // substring of the error
	}{
		{"malformed JSON", "application/json", `{"items":[`, http.StatusBadRequest, "malformed JSON: truncated body"},
		{"not JSON", "application/json", `items=1`, http.StatusBadRequest, "malformed JSON at byte"},
		{"array body", "application/json", `[1,2]`, http.StatusBadRequest, `the body must be an object {"items": [...]}, got a JSON array`},
		{"items not an array", "application/json", `{"items":{}}`, http.StatusBadRequest, `field "items": got a JSON object`},
		{"empty body", "application/json", ``, http.StatusBadRequest, "malformed JSON: empty body"},
		{"trailing data", "application/json", `{"items":[` + goodJSON + `]} {}`, http.StatusBadRequest, "unexpected data after the request object"},
		{"unknown field", "application/json", `{"items":[{"name":"a","colour":"red"}]}`, http.StatusBadRequest, `unknown field "colour"`},
		{"wrong type", "application/json", `{"items":[{"name":"a","hits":"many"}]}`, http.StatusBadRequest, `field "items.hits"`},
		{"fractional hits", "application/json", `{"items":[{"name":"a","hits":1.5}]}`, http.StatusBadRequest, `field "items.hits"`},
		{"hits overflow", "application/json", `{"items":[{"name":"a","hits":99999999999999999999}]}`, http.StatusBadRequest, `field "items.hits"`},
		{"no items", "application/json", `{"items":[]}`, http.StatusBadRequest, "items: must not be empty"},
		{"too many items", "application/json", `{"items":[` + strings.Repeat(goodJSON+",", 3) + goodJSON + `]}`, http.StatusBadRequest, "items: 4 items, more than the maximum 3"},
		{"oversized body", "application/json", `{"items":[{"name":"` + strings.Repeat("a", 5000) + `"}]}`, http.StatusRequestEntityTooLarge, "request body too large"},
		{"wrong content type", "text/plain", `{"items":[` + goodJSON + `]}`, http.StatusUnsupportedMediaType, `Content-Type "text/plain"`},
		{"form content type", "application/x-www-form-urlencoded", `{"items":[` + goodJSON + `]}`, http.StatusUnsupportedMediaType, "want application/json"},
		{"no content type", "", `{"items":[` + goodJSON + `]}`, http.StatusUnsupportedMediaType, "Content-Type missing"},
		{"charset is fine", "application/json; charset=utf-8", `{"items":[` + goodJSON + `]}`, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, n, tt.contentType, []byte(tt.body))
			if code != tt.wantCode {
				t.Fatalf("HTTP %d %s, want %d", code, body, tt.wantCode)
			}
			if tt.wantMsg == "" {
				return
			}
			var e api.JSONError
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body %q is not JSON: %v", body, err)
			}
			if !strings.Contains(e.Error, tt.wantMsg) {
				t.Errorf("error %q, want it to contain %q", e.Error, tt.wantMsg)
			}
		})
	}
}

// TestGuavaOptionsReachTheBucket: max_burst_seconds and cold_factor, over
// gRPC and JSON, set the stored-permit capacity that a check reports as its
// limit: 2.5 seconds at 2 per second stores 5 permits (Guava's default, 1
// second, 2); a 4s warm-up at 5 per second stores 20 permits with cold
// factor 3 and 10 + 8e6/2.2e6 = 13.6 with cold factor 10.
func TestGuavaOptionsReachTheBucket(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	client := dial(t, n)
	bursty := func(key string, seconds float64) *ringlimitv1.CheckItem {
		return &ringlimitv1.CheckItem{Name: "g", UniqueKey: key, Limit: 2, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_BURSTY, MaxBurstSeconds: seconds, Mode: ringlimitv1.Mode_MODE_LOCAL}
	}
	warming := func(key string, cold float64) *ringlimitv1.CheckItem {
		return &ringlimitv1.CheckItem{Name: "g", UniqueKey: key, Limit: 5, Period: durationpb.New(time.Second),
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, WarmUp: durationpb.New(4 * time.Second),
			ColdFactor: cold, Mode: ringlimitv1.Mode_MODE_LOCAL}
	}
	resp, err := client.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{
		bursty("b0", 0), bursty("b25", 2.5), warming("w0", 0), warming("w10", 10)}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{2, 5, 20, 13} {
		if got := resp.Items[i]; got.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || got.Limit != want {
			t.Errorf("gRPC item %d: %v limit %d (%s), want under limit, limit %d", i, got.Status, got.Limit, got.Error, want)
		}
	}
	body := `{"items":[{"name":"j","unique_key":"b","hits":0,"limit":2,"period":"1s","algorithm":"smooth_bursty","max_burst_seconds":2.5,"mode":"local"},` +
		`{"name":"j","unique_key":"w","hits":0,"limit":5,"period":"1s","algorithm":"smooth_warming_up","warm_up":"4s","cold_factor":10,"mode":"local"}]}`
	code, out := post(t, n, "application/json", []byte(body))
	if code != http.StatusOK {
		t.Fatalf("HTTP %d %s", code, out)
	}
	var jr api.JSONCheckResponse
	if err := json.Unmarshal(out, &jr); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{5, 13} {
		if got := jr.Items[i]; got.Status != check.StatusUnderLimit.String() || got.Limit != want {
			t.Errorf("JSON item %d: %+v, want under limit, limit %d", i, got, want)
		}
	}
}

func TestHTTPCheckAndStatusEndpoints(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	item := `{"name":"api","unique_key":"u1","hits":1,"limit":2,"period":"1h","mode":"local"}`
	var got []string
	for range 3 {
		code, body := post(t, n, "application/json", []byte(`{"items":[`+item+`]}`))
		if code != http.StatusOK {
			t.Fatalf("HTTP %d %s", code, body)
		}
		var resp api.JSONCheckResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		r := resp.Items[0]
		got = append(got, r.Status)
		if r.Owner != "solo" || resp.Node != "solo" || r.Limit != 2 || r.ResetTime == nil {
			t.Errorf("answer %+v (node %q): want owner solo, limit 2, a reset time", r, resp.Node)
		}
	}
	if want := []string{check.StatusUnderLimit.String(), check.StatusUnderLimit.String(), check.StatusOverLimit.String()}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("statuses %v, want %v", got, want)
	}

	for _, tt := range []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz", 200, `"ok"`},
		{"/readyz", 200, `"ready"`},
		{"/v1/cluster", 200, `"self":"solo"`},
		{"/metrics", 200, `ringlimit_decisions_total{algorithm="token_bucket",mode="local",status="over_limit"} 1`},
		{"/metrics", 200, "ringlimit_members 1"},
		{"/v1/check", http.StatusMethodNotAllowed, ""},
	} {
		resp, err := http.Get("http://" + n.HTTPAddr() + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantBody) {
			t.Errorf("GET %s: %d, body lacks %q:\n%s", tt.path, resp.StatusCode, tt.wantBody, b)
		}
	}
}

// rawCodec sends bytes as they are, to put malformed protobuf on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func TestGRPCMalformedAndOversizedMessages(t *testing.T) {
	cfg := testConfig("solo")
	cfg.API.MaxRecvMsgBytes = 1 << 10
	n := startNode(t, cfg)
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, tt := range []struct {
		name string
		body []byte
		want codes.Code
	}{
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, codes.InvalidArgument},
		{"truncated item", []byte{0x0a, 0x10, 0x0a, 0x03, 'a'}, codes.InvalidArgument},
		{"oversized", bytes.Repeat([]byte{0}, 2<<10), codes.ResourceExhausted},
	} {
		var out []byte
		err := cc.Invoke(t.Context(), "/ringlimit.v1.RateLimiter/Check", &tt.body, &out, grpc.ForceCodec(rawCodec{}))
		if got := status.Code(err); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	// The node still answers.
	resp, err := dial(t, n).Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item1("a", "b", 0, 0)}})
	if err != nil || resp.Items[0].Status == ringlimitv1.Status_STATUS_UNSPECIFIED {
		t.Errorf("after bad messages: %v, %v", resp, err)
	}
}

// TestHitsDefault: a check that leaves hits out takes one permit, over
// JSON (absent or null) and over gRPC (unset); only an explicit 0 peeks.
func TestHitsDefault(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})

	t.Run("json", func(t *testing.T) {
		steps := []struct {
			hits          string // the "hits" member, "" for none
			wantStatus    string
			wantRemaining int64
		}{
			{"", check.StatusUnderLimit.String(), 1},
			{`"hits":0,`, check.StatusUnderLimit.String(), 1}, // a peek takes nothing
			{`"hits":null,`, check.StatusUnderLimit.String(), 0},
			{"", check.StatusOverLimit.String(), 0},
			{`"hits":0,`, check.StatusUnderLimit.String(), 0},
		}
		for i, s := range steps {
			body := `{"items":[{` + s.hits + `"name":"hits","unique_key":"json","limit":2,"period":"1h","mode":"owner"}]}`
			code, b := post(t, n, "application/json", []byte(body))
			var got api.JSONCheckResponse
			if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil || len(got.Items) != 1 {
				t.Fatalf("step %d %s: HTTP %d %s (%v)", i, body, code, b, err)
			}
			if r := got.Items[0]; r.Status != s.wantStatus || r.Remaining != s.wantRemaining {
				t.Errorf("step %d (hits %q): status %s remaining %d; want %s remaining %d", i, s.hits, r.Status, r.Remaining, s.wantStatus, s.wantRemaining)
			}
		}
	})

	t.Run("grpc", func(t *testing.T) {
		client := dial(t, n)
		steps := []struct {
			hits          *int64
			wantStatus    ringlimitv1.Status
			wantRemaining int64
		}{
			{nil, ringlimitv1.Status_STATUS_UNDER_LIMIT, 1},
			{proto.Int64(0), ringlimitv1.Status_STATUS_UNDER_LIMIT, 1},
			{nil, ringlimitv1.Status_STATUS_UNDER_LIMIT, 0},
			{nil, ringlimitv1.Status_STATUS_OVER_LIMIT, 0},
			{proto.Int64(0), ringlimitv1.Status_STATUS_UNDER_LIMIT, 0},
		}
		for i, s := range steps {
			it := item1("hits", "grpc", 2, ringlimitv1.Mode_MODE_OWNER)
			it.Hits = s.hits
			resp, err := client.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if r := resp.Items[0]; r.Status != s.wantStatus || r.Remaining != s.wantRemaining {
				t.Errorf("step %d (hits %v): status %v remaining %d; want %v remaining %d", i, s.hits, r.Status, r.Remaining, s.wantStatus, s.wantRemaining)
			}
		}
	})
}
