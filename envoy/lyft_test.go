package envoy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// lyftRules exercise the keys of Lyft's format that decide differently
// from plain rules: middle and multiple wildcards, quota_mode,
// share_threshold and (ringlimit's) count_rejected.
const lyftRules = `
domain: lyft
count_rejected: true
descriptors:
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: first
    value: a*
    rate_limit: {name: first_a, unit: minute, requests_per_unit: 1}
  - key: first
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: files
    value: doc*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
`

// lyftStep is one call of a Lyft table: the descriptors, the hits of the
// request, and the overall code and statuses wanted.
type lyftStep struct {
	step    string
	descs   []*rlv3.RateLimitDescriptor
	hits    uint32
	overall rlsv3.RateLimitResponse_Code
	want    []string
}

func runLyft(t *testing.T, client rlsv3.RateLimitServiceClient, steps []lyftStep) {
	t.Helper()
	for _, st := range steps {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "lyft", Descriptors: st.descs, HitsAddend: st.hits})
		if err != nil {
			t.Fatalf("%s: %v", st.step, err)
		}
		var got []string
		for _, s := range resp.GetStatuses() {
			got = append(got, summary(s))
		}
		if resp.GetOverallCode() != st.overall || !slices.Equal(got, st.want) {
			t.Errorf("%s:\n got %v %q\nwant %v %q", st.step, resp.GetOverallCode(), got, st.overall, st.want)
		}
	}
}

