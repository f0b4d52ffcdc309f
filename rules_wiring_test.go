package ringlimit

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/rules"
)

// fixedClock reads one instant: buckets neither refill nor roll over
// while a test runs. It is ten minutes into an hour.
type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Date(2026, 1, 1, 12, 10, 0, 0, time.UTC) }

const testRulesYAML = `domain: api
descriptors:
  - key: per_user
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket, mode: local}
  - key: open
    rate_limit: {unlimited: true}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, mode: local}
---
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2, mode: local}
`

// writeRules writes content to a rules file in dir and returns its path.
func writeRules(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rulesNode starts a single node with the rules at path, a fixed clock and
// polling paced by tick (nil: no polling).
func rulesNode(t *testing.T, path string, tick chan time.Time) *Node {
	t.Helper()
	cfg := testConfig("solo")
	cfg.Clock = fixedClock{}
	cfg.Rules.Path = path
	cfg.Rules.PollInterval = 0
	if tick != nil {
		cfg.Rules.PollInterval = time.Second
		cfg.Rules.Ticker = func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }
	}
	n := startNode(t, cfg)
	waitMembers(t, []*Node{n}, []string{"solo"})
	return n
}

// ruleItem is one hit on rule for key.
func ruleItem(rule, key string) *ringlimitv1.CheckItem {
	return &ringlimitv1.CheckItem{Rule: rule, UniqueKey: key, Hits: proto.Int64(1)}
}

// checkOne sends one item and returns its answer.
func checkOne(t *testing.T, c ringlimitv1.RateLimiterClient, it *ringlimitv1.CheckItem) *ringlimitv1.CheckResult {
	t.Helper()
	resp, err := c.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Items[0]
}

// gatherValue returns the value of the metric name with the given label
// pairs ("result", "ok") in n's registry, or -1 when it is absent.
func gatherValue(t *testing.T, n *Node, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := n.cfg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestRulesInvalidFileFailsStart(t *testing.T) {
	path := writeRules(t, t.TempDir(), `domain: api
descriptors:
  - key: per_user
    rate_limit: {unit: sec, requests_per_unit: 3}
`)
	cfg := testConfig("solo")
	cfg.Rules.Path = path
	n, err := Start(t.Context(), cfg)
	if err == nil {
		n.Close()
		t.Fatal("Start succeeded with an invalid rules file")
	}
	var list rules.ErrorList
	if !errors.As(err, &list) || !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("error %v: want a rules.ErrorList", err)
	}
	if want := path + ":4:"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `unknown unit "sec"`) {
		t.Errorf("error %q: want %q and the unknown unit", err, want)
	}

	cfg.Rules.Path = filepath.Join(t.TempDir(), "missing.yaml")
	if n, err := Start(t.Context(), cfg); err == nil {
		n.Close()
		t.Fatal("Start succeeded with a missing rules file")
	}
}

func TestRulesConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative poll", func(c *Config) { c.Rules.Path = "r.yaml"; c.Rules.PollInterval = -time.Second }, "Rules.PollInterval"},
		{"nginx rule without rules", func(c *Config) { c.Rules.NginxRule = "nginx/per_ip" }, "Rules.NginxRule: needs Rules.Path"},
		{"bad key header", func(c *Config) { c.Rules.Path = "r.yaml"; c.Rules.NginxKeyHeader = "X Real IP" }, "Rules.NginxKeyHeader"},
		{"empty rule header", func(c *Config) { c.Rules.Path = "r.yaml"; c.Rules.NginxRuleHeader = "" }, "Rules.NginxRuleHeader"},
	} {
		c := testConfig("x")
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want ErrConfig naming %q", tc.name, err, tc.want)
		}
	}
	c := testConfig("x")
	c.Rules.Path, c.Rules.NginxRule, c.Rules.NginxRuleHeader = "r.yaml", "nginx/per_ip", "" // the header is unused
	if err := c.Validate(); err != nil {
		t.Errorf("a fixed nginx rule without a rule header: %v", err)
	}
}

