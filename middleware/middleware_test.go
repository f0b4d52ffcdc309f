package middleware_test

import (
	"context"
	"errors"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/checkertest"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/middleware"
	"github.com/ringlimit/ringlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a quarter second into a second: fixed windows of a second reset in
// 750ms.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 250_000_000, time.UTC)

var twoPerSecond = bucket.Limit{Algorithm: bucket.FixedWindow, Limit: 2, Period: time.Second}

const testRules = `
domain: http
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: open
    rate_limit: {unlimited: true}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: shaped
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_queue, burst: 5, max_wait: 2s}
`

// env is one middleware under test, its fake checker and its clock.
type env struct {
	fc      *fakeChecker
	clock   *manualClock
	errs    []error
	badKeys []error // what OnBadKey was told
	slept   []time.Duration
	handler http.Handler
	reached int // requests that reached the wrapped handler
}

// newEnv builds RateLimit (auth false) or AuthRequest (auth true) over a
// fake checker; opts is completed with the fake clock, sleep and OnError.
func newEnv(t *testing.T, auth bool, opts middleware.Options) *env {
	t.Helper()
	e := &env{clock: checkertest.NewClock(t0)}
	e.fc = newFakeChecker(e.clock)
	opts.Clock = e.clock
	opts.OnError = func(_ *http.Request, err error) { e.errs = append(e.errs, err) }
	opts.OnBadKey = func(_ *http.Request, err error) { e.badKeys = append(e.badKeys, err) }
	opts.Sleep = func(_ context.Context, d time.Duration) error {
		e.slept = append(e.slept, d)
		return nil
	}
	if auth {
		h, err := middleware.AuthRequest(e.fc, opts)
		if err != nil {
			t.Fatal(err)
		}
		e.handler = h
		return e
	}
	mw, err := middleware.RateLimit(e.fc, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.handler = mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.reached++
		io.WriteString(w, "hello")
	}))
	return e
}

// call sends a GET from remote with the given headers ("Name: value").
func (e *env) call(remote string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = remote
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, v)
	}
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, r)
	return w
}

// summary renders the status and rate-limit headers of a response.
func summary(w *httptest.ResponseRecorder) string {
	s := http.StatusText(w.Code)
	for _, h := range []string{middleware.HeaderLimit, middleware.HeaderRemaining, middleware.HeaderReset, middleware.HeaderRetryAfter} {
		if v := w.Header().Get(h); v != "" {
			s += " " + h + "=" + v
		}
	}
	return s
}

type step struct {
	step    string
	remote  string
	headers []string
	want    string
}

func run(t *testing.T, e *env, steps []step) {
	t.Helper()
	for _, s := range steps {
		if got := summary(e.call(s.remote, s.headers...)); got != s.want {
			t.Errorf("%s:\n got %s\nwant %s", s.step, got, s.want)
		}
	}
}

func TestRateLimitFixedLimit(t *testing.T) {
	e := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond})
	run(t, e, []step{
		{"first", "1.1.1.1:5000", nil, "OK RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=1"},
		{"second, another port", "1.1.1.1:5001", nil, "OK RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{"third is over", "1.1.1.1:5000", nil, "Too Many Requests RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1 Retry-After=1"},
		{"IPv4-mapped IPv6 is the same client", "[::ffff:1.1.1.1]:80", nil, "Too Many Requests RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1 Retry-After=1"},
		{"another client", "2.2.2.2:5000", nil, "OK RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=1"},
		{"X-Forwarded-For ignored without trusted hops", "2.2.2.2:5000", []string{"X-Forwarded-For: 9.9.9.9"}, "OK RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1"},
	})
	if e.reached != 4 {
		t.Errorf("%d requests reached the handler, want 4", e.reached)
	}
	w := e.call("1.1.1.1:5000")
	if body := w.Body.String(); !strings.Contains(body, "rate limit exceeded") {
		t.Errorf("429 body %q", body)
	}
	var keys []string
	for _, b := range e.fc.TakeBatches() {
		keys = append(keys, b[0].Key)
	}
	if keys[0] != "http\x001.1.1.1" || keys[4] != "http\x002.2.2.2" {
		t.Errorf("bucket keys %q, want name NUL address", keys)
	}
}

