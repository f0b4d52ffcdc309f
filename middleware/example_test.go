package middleware_test

import (
	"fmt"
	"github.com/ringlimit/ringlimit/internal/checkertest"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/middleware"
	"github.com/ringlimit/ringlimit/rules"
)

func ExampleRateLimit() {
	// In production the checker is the node: embedded in the process, or a
	// client of the cluster. Here, buckets in memory at a fixed time.
	clock := checkertest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	checker := newFakeChecker(clock)

	mw, err := middleware.RateLimit(checker, middleware.Options{
		Name:  "api",
		Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 2, Period: time.Minute},
		Key:   middleware.ClientIP(1), // behind one load balancer
		Clock: clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:3456" // the load balancer
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d remaining=%s reset=%s retry-after=%q\n", w.Code,
			w.Header().Get("RateLimit-Remaining"), w.Header().Get("RateLimit-Reset"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 reset=30 retry-after=""
	// 200 remaining=0 reset=60 retry-after=""
	// 429 remaining=0 reset=60 retry-after="30"
}

func ExampleAuthRequest() {
	clock := checkertest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	checker := newFakeChecker(clock)
	set, err := rules.Parse("nginx.yaml", []byte(`
domain: nginx
descriptors:
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// nginx: proxy_set_header X-Real-IP $remote_addr;
	//        proxy_set_header X-Ringlimit-Rule nginx/login;
	h, err := middleware.AuthRequest(checker, middleware.Options{
		Rules:  set, // or a *rules.Store, reloaded as the file changes
		RuleOf: middleware.RuleFromHeader("X-Ringlimit-Rule"),
		Clock:  clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/v1/nginx/auth", nil)
		r.Header.Set("X-Real-IP", "198.51.100.4")
		r.Header.Set("X-Ringlimit-Rule", "nginx/login")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d retry-after=%q\n", w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 204 retry-after=""
	// 429 retry-after="60"
}