func TestLyftWildcards(t *testing.T) {
	client, _, _ := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	runLyft(t, client, []lyftStep{
		// bar*b: a '*' in the middle stands for any run of bytes, empty included.
		{"bar*b matches barab", []*rlv3.RateLimitDescriptor{desc("mid=barab")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s"}},
		{"bar*b: barb is another value, its own bucket", []*rlv3.RateLimitDescriptor{desc("mid=barb")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s"}},
		{"bar*b: barab again is over", []*rlv3.RateLimitDescriptor{desc("mid=barab")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 1/MINUTE reset=1m0s"}},
		{"bar*b does not match bar", []*rlv3.RateLimitDescriptor{desc("mid=bar")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}},
		{"bar*b does not match barbx", []*rlv3.RateLimitDescriptor{desc("mid=barbx")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}},
		{"foo*bar*baz matches foo-bar-baz", []*rlv3.RateLimitDescriptor{desc("multi=foo-bar-baz")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s"}},
		{"foo*bar*baz matches foobarbaz", []*rlv3.RateLimitDescriptor{desc("multi=foobarbaz")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s"}},
		{"foo*bar*baz does not match foobaz", []*rlv3.RateLimitDescriptor{desc("multi=foobaz")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}},
		{"foo*bar*baz does not match foo-baz-bar", []*rlv3.RateLimitDescriptor{desc("multi=foo-baz-bar")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}},
		// As in Lyft's service the first wildcard in file order wins, not
		// the longest: abc matches a* (1/min), not ab* (5/min).
		{"the first wildcard in file order wins", []*rlv3.RateLimitDescriptor{desc("first=abc")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s"}},
	})
}

func TestLyftQuotaMode(t *testing.T) {
	client, _, _ := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	q1, q2, plain := desc("quota1=u"), desc("quota2=u"), desc("plain=u")
	runLyft(t, client, []lyftStep{
		{"both quotas within", []*rlv3.RateLimitDescriptor{q1, q2}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/MINUTE reset=1m0s", "OK 2/MINUTE rem=1 reset=1m0s"}},
		{"one quota over, the other within: OK overall", []*rlv3.RateLimitDescriptor{q1, q2}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OVER_LIMIT 1/MINUTE reset=1m0s", "OK 2/MINUTE reset=1m0s"}},
		{"every quota over: OVER_LIMIT", []*rlv3.RateLimitDescriptor{q1, q2}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 1/MINUTE reset=1m0s", "OVER_LIMIT 2/MINUTE reset=1m0s"}},
		{"the only quota, over, beside a rule within: OVER_LIMIT (every quota is over)", []*rlv3.RateLimitDescriptor{q1, plain}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 1/MINUTE reset=1m0s", "OK 100/MINUTE rem=99 reset=1m0s"}},
	})
}

func TestLyftShareThreshold(t *testing.T) {
	client, _, _ := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	runLyft(t, client, []lyftStep{
		{"doc1: first of the shared 2", []*rlv3.RateLimitDescriptor{desc("files=doc1")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 2/MINUTE rem=1 reset=1m0s"}},
		{"doc2 counts in the same bucket", []*rlv3.RateLimitDescriptor{desc("files=doc2")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 2/MINUTE reset=1m0s"}},
		{"doc3: the shared bucket is spent", []*rlv3.RateLimitDescriptor{desc("files=doc3")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 2/MINUTE reset=1m0s"}},
	})
}

// TestLyftCountRejected: with count_rejected (set for the domain), a request
// of 60 hits on 50 per second is refused and counted, so every later
// request of that second is refused, with nothing remaining, as Lyft's
// service answers.
func TestLyftCountRejected(t *testing.T) {
	client, _, clock := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	api := desc("api=k")
	runLyft(t, client, []lyftStep{
		{"10 fit", []*rlv3.RateLimitDescriptor{api}, 10,
			rlsv3.RateLimitResponse_OK, []string{"OK 50/SECOND rem=40 reset=1s"}},
		{"60 more: over, and counted", []*rlv3.RateLimitDescriptor{withHits(desc("api=k"), 60)}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 50/SECOND reset=1s"}},
		{"1 more: still over", []*rlv3.RateLimitDescriptor{api}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 50/SECOND reset=1s"}},
	})
	clock.Set(t0.Add(time.Second))
	runLyft(t, client, []lyftStep{
		{"the next second starts afresh", []*rlv3.RateLimitDescriptor{api}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 50/SECOND rem=49 reset=1s"}},
	})
}

// TestLyftCurrentLimitName: current_limit carries the rule's rate_limit.name,
// empty without one, as Lyft's service reports it.
func TestLyftCurrentLimitName(t *testing.T) {
	client, _, _ := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "lyft", Descriptors: []*rlv3.RateLimitDescriptor{desc("first=a1"), desc("plain=x")}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetStatuses() {
		names = append(names, s.GetCurrentLimit().GetName())
	}
	if want := []string{"first_a", ""}; !slices.Equal(names, want) {
		t.Errorf("current_limit names %q, want %q", names, want)
	}
}

// TestLyftCountDenied: with count_rejected, a rule of 0 counts the hits it
// refuses, so a peek after them is refused too, as in Lyft's service; a
// peek before any, or in the next window, passes.
func TestLyftCountDenied(t *testing.T) {
	client, fc, clock := newTestServer(t, parseRules(t, lyftRules), DefaultConfig())
	peek := func() *rlv3.RateLimitDescriptor { return withHits(desc("zero=k"), 0) }
	runLyft(t, client, []lyftStep{
		{"a peek before any hit passes", []*rlv3.RateLimitDescriptor{peek()}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 0/SECOND reset=1s"}},
		{"a hit is refused", []*rlv3.RateLimitDescriptor{desc("zero=k")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 0/SECOND reset=1s"}},
		{"a peek after it is refused", []*rlv3.RateLimitDescriptor{peek()}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 0/SECOND reset=1s"}},
		{"another value has its own counter", []*rlv3.RateLimitDescriptor{withHits(desc("zero=j"), 0)}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 0/SECOND reset=1s"}},
	})
	clock.Set(t0.Add(time.Second))
	runLyft(t, client, []lyftStep{
		{"the next second, a peek passes", []*rlv3.RateLimitDescriptor{peek()}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 0/SECOND reset=1s"}},
	})
	n := 0
	for _, b := range fc.TakeBatches() {
		for _, r := range b {
			n++
			if !strings.HasSuffix(r.Key, "\x00denied") || r.Limit.Limit != 1 || !r.Limit.CountRejected {
				t.Errorf("deny counter check %q %+v: want a key of its own and a counting limit of 1", r.Key, r.Limit)
			}
		}
	}
	if n != 5 {
		t.Errorf("%d checks of the deny counter, want 5 (one per request)", n)
	}
}