func TestRateLimitRetryAfterRoundsUp(t *testing.T) {
	lim := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1, Period: 10 * time.Second}
	e := newEnv(t, false, middleware.Options{Name: "tb", Limit: lim})
	run(t, e, []step{
		{"first", "1.1.1.1:1", nil, "OK RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=10"},
	})
	e.clock.Set(t0.Add(8500 * time.Millisecond))
	run(t, e, []step{
		{"1.5s before the next token", "1.1.1.1:1", nil, "Too Many Requests RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=2 Retry-After=2"},
	})
	e.clock.Set(t0.Add(10 * time.Second))
	run(t, e, []step{
		{"refilled", "1.1.1.1:1", nil, "OK RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=10"},
	})
	big := newEnv(t, false, middleware.Options{Name: "tb", Limit: lim, Hits: 2})
	run(t, big, []step{
		{"more hits than the capacity: never, no Retry-After", "1.1.1.1:1", nil, "Too Many Requests RateLimit-Limit=1 RateLimit-Remaining=1 RateLimit-Reset=0"},
	})
}

func TestRateLimitKeys(t *testing.T) {
	tests := []struct {
		step    string
		key     middleware.KeyFunc
		remote  string
		headers []string
		want    string // "" for ErrNoKey
	}{
		{"peer address", middleware.ClientIP(0), "1.2.3.4:80", nil, "1.2.3.4"},
		{"peer IPv6", middleware.ClientIP(0), "[2001:db8::1]:80", nil, "2001:db8::1"},
		{"peer without port", middleware.ClientIP(0), "1.2.3.4", nil, "1.2.3.4"},
		{"peer unreadable", middleware.ClientIP(0), "pipe", nil, ""},
		{"one trusted proxy: rightmost", middleware.ClientIP(1), "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 3.3.3.3"}, "3.3.3.3"},
		{"two trusted proxies", middleware.ClientIP(2), "10.0.0.2:80", []string{"X-Forwarded-For: 6.6.6.6, 3.3.3.3, 10.0.0.1"}, "3.3.3.3"},
		{"header lines joined in order", middleware.ClientIP(2), "10.0.0.2:80", []string{"X-Forwarded-For: 6.6.6.6, 3.3.3.3", "X-Forwarded-For: 10.0.0.1"}, "3.3.3.3"},
		{"fewer addresses than hops: leftmost", middleware.ClientIP(3), "10.0.0.2:80", []string{"X-Forwarded-For: 3.3.3.3"}, "3.3.3.3"},
		{"address with port", middleware.ClientIP(1), "10.0.0.1:80", []string{"X-Forwarded-For: [2001:db8::2]:443"}, "2001:db8::2"},
		{"garbage: the peer", middleware.ClientIP(1), "10.0.0.1:80", []string{"X-Forwarded-For: unknown"}, "10.0.0.1"},
		{"no header: the peer", middleware.ClientIP(1), "10.0.0.1:80", nil, "10.0.0.1"},
		{"header", middleware.FromHeader("X-API-Key"), "1.1.1.1:1", []string{"X-API-Key:  k1 "}, "k1"},
		{"header missing", middleware.FromHeader("X-API-Key"), "1.1.1.1:1", nil, ""},
		{"function", middleware.Func(func(r *http.Request) string { return r.URL.Path }), "1.1.1.1:1", nil, "/x"},
		{"function, empty", middleware.Func(func(*http.Request) string { return "" }), "1.1.1.1:1", nil, ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.RemoteAddr = tt.remote
		for _, h := range tt.headers {
			k, v, _ := strings.Cut(h, ": ")
			r.Header.Add(k, v)
		}
		got, err := tt.key(r)
		if tt.want == "" {
			if !errors.Is(err, middleware.ErrNoKey) {
				t.Errorf("%s: %q, %v; want ErrNoKey", tt.step, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.step, got, err, tt.want)
		}
	}
}

func TestRateLimitFailures(t *testing.T) {
	open := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond})
	closed := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond, FailClosed: true})
	for _, e := range []*env{open, closed} {
		e.fc.SetErr(errors.New("cluster down"))
	}
	run(t, open, []step{{"fail open: passes without headers", "1.1.1.1:1", nil, "OK"}})
	run(t, closed, []step{{"fail closed: 503", "1.1.1.1:1", nil, "Service Unavailable Retry-After=1"}})
	if open.reached != 1 || closed.reached != 0 {
		t.Errorf("reached: open %d, closed %d; want 1, 0", open.reached, closed.reached)
	}
	if len(open.errs) != 1 || len(closed.errs) != 1 {
		t.Errorf("OnError calls: open %v, closed %v", open.errs, closed.errs)
	}
	item := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond})
	item.fc.SetItemErr("http\x001.1.1.1", check.ErrNoMembers)
	run(t, item, []step{{"an item's error fails the check", "1.1.1.1:1", nil, "OK"}})
	if len(item.errs) != 1 || !errors.Is(item.errs[0], check.ErrNoMembers) {
		t.Errorf("OnError got %v, want ErrNoMembers", item.errs)
	}
	nokey := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond, Key: middleware.FromHeader("X-API-Key")})
	run(t, nokey, []step{{"no key: denied by the bad-key policy", "1.1.1.1:1", nil, "Forbidden"}})
	if len(nokey.badKeys) != 1 || !errors.Is(nokey.badKeys[0], middleware.ErrNoKey) || !errors.Is(nokey.badKeys[0], middleware.ErrBadKey) {
		t.Errorf("OnBadKey got %v, want ErrBadKey wrapping ErrNoKey", nokey.badKeys)
	}
	allow := newEnv(t, false, middleware.Options{Name: "http", Limit: twoPerSecond, Key: middleware.FromHeader("X-API-Key"), AllowBadKeys: true})
	run(t, allow, []step{{"no key, bad keys allowed", "1.1.1.1:1", nil, "OK"}})
	if nokey.reached != 0 || allow.reached != 1 {
		t.Errorf("reached: denied %d, allowed %d; want 0, 1", nokey.reached, allow.reached)
	}
}