func TestCheckByRuleGRPC(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	c := dial(t, n)
	steps := []struct {
		step          string
		item          *ringlimitv1.CheckItem
		wantStatus    ringlimitv1.Status
		wantRemaining int64
		wantErr       string // prefix of the item's error
	}{
		{"first of 3", ruleItem("api/per_user", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 2, ""},
		{"second", ruleItem("api/per_user", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 1, ""},
		{"another client has its own bucket", ruleItem("api/per_user", "bob"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 2, ""},
		{"third", ruleItem("api/per_user", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 0, ""},
		{"fourth is over", ruleItem("api/per_user", "alice"), ringlimitv1.Status_STATUS_OVER_LIMIT, 0, ""},
		{"unlimited", ruleItem("api/open", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 1<<63 - 1, ""},
		{"denies all", ruleItem("api/closed", "alice"), ringlimitv1.Status_STATUS_OVER_LIMIT, 0, ""},
		{"shadow, first", ruleItem("api/soft", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 0, ""},
		{"shadow, over but reported allowed", ruleItem("api/soft", "alice"), ringlimitv1.Status_STATUS_UNDER_LIMIT, 0, ""},
		{"unknown rule", ruleItem("api/nope", "alice"), ringlimitv1.Status_STATUS_ERROR, 0, `rule: unknown rule "api/nope"`},
		{"rule and limit", func() *ringlimitv1.CheckItem { i := ruleItem("api/per_user", "carol"); i.Limit = 5; return i }(),
			ringlimitv1.Status_STATUS_ERROR, 0, `limit: must not be set with rule`},
		{"rule and period", func() *ringlimitv1.CheckItem {
			i := ruleItem("api/per_user", "carol")
			i.Period = durationpb.New(time.Minute)
			return i
		}(), ringlimitv1.Status_STATUS_ERROR, 0, `period: must not be set with rule`},
		{"rule and algorithm", func() *ringlimitv1.CheckItem {
			i := ruleItem("api/per_user", "carol")
			i.Algorithm = ringlimitv1.Algorithm_ALGORITHM_GCRA
			return i
		}(), ringlimitv1.Status_STATUS_ERROR, 0, `algorithm: must not be set with rule`},
		{"rule and name", func() *ringlimitv1.CheckItem { i := ruleItem("api/per_user", "carol"); i.Name = "x"; return i }(),
			ringlimitv1.Status_STATUS_ERROR, 0, `name: must be empty with rule`},
		{"rule without key", ruleItem("api/per_user", ""), ringlimitv1.Status_STATUS_ERROR, 0, "unique_key: must not be empty"},
		{"unlimited rule, negative hits", func() *ringlimitv1.CheckItem { i := ruleItem("api/open", "a"); i.Hits = proto.Int64(-1); return i }(),
			ringlimitv1.Status_STATUS_ERROR, 0, "hits: must not be negative"},
		{"the rule's bucket is (rule, key): the same as name=rule", &ringlimitv1.CheckItem{Name: "api/per_user", UniqueKey: "bob", Hits: proto.Int64(0),
			Limit: 3, Period: durationpb.New(time.Hour), Algorithm: ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Mode: ringlimitv1.Mode_MODE_LOCAL},
			ringlimitv1.Status_STATUS_UNDER_LIMIT, 2, ""},
	}
	for _, s := range steps {
		got := checkOne(t, c, s.item)
		if got.Status != s.wantStatus || got.Remaining != s.wantRemaining || !strings.HasPrefix(got.Error, s.wantErr) {
			t.Errorf("%s: got %v remaining %d error %q; want %v remaining %d error %q...",
				s.step, got.Status, got.Remaining, got.Error, s.wantStatus, s.wantRemaining, s.wantErr)
		}
	}
	// A denies-all answer never admits: retry_after is the largest.
	if got := checkOne(t, c, ruleItem("api/closed", "x")); got.RetryAfter.AsDuration() < 100*365*24*time.Hour {
		t.Errorf("denies all: retry_after %v, want the largest duration", got.RetryAfter.AsDuration())
	}
	// A mode of the item overrides the rule's.
	it := ruleItem("edge/remote_address", "10.0.0.1")
	it.Mode = ringlimitv1.Mode_MODE_OWNER
	if got := checkOne(t, c, it); got.Mode != ringlimitv1.Mode_MODE_OWNER {
		t.Errorf("mode override: decided in %v", got.Mode)
	}
}

func TestCheckByRuleHTTP(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	code, body := post(t, n, "application/json", []byte(`{"items":[
		{"rule":"edge/remote_address","unique_key":"10.0.0.9","hits":1},
		{"rule":"edge/remote_address","unique_key":"10.0.0.9","hits":2},
		{"rule":"edge/nope","unique_key":"10.0.0.9","hits":1},
		{"rule":"edge/remote_address","unique_key":"10.0.0.9","hits":1,"algorithm":"gcra"}]}`))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	for _, want := range []string{
		`{"status":"under_limit","limit":2,"remaining":1,`,
		`{"status":"over_limit","limit":2,"remaining":1,`,
		`{"status":"error","error":"rule: unknown rule \"edge/nope\""`,
		`{"status":"error","error":"algorithm: must not be set with rule: the rule \"edge/remote_address\" sets the limit"`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("answer %s\nlacks %s", body, want)
		}
	}
}

func TestCheckByRuleWithoutRulesFile(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	got := checkOne(t, dial(t, n), ruleItem("api/per_user", "alice"))
	if want := `rule: unknown rule "api/per_user": the node has no rules file (--rules)`; got.Error != want {
		t.Errorf("error %q, want %q", got.Error, want)
	}
	if err := n.ReloadRules(); !errors.Is(err, ErrNoRules) {
		t.Errorf("ReloadRules() = %v, want ErrNoRules", err)
	}
	if v := gatherValue(t, n, "ringlimit_rules"); v != 0 {
		t.Errorf("ringlimit_rules = %v, want 0", v)
	}
}

func TestRulesReloadKeepsStateAndRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	path := writeRules(t, dir, testRulesYAML)
	tick := make(chan time.Time)
	n := rulesNode(t, path, tick)
	polled := make(chan struct{})
	n.rules.polled = func() { polled <- struct{}{} } // set before the first tick
	c := dial(t, n)
	// poll has the poller poll once and returns when it is over. (A second
	// tick instead would return while the second poll runs, which then
	// raced the test's next write to the file.)
	poll := func() {
		tick <- time.Time{}
		<-polled
	}
	if v := gatherValue(t, n, "ringlimit_rules"); v != 5 {
		t.Errorf("ringlimit_rules = %v, want 5", v)
	}
	for range 2 {
		checkOne(t, c, ruleItem("api/per_user", "alice"))
	}

	// A valid change on disk, found by polling: a rule added, another
	// changed; api/per_user unchanged keeps its bucket (1 of 3 left).
	changed := strings.Replace(testRulesYAML, "requests_per_unit: 2,", "requests_per_unit: 4,", 1) +
		"  - key: new\n    rate_limit: {unit: hour, requests_per_unit: 1, mode: local}\n"
	writeRules(t, dir, changed)
	poll()
	if v := gatherValue(t, n, "ringlimit_rules_reloads_total", "result", "ok"); v != 1 {
		t.Errorf("reloads ok = %v, want 1", v)
	}
	if v := gatherValue(t, n, "ringlimit_rules"); v != 6 {
		t.Errorf("ringlimit_rules = %v, want 6", v)
	}
	if got := checkOne(t, c, ruleItem("api/per_user", "alice")); got.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT || got.Remaining != 0 {
		t.Errorf("after the reload: %v remaining %d, want under_limit remaining 0 (state kept)", got.Status, got.Remaining)
	}
	if got := checkOne(t, c, ruleItem("edge/new", "k")); got.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Errorf("the added rule: %v %q", got.Status, got.Error)
	}
	if got := checkOne(t, c, ruleItem("edge/remote_address", "k")); got.Limit != 4 {
		t.Errorf("the changed rule: limit %d, want 4", got.Limit)
	}

	// An invalid file: rejected with its line, the rules in force stay, and
	// a poll that finds the same content again counts nothing more.
	writeRules(t, dir, changed+"  - key: broken\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	err := n.ReloadRules()
	if !errors.Is(err, rules.ErrInvalid) || !strings.Contains(err.Error(), path+":20:") {
		t.Fatalf("ReloadRules() = %v, want an error at %s:20", err, path)
	}
	poll()
	if v := gatherValue(t, n, "ringlimit_rules_reloads_total", "result", "failed"); v != 1 {
		t.Errorf("reloads failed = %v, want 1", v)
	}
	if got := checkOne(t, c, ruleItem("edge/new", "k2")); got.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Errorf("the old rules should stay in force: %v %q", got.Status, got.Error)
	}
	if n.Rules().Len() != 6 {
		t.Errorf("%d rules in force, want 6", n.Rules().Len())
	}

	// Fixed on disk, reloaded on demand (SIGHUP).
	writeRules(t, dir, testRulesYAML)
	if err := n.ReloadRules(); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadRules(); err != nil { // unchanged: still a successful reload
		t.Fatal(err)
	}
	if v := gatherValue(t, n, "ringlimit_rules_reloads_total", "result", "ok"); v != 3 {
		t.Errorf("reloads ok = %v, want 3", v)
	}
	if got := checkOne(t, c, ruleItem("edge/new", "k3")); !strings.HasPrefix(got.Error, "rule: unknown rule") {
		t.Errorf("the removed rule: %v %q", got.Status, got.Error)
	}
}

// dialEnvoy returns an Envoy RateLimitService client of n.
func dialEnvoy(t *testing.T, n *Node) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

func envoyRequest(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
}

func TestEnvoyServedOnTheGRPCPort(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	c := dialEnvoy(t, n)
	var codes []string
	for range 3 {
		resp, err := c.ShouldRateLimit(t.Context(), envoyRequest("edge", "remote_address", "203.0.113.7"))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.GetOverallCode().String())
	}
	if got := strings.Join(codes, " "); got != "OK OK OVER_LIMIT" {
		t.Errorf("codes %s, want OK OK OVER_LIMIT", got)
	}
	resp, err := c.ShouldRateLimit(t.Context(), envoyRequest("unknown", "remote_address", "203.0.113.7"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown domain: %v %v, want OK (as Lyft's service)", resp.GetOverallCode(), err)
	}
	if v := gatherValue(t, n, "ringlimit_decisions_total", "algorithm", "fixed_window", "status", "over_limit"); v != 1 {
		t.Errorf("decisions over limit counted %v, want 1", v)
	}
}

func TestEnvoyWithoutRulesFails(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	_, err := dialEnvoy(t, n).ShouldRateLimit(t.Context(), envoyRequest("edge", "remote_address", "1.2.3.4"))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no rules file") {
		t.Errorf("err %v, want FailedPrecondition: no rules file", err)
	}
}

// nginxAuth sends one auth_request subrequest to n.
func nginxAuth(t *testing.T, n *Node, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+n.HTTPAddr()+"/v1/nginx/auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestNginxAuthEndpoint(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	var got []string
	for range 3 {
		resp, _ := nginxAuth(t, n, "X-Real-IP: 198.51.100.4", "X-Ringlimit-Rule: edge/remote_address")
		got = append(got, resp.Status+" retry="+resp.Header.Get("Retry-After")+" remaining="+resp.Header.Get("RateLimit-Remaining"))
	}
	want := []string{"204 No Content retry= remaining=1", "204 No Content retry= remaining=0", "429 Too Many Requests retry=3000 remaining=0"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Fail open by default: an unknown rule or no key passes.
	if resp, _ := nginxAuth(t, n, "X-Real-IP: 198.51.100.4", "X-Ringlimit-Rule: edge/nope"); resp.StatusCode != http.StatusNoContent {
		t.Errorf("unknown rule: %s, want 204 (fail open)", resp.Status)
	}

	// A node with a fixed rule, a key header of its own and fail-closed.
	cfg := testConfig("solo2")
	cfg.Clock = fixedClock{}
	cfg.Rules.Path = writeRules(t, t.TempDir(), testRulesYAML)
	cfg.Rules.NginxRule, cfg.Rules.NginxKeyHeader, cfg.Rules.NginxFailClosed = "edge/remote_address", "X-Client", true
	n2 := startNode(t, cfg)
	waitMembers(t, []*Node{n2}, []string{"solo2"})
	if resp, _ := nginxAuth(t, n2, "X-Client: a", "X-Ringlimit-Rule: api/open"); resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("RateLimit-Limit") != "2" {
		t.Errorf("fixed rule: %s limit %q, want 204 under edge/remote_address (the header ignored)", resp.Status, resp.Header.Get("RateLimit-Limit"))
	}
	if resp, _ := nginxAuth(t, n2, "X-Real-IP: a"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("no key (the key header is X-Client): %s, want 403 (the bad-key policy)", resp.Status)
	}
}

func TestNginxAuthWithoutRules(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	resp, body := nginxAuth(t, n, "X-Real-IP: 1.2.3.4")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no rules file configured") {
		t.Errorf("%s %s, want 404 saying no rules file", resp.Status, body)
	}
}

func TestNodeCheckerServesMiddleware(t *testing.T) {
	n := rulesNode(t, writeRules(t, t.TempDir(), testRulesYAML), nil)
	r, _ := n.Rules().Lookup("api/per_user")
	resps, err := n.Checker().Check(t.Context(), []check.Request{r.Request(api.Key(r.Name, "zed"), 1), r.Request("", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if !resps[0].Allowed || resps[0].Remaining != 2 || resps[1].Err == nil {
		t.Errorf("got %+v, %v; want admitted with 2 left, then an error for the empty key", resps[0].Decision, resps[1].Err)
	}
	// The Checker and the public API share the bucket (rule, key).
	if got := checkOne(t, dial(t, n), ruleItem("api/per_user", "zed")); got.Remaining != 1 {
		t.Errorf("public API after the Checker: remaining %d, want 1", got.Remaining)
	}
}
