package ringlimit

import (
	"bytes"
	"io"
	"math"
	"math/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// hostileConfig is a node whose HTTP and gRPC timeouts are short enough to
// watch them cut slow clients off.
func hostileConfig() Config {
	cfg := testConfig("hostile")
	cfg.API.ReadHeaderTimeout = 500 * time.Millisecond // also the gRPC handshake's
	cfg.API.ReadTimeout = time.Second
	cfg.API.WriteTimeout = 5 * time.Second
	return cfg
}

// TestHostileInput sends malformed and hostile requests over gRPC and HTTP
// (those of api_test.go aside): each gets a clear answer (gRPC
// InvalidArgument or an item error naming the field, HTTP 4xx with a
// message), or a sane decision where the input is extreme but valid, while
// a bystander's ordinary checks keep succeeding; afterwards the node still
// answers.
func TestHostileInput(t *testing.T) {
	n := startNode(t, hostileConfig())
	waitMembers(t, []*Node{n}, []string{"hostile"})
	client := dial(t, n)
	by := startBystander(t, n)

	// g checks one gRPC item, edited from an ordinary local-mode one.
	g := func(edit func(*ringlimitv1.CheckItem)) func(*testing.T) outcome {
		return func(t *testing.T) outcome {
			it := item1("hostile", "k", 10, ringlimitv1.Mode_MODE_LOCAL)
			edit(it)
			return grpcOutcome(client.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}}))
		}
	}
	raw := func(b func(*testing.T) []byte) func(*testing.T) outcome {
		return func(t *testing.T) outcome { return rawGRPC(t, n.GRPCAddr(), b(t)) }
	}
	// j posts one JSON item.
	j := func(item string) func(*testing.T) outcome {
		return func(t *testing.T) outcome {
			return httpOutcome(post(t, n, "application/json", []byte(`{"items":[`+item+`]}`)))
		}
	}
	body := func(contentType, b string) func(*testing.T) outcome {
		return func(t *testing.T) outcome { return httpOutcome(post(t, n, contentType, []byte(b))) }
	}
	items := func(k int, it string) string { return `{"items":[` + strings.Repeat(it+",", k-1) + it + `]}` }
	const okItem = `"name":"hostile","unique_key":"k","hits":1,"limit":10,"period":"1h","mode":"local"`
	valid := &ringlimitv1.CheckItem{Name: "hostile", UniqueKey: "PLACEHOLDER", Hits: proto.Int64(1), Limit: 10, Period: durationpb.New(time.Hour)}

	tests := []struct {
		name string
		call func(*testing.T) outcome
		want outcome // kind equal, msg a substring
	}{
		// gRPC, one bad item among the fields.
		{"gRPC: 3 MiB unique key", g(func(i *ringlimitv1.CheckItem) { i.UniqueKey = strings.Repeat("k", 3<<20) }),
			outcome{"item error", "unique_key: name and unique_key together are 3145735 bytes, more than the maximum 1024"}},
		{"gRPC: control bytes and NULs in the unique key (allowed)", g(func(i *ringlimitv1.CheckItem) { i.UniqueKey = "\x00\x01\x1b[2J\x7f" }),
			outcome{"item under_limit", ""}},
		{"gRPC: hits MaxInt64", g(func(i *ringlimitv1.CheckItem) { i.Hits = proto.Int64(math.MaxInt64) }), outcome{"item over_limit", ""}},
		{"gRPC: limit 1e18+1", g(func(i *ringlimitv1.CheckItem) { i.Limit = 1e18 + 1 }),
			outcome{"item error", "limit: must be at most 1000000000000000000, got 1000000000000000001"}},
		{"gRPC: burst 1e18+1", g(func(i *ringlimitv1.CheckItem) { i.Burst = 1e18 + 1 }), outcome{"item error", "burst: must be between 0 and"}},
		{"gRPC: limit 1e18 per nanosecond", g(func(i *ringlimitv1.CheckItem) { i.Limit, i.Period = 1e18, durationpb.New(1) }),
			outcome{"item under_limit", ""}},
		{"gRPC: period of protobuf's maximum, 10000 years", g(func(i *ringlimitv1.CheckItem) {
			i.Period = &durationpb.Duration{Seconds: 315_576_000_000, Nanos: 999_999_999}
		}), outcome{"item under_limit", ""}},
		{"gRPC: period beyond protobuf's range", g(func(i *ringlimitv1.CheckItem) { i.Period = &durationpb.Duration{Seconds: math.MaxInt64} }),
			outcome{"item error", "period: invalid duration"}},
		{"gRPC: negative min gap", g(func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.MinGap = ringlimitv1.Algorithm_ALGORITHM_SLIDING_LOG, durationpb.New(-1)
		}), outcome{"item error", "min_gap: must not be negative"}},
		{"gRPC: negative warm-up", g(func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.WarmUp = ringlimitv1.Algorithm_ALGORITHM_SMOOTH_WARMING_UP, durationpb.New(-time.Hour)
		}), outcome{"item error", "warm_up: must not be negative"}},
		{"gRPC: max wait with nanos out of range", g(func(i *ringlimitv1.CheckItem) { i.MaxWait = &durationpb.Duration{Nanos: 1e9} }),
			outcome{"item error", "max_wait: invalid duration"}},
		{"gRPC: algorithm MaxInt32", g(func(i *ringlimitv1.CheckItem) { i.Algorithm = math.MaxInt32 }),
			outcome{"item error", "algorithm: unknown algorithm 2147483647"}},
		{"gRPC: mode MinInt32", g(func(i *ringlimitv1.CheckItem) { i.Mode = math.MinInt32 }), outcome{"item error", "mode: unknown mode -2147483648"}},
		{"gRPC: policy one past the last", g(func(i *ringlimitv1.CheckItem) { i.Policy = ringlimitv1.Policy(check.PolicyLocalShare + 1) }),
			outcome{"item error", "policy: unknown policy 4"}},
		{"gRPC: sliding log over its memory cap", g(func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.Limit = ringlimitv1.Algorithm_ALGORITHM_SLIDING_LOG, 1e12
		}), outcome{"item error", "limit: sliding_log keeps one timestamp per permit"}},
		{"gRPC: 1 MiB lease id", g(func(i *ringlimitv1.CheckItem) {
			i.Algorithm, i.Lease = ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, strings.Repeat("h", 1<<20)
		}), outcome{"item error", "lease: 1048576 bytes, more than the maximum 1024"}},

		// gRPC, whole calls and bytes no client would encode.
		{"gRPC: 1001 items", func(t *testing.T) outcome {
			req := &ringlimitv1.CheckRequest{}
			for range 1001 {
				req.Items = append(req.Items, item1("hostile", "k", 10, ringlimitv1.Mode_MODE_LOCAL))
			}
			return grpcOutcome(client.Check(t.Context(), req))
		}, outcome{"grpc InvalidArgument", "items: 1001 items, more than the maximum 1000"}},
		{"gRPC: 5 MiB message", raw(func(*testing.T) []byte { return bytes.Repeat([]byte{0}, 5<<20) }),
			outcome{"grpc ResourceExhausted", "larger than max"}},
		{"gRPC: unique key not UTF-8", raw(func(t *testing.T) []byte {
			return marshalWith(t, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{valid}}, "PLACEHOLDER", "bad\xff\xfe\xc0keyxx")
		}), outcome{"grpc InvalidArgument", "malformed request: items[0].unique_key: not valid UTF-8"}},
		{"gRPC: name of the third item not UTF-8", raw(func(t *testing.T) []byte {
			bad := &ringlimitv1.CheckItem{Name: "XPLACEHOLDX", UniqueKey: "k", Limit: 1, Period: durationpb.New(time.Second)}
			return marshalWith(t, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{valid, valid, bad}}, "XPLACEHOLDX", "\xed\xa0\x80surrogat")
		}), outcome{"grpc InvalidArgument", "malformed request: items[2].name: not valid UTF-8"}},
		{"gRPC: truncated item", raw(func(*testing.T) []byte { return []byte{0x0a, 0x40, 0x0a, 0x07, 'h', 'o'} }),
			outcome{"grpc InvalidArgument", "malformed request"}},
		{"gRPC: varint of 11 bytes", raw(func(*testing.T) []byte { return append([]byte{0x0a, 0x0c, 0x18}, bytes.Repeat([]byte{0xff}, 11)...) }),
			outcome{"grpc InvalidArgument", "malformed request"}},
		{"gRPC: field number 0", raw(func(*testing.T) []byte { return []byte{0x00, 0x01} }), outcome{"grpc InvalidArgument", "malformed request"}},
		{"gRPC: nothing but unknown groups nested 10001 deep", raw(func(*testing.T) []byte {
			var b []byte
			for range 10001 {
				b = protowire.AppendTag(b, 99, protowire.StartGroupType)
			}
			for range 10001 {
				b = protowire.AppendTag(b, 99, protowire.EndGroupType)
			}
			return b
		}), outcome{"grpc InvalidArgument", "items: must not be empty"}},
		{"gRPC: items with a varint's wire type (an unknown field)", raw(func(*testing.T) []byte { return []byte{0x08, 0x01} }),
			outcome{"grpc InvalidArgument", "items: must not be empty"}},
		{"gRPC: 64 KiB of random bytes", raw(func(*testing.T) []byte {
			b := make([]byte, 64<<10)
			rand.New(rand.NewSource(6)).Read(b)
			return b
		}), outcome{"grpc InvalidArgument", "malformed request"}},

		// HTTP, one bad item.
		{"HTTP: unique key not UTF-8", j(`{"name":"hostile","unique_key":"bad` + "\xff\xfe" + `","hits":1,"limit":10,"period":"1h"}`),
			outcome{"http 400", "malformed JSON: invalid UTF-8 at byte 45"}},
		{"HTTP: NUL in the name", j(`{"name":"host\u0000ile","unique_key":"k","hits":1,"limit":10,"period":"1h"}`),
			outcome{"item error", "name: must not contain a NUL byte"}},
		{"HTTP: hits MaxInt64", j(`{` + okItem + `,"hits":9223372036854775807}`), outcome{"item over_limit", ""}},
		{"HTTP: hits MinInt64", j(`{` + okItem + `,"hits":-9223372036854775808}`), outcome{"item error", "hits: must not be negative"}},
		{"HTTP: limit 1e18+1", j(`{` + okItem + `,"limit":1000000000000000001}`), outcome{"item error", "limit: must be at most"}},
		{"HTTP: period 1ns", j(`{` + okItem + `,"unique_key":"ns","period":"1ns"}`), outcome{"item under_limit", ""}},
		{"HTTP: period MaxInt64", j(`{` + okItem + `,"unique_key":"max","period":"2562047h47m16.854775807s"}`), outcome{"item under_limit", ""}},
		{"HTTP: period overflowing a duration", j(`{` + okItem + `,"period":"9999999999h"}`), outcome{"item error", `period: invalid duration "9999999999h"`}},
		{"HTTP: max wait MinInt64", j(`{` + okItem + `,"algorithm":"leaky_queue","max_wait":"-2562047h47m16.854775808s"}`),
			outcome{"item error", "max_wait: must not be negative"}},
		{"HTTP: enumeration in capitals", j(`{` + okItem + `,"algorithm":"TOKEN_BUCKET"}`), outcome{"item error", `algorithm: unknown algorithm "TOKEN_BUCKET"`}},
		{"HTTP: unicode keys (allowed)", j(`{"name":"ограничение","unique_key":"\u202e🙂\u200b","hits":1,"limit":10,"period":"1h"}`),
			outcome{"item under_limit", ""}},

		// HTTP, whole requests.
		{"HTTP: 1001 items", body("application/json", items(1001, `{`+okItem+`}`)), outcome{"http 400", "items: 1001 items, more than the maximum 1000"}},
		{"HTTP: chunked body over the limit", func(t *testing.T) outcome {
			big := io.MultiReader(strings.NewReader(`{"items":[{"name":"`), strings.NewReader(strings.Repeat("a", 2<<20)))
			return doHTTP(t, n, http.MethodPost, http.Header{"Content-Type": {"application/json"}}, big)
		}, outcome{"http 413", "request body too large: more than 1048576 bytes"}},
		{"HTTP: JSON nested 100000 deep", body("application/json", `{"items":`+strings.Repeat("[", 100000)),
			outcome{"http 400", "malformed JSON"}},
		{"HTTP: null", body("application/json", `null`), outcome{"http 400", "items: must not be empty"}},
		{"HTTP: limit 1e400", j(`{` + okItem + `,"limit":1e400}`), outcome{"http 400", `field "items.limit"`}},
		{"HTTP: byte-order mark before the body", body("application/json", "\ufeff"+items(1, `{`+okItem+`}`)), outcome{"http 400", "malformed JSON"}},
		{"HTTP: malformed content type", body("application/", items(1, `{`+okItem+`}`)), outcome{"http 415", `Content-Type "application/"`}},
		{"HTTP: look-alike content type", body("application/json-patch+json", items(1, `{`+okItem+`}`)), outcome{"http 415", "want application/json"}},
		{"HTTP: PUT", func(t *testing.T) outcome {
			return doHTTP(t, n, http.MethodPut, http.Header{"Content-Type": {"application/json"}}, strings.NewReader(items(1, `{`+okItem+`}`)))
		}, outcome{"http 405", "Method Not Allowed"}},
		{"HTTP: 65 KiB of headers (the limit is 64 KiB)", func(t *testing.T) outcome {
			return doHTTP(t, n, http.MethodPost, http.Header{"Content-Type": {"application/json"}, "Cookie": {strings.Repeat("c", 65<<10)}},
				strings.NewReader(items(1, `{`+okItem+`}`)))
		}, outcome{"http 431", ""}},
		{"HTTP: 63 KiB of headers", func(t *testing.T) outcome {
			return doHTTP(t, n, http.MethodPost, http.Header{"Content-Type": {"application/json"}, "Cookie": {strings.Repeat("c", 63<<10)}},
				strings.NewReader(items(1, `{`+okItem+`}`)))
		}, outcome{"item under_limit", ""}},
		{"HTTP: 80 KiB of headers", func(t *testing.T) outcome {
			return doHTTP(t, n, http.MethodPost, http.Header{"Content-Type": {"application/json"}, "Cookie": {strings.Repeat("c", 80<<10)}},
				strings.NewReader(items(1, `{`+okItem+`}`)))
		}, outcome{"http 431", ""}},
		{"HTTP: garbage request line", func(t *testing.T) outcome { return rawHTTP(t, n.HTTPAddr(), "\x16\x03\x01 GARBAGE\r\n\r\n") },
			outcome{"http 400", "400 Bad Request"}},
		{"HTTP: both Content-Length and chunked (smuggling)", func(t *testing.T) outcome {
			return rawHTTP(t, n.HTTPAddr(), "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		}, outcome{"http 400", "400 Bad Request"}},
		{"HTTP: negative Content-Length", func(t *testing.T) outcome {
			return rawHTTP(t, n.HTTPAddr(), "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n")
		}, outcome{"http 400", "400 Bad Request"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.call(t)
			if got.kind != tt.want.kind || !strings.Contains(got.msg, tt.want.msg) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("slow clients", func(t *testing.T) { testSlowClients(t, n) })

	calls, failures, last := by.finish()
	t.Logf("bystander: %d ordinary checks during the attack, %d failed", calls, failures)
	if calls == 0 || failures > 0 {
		t.Errorf("bystander: %d of %d checks failed, the last: %s", failures, calls, last)
	}
	// The node still answers both APIs.
	if got := g(func(*ringlimitv1.CheckItem) {})(t); got.kind != "item under_limit" && got.kind != "item over_limit" {
		t.Errorf("gRPC check after the attack: %v", got)
	}
	if got := j(`{` + okItem + `,"unique_key":"after"}`)(t); got.kind != "item under_limit" {
		t.Errorf("HTTP check after the attack: %v", got)
	}
}

// testSlowClients sends requests a byte at a time (slow loris): the server
// closes each connection once its timeout passes, within a margin for a
// loaded machine; the clients would take 10s or more to finish.
func testSlowClients(t *testing.T, n *Node) {
	cfg := n.cfg
	const margin = 2 * time.Second
	const every = 25 * time.Millisecond
	trickle := []byte(strings.Repeat("X-Slow: 1\r\n", 40)) // 440 bytes: 11s at one byte every 25ms
	tests := []struct {
		name       string
		addr       string
		head, rest []byte
		timeout    time.Duration
		wantAnswer string // prefix of what the server wrote before closing
	}{
		{"HTTP headers", n.HTTPAddr(), []byte("POST /v1/check HTTP/1.1\r\nHost: x\r\n"), trickle, cfg.API.ReadHeaderTimeout, ""},
		{"HTTP body", n.HTTPAddr(), []byte("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 440\r\n\r\n"),
			[]byte(`{"items":[{"name":"` + strings.Repeat("a", 420) + `"}]}`), cfg.API.ReadTimeout, "HTTP/1.1 408"},
		{"gRPC connection preface", n.GRPCAddr(), nil, []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + strings.Repeat("\x00", 400)), cfg.API.ReadHeaderTimeout, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, after, closed := slowSend(t, tt.addr, tt.head, tt.rest, every)
			if !closed {
				t.Fatalf("the server never closed the connection")
			}
			t.Logf("closed after %v (timeout %v)", after.Round(time.Millisecond), tt.timeout)
			if after > tt.timeout+margin {
				t.Errorf("closed after %v, want within %v + %v", after, tt.timeout, margin)
			}
			if !strings.HasPrefix(answer, tt.wantAnswer) {
				t.Errorf("answer %q, want it to start with %q", answer, tt.wantAnswer)
			}
		})
	}
}