// TestAuthRequestBadKeys: a subrequest whose key cannot be formed (issue
// 16: nginx answered 204 to 20 of 20 with a key of 2000 bytes or none) is
// denied with 403 by default, whatever FailClosed says, and counted.
func TestAuthRequestBadKeys(t *testing.T) {
	long := "X-Real-IP: " + strings.Repeat("a", 2000)
	for _, fc := range []bool{false, true} {
		e := newEnv(t, true, middleware.Options{Name: "nginx", Limit: twoPerSecond, MaxKeyLen: 1024, FailClosed: fc})
		run(t, e, []step{
			{"no X-Real-IP", "127.0.0.1:40000", nil, "Forbidden"},
			{"a key of 2000 bytes", "127.0.0.1:40000", []string{long}, "Forbidden"},
			{"a key that is not UTF-8", "127.0.0.1:40000", []string{"X-Real-IP: \xff\xfe"}, "Forbidden"},
			{"a good key still passes", "127.0.0.1:40000", []string{"X-Real-IP: 1.1.1.1"}, "No Content RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=1"},
		})
		if len(e.badKeys) != 3 || len(e.errs) != 0 {
			t.Errorf("FailClosed %v: OnBadKey %d times, OnError %d, want 3, 0", fc, len(e.badKeys), len(e.errs))
		}
	}
	item := newEnv(t, true, middleware.Options{Name: "nginx", Limit: twoPerSecond})
	item.fc.SetItemErr("nginx\x001.1.1.1", check.ErrKeyTooLong)
	run(t, item, []step{{"the checker refuses the key as too long", "127.0.0.1:40000", []string{"X-Real-IP: 1.1.1.1"}, "Forbidden"}})
	allow := newEnv(t, true, middleware.Options{Name: "nginx", Limit: twoPerSecond, AllowBadKeys: true})
	run(t, allow, []step{{"no X-Real-IP, bad keys allowed", "127.0.0.1:40000", nil, "No Content"}})
}

func TestRateLimitNamedRules(t *testing.T) {
	set, err := rules.Parse("http.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	named := func(rule string) *env {
		return newEnv(t, false, middleware.Options{Rules: set, Rule: rule})
	}
	e := named("http/remote_address")
	run(t, e, []step{
		{"rule's limit", "1.1.1.1:1", nil, "OK RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{"rule's limit, over", "1.1.1.1:1", nil, "Too Many Requests RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1 Retry-After=1"},
	})
	if b := e.fc.TakeBatches(); b[0][0].Key != "http/remote_address\x001.1.1.1" || b[0][0].Limit.Algorithm != bucket.FixedWindow {
		t.Errorf("request %+v, want the rule's name and limit", b[0][0])
	}
	unl := named("http/open")
	run(t, unl, []step{{"unlimited: no check, no headers", "1.1.1.1:1", nil, "OK"}})
	den := named("http/closed")
	run(t, den, []step{{"denies all: no check, no Retry-After", "1.1.1.1:1", nil, "Too Many Requests RateLimit-Limit=0 RateLimit-Remaining=0"}})
	if n := len(unl.fc.TakeBatches()) + len(den.fc.TakeBatches()); n != 0 {
		t.Errorf("%d checks for unlimited and deny-all rules, want 0", n)
	}
	soft := named("http/soft")
	run(t, soft, []step{
		{"shadow, within", "1.1.1.1:1", nil, "OK RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{"shadow, over: passes", "1.1.1.1:1", nil, "OK RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
	})
	shaped := named("http/shaped")
	run(t, shaped, []step{
		{"shaping, first goes at once", "1.1.1.1:1", nil, "OK RateLimit-Limit=5 RateLimit-Remaining=4 RateLimit-Reset=1"},
		{"shaping, second waits", "1.1.1.1:1", nil, "OK RateLimit-Limit=5 RateLimit-Remaining=3 RateLimit-Reset=1"},
	})
	if len(shaped.slept) != 1 || shaped.slept[0] != 500*time.Millisecond {
		t.Errorf("slept %v, want [500ms]", shaped.slept)
	}
	unknown := named("http/nope")
	run(t, unknown, []step{{"unknown rule: a failed check", "1.1.1.1:1", nil, "OK"}})
	if len(unknown.errs) != 1 || !errors.Is(unknown.errs[0], middleware.ErrUnknownRule) {
		t.Errorf("OnError got %v, want ErrUnknownRule", unknown.errs)
	}
	byHeader := newEnv(t, false, middleware.Options{Rules: set, RuleOf: middleware.RuleFromHeader("X-Rule")})
	run(t, byHeader, []step{
		{"rule from a header", "1.1.1.1:1", []string{"X-Rule: http/closed"}, "Too Many Requests RateLimit-Limit=0 RateLimit-Remaining=0"},
		{"another rule from a header", "1.1.1.1:1", []string{"X-Rule: http/open"}, "OK"},
	})
}

func TestRateLimitWaitInterrupted(t *testing.T) {
	set, err := rules.Parse("http.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, false, middleware.Options{Rules: set, Rule: "http/shaped"})
	mw, err := middleware.RateLimit(e.fc, middleware.Options{Rules: set, Rule: "http/shaped", Clock: e.clock,
		Sleep: func(context.Context, time.Duration) error { return context.Canceled }})
	if err != nil {
		t.Fatal(err)
	}
	e.handler = mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { e.reached++ }))
	run(t, e, []step{
		{"first goes at once", "1.1.1.1:1", nil, "OK RateLimit-Limit=5 RateLimit-Remaining=4 RateLimit-Reset=1"},
		{"second's wait interrupted", "1.1.1.1:1", nil, "Service Unavailable RateLimit-Limit=5 RateLimit-Remaining=3 RateLimit-Reset=1"},
	})
	if e.reached != 1 {
		t.Errorf("reached %d, want 1", e.reached)
	}
}

func TestAuthRequest(t *testing.T) {
	e := newEnv(t, true, middleware.Options{Name: "nginx", Limit: twoPerSecond})
	run(t, e, []step{
		{"first", "127.0.0.1:40000", []string{"X-Real-IP: 1.1.1.1"}, "No Content RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=1"},
		{"second", "127.0.0.1:40001", []string{"X-Real-IP: 1.1.1.1"}, "No Content RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{"third is over", "127.0.0.1:40000", []string{"X-Real-IP: 1.1.1.1"}, "Too Many Requests RateLimit-Limit=2 RateLimit-Remaining=0 RateLimit-Reset=1 Retry-After=1"},
		{"nginx's own address is not the key", "127.0.0.1:40000", []string{"X-Real-IP: 2.2.2.2"}, "No Content RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset=1"},
		{"no X-Real-IP: a bad key, denied", "127.0.0.1:40000", nil, "Forbidden"},
	})
	if w := e.call("127.0.0.1:1", "X-Real-IP: 1.1.1.1"); w.Body.Len() != 0 {
		t.Errorf("429 has a body %q; nginx discards it", w.Body.String())
	}
	closed := newEnv(t, true, middleware.Options{Name: "nginx", Limit: twoPerSecond, FailClosed: true})
	closed.fc.SetErr(errors.New("cluster down"))
	run(t, closed, []step{{"a failed check: fail closed", "127.0.0.1:40000", []string{"X-Real-IP: 1.1.1.1"}, "Service Unavailable Retry-After=1"}})
}

func TestOptionsValidated(t *testing.T) {
	set, _ := rules.Parse("http.yaml", []byte(testRules))
	fc := newFakeChecker(checkertest.NewClock(t0))
	tests := []struct {
		step string
		c    middleware.Checker
		o    middleware.Options
	}{
		{"no checker", nil, middleware.Options{Name: "a", Limit: twoPerSecond}},
		{"no name", fc, middleware.Options{Limit: twoPerSecond}},
		{"invalid limit", fc, middleware.Options{Name: "a"}},
		{"negative hits", fc, middleware.Options{Name: "a", Limit: twoPerSecond, Hits: -1}},
		{"negative MaxKeyLen", fc, middleware.Options{Name: "a", Limit: twoPerSecond, MaxKeyLen: -1}},
		{"rule without rules", fc, middleware.Options{Rule: "http/open"}},
		{"rules without rule", fc, middleware.Options{Rules: set}},
	}
	for _, tt := range tests {
		if _, err := middleware.RateLimit(tt.c, tt.o); err == nil {
			t.Errorf("RateLimit: %s accepted", tt.step)
		}
		if _, err := middleware.AuthRequest(tt.c, tt.o); err == nil {
			t.Errorf("AuthRequest: %s accepted", tt.step)
		}
	}
}
