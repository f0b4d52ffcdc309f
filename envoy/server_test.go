package envoy

import (
	"context"
	"errors"
	"fmt"
	rlcheck "github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/checkertest"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: 10.0.0.9
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 5, mode: owner}
---
domain: repl
descriptors:
  - key: a
    rate_limit: {name: general, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {replaces: [{name: general}], unit: second, requests_per_unit: 5}
`

// t0 is a quarter second into a second, so fixed windows of a second reset
// in 750ms and windows of a minute in 59.75s, reported in whole seconds
// rounded up as Lyft's service reports them: 1s and 1m0s.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 250_000_000, time.UTC)

// serve starts a gRPC server with the Envoy service on 127.0.0.1 and
// returns the generated client.
func serve(t *testing.T, srv *Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return rlsv3.NewRateLimitServiceClient(conn)
}

func newTestServer(t *testing.T, src RuleSource, cfg Config) (rlsv3.RateLimitServiceClient, *fakeChecker, *manualClock) {
	t.Helper()
	clock := checkertest.NewClock(t0)
	fc := newFakeChecker(clock)
	cfg.Clock = clock
	srv, err := New(fc, src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv), fc, clock
}

// intoChecker is the fake checker as a CheckerInto, as the node is one:
// the server then decides into its own reused slices.
type intoChecker struct {
	*fakeChecker
	calls atomic.Int64 // CheckInto calls
}

func (c *intoChecker) CheckInto(ctx context.Context, reqs []rlcheck.Request, out []rlcheck.Response) error {
	c.calls.Add(1)
	resps, err := c.Check(ctx, reqs)
	if err != nil {
		return err
	}
	if len(out) != len(reqs) {
		return fmt.Errorf("CheckInto: %d answers for %d requests", len(out), len(reqs))
	}
	copy(out, resps)
	return nil
}

func parseRules(t *testing.T, src string) *rules.Set {
	t.Helper()
	s, err := rules.Parse("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// desc builds a descriptor from "key=value" pairs.
func desc(pairs ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func withHits(d *rlv3.RateLimitDescriptor, hits uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// summary renders a descriptor status compactly: code, limit, remaining and
// duration until reset.
func summary(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	s := st.GetCode().String()
	if l := st.GetCurrentLimit(); l != nil {
		s += fmt.Sprintf(" %d/%v", l.GetRequestsPerUnit(), l.GetUnit())
		if m := l.GetUnitMultiplier(); m != nil {
			s += fmt.Sprintf("x%d", m.GetValue())
		}
	}
	if st.GetLimitRemaining() != 0 {
		s += fmt.Sprintf(" rem=%d", st.GetLimitRemaining())
	}
	if d := st.GetDurationUntilReset(); d != nil {
		s += fmt.Sprintf(" reset=%v", d.AsDuration())
	}
	return s
}

// TestShouldRateLimit runs its steps on one server, over a Checker and
// over a CheckerInto: the calls of one, two and three descriptors in turn
// reuse the server's scratch slices, and no step may see another's plans,
// keys or answers.
func TestShouldRateLimit(t *testing.T) {
	for _, into := range []bool{false, true} {
		t.Run(fmt.Sprintf("into=%v", into), func(t *testing.T) { testShouldRateLimit(t, into) })
	}
}

func testShouldRateLimit(t *testing.T, into bool) {
	clock := checkertest.NewClock(t0)
	fc := newFakeChecker(clock)
	ic := &intoChecker{fakeChecker: fc}
	var checker Checker = fc
	if into {
		checker = ic
	}
	cfg := DefaultConfig()
	cfg.Clock = clock
	srv, err := New(checker, parseRules(t, testRules), cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, srv)
	batches := 0
	steps := []struct {
		step    string
		domain  string
		descs   []*rlv3.RateLimitDescriptor
		hits    uint32
		overall rlsv3.RateLimitResponse_Code
		want    []string // summaries of the statuses
		checked int      // requests sent to the checker
	}{
		{"unknown domain: OK, no limit", "nope", []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}, 0},
		{"key-only rule, first hit", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 2/SECOND rem=1 reset=1s"}, 1},
		{"second hit", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 2/SECOND reset=1s"}, 1},
		{"third hit is over", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 2/SECOND reset=1s"}, 1},
		{"another address has its own bucket", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.2")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 2/SECOND rem=1 reset=1s"}, 1},
		{"exact value preferred", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=10.0.0.9")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 100/MINUTE rem=99 reset=1m0s"}, 1},
		{"requests_per_unit 0 denies without a check", "edge", []*rlv3.RateLimitDescriptor{desc("remote_address=50.0.0.5")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 0/SECOND reset=1s"}, 0},
		{"requests_per_unit 0: a peek is OK, as in Lyft's service", "edge", []*rlv3.RateLimitDescriptor{withHits(desc("remote_address=50.0.0.5"), 0)}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 0/SECOND reset=1s"}, 0},
		{"nested, hits_addend 3 takes all", "edge", []*rlv3.RateLimitDescriptor{desc("path=/login", "user=ada")}, 3,
			rlsv3.RateLimitResponse_OK, []string{"OK 3/MINUTE reset=1m0s"}, 1},
		{"nested, hits_addend 0 counts one", "edge", []*rlv3.RateLimitDescriptor{desc("path=/login", "user=ada")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT 3/MINUTE reset=1m0s"}, 1},
		{"descriptor hits_addend 0 peeks", "edge", []*rlv3.RateLimitDescriptor{withHits(desc("path=/login", "user=bob"), 0)}, 5,
			rlsv3.RateLimitResponse_OK, []string{"OK 3/MINUTE rem=3 reset=1m0s"}, 1},
		{"descriptor hits_addend overrides the request's", "edge", []*rlv3.RateLimitDescriptor{withHits(desc("path=/login", "user=bob"), 2)}, 5,
			rlsv3.RateLimitResponse_OK, []string{"OK 3/MINUTE rem=1 reset=1m0s"}, 1},
		{"no rule at that depth: OK, no limit", "edge", []*rlv3.RateLimitDescriptor{desc("path=/login")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}, 0},
		{"no matching rule: OK, no limit", "edge", []*rlv3.RateLimitDescriptor{desc("path=/about", "user=ada")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK"}, 0},
		{"unlimited", "edge", []*rlv3.RateLimitDescriptor{desc("ldap=cn")}, 0,
			rlsv3.RateLimitResponse_OK, []string{fmt.Sprintf("OK rem=%d", uint32(math.MaxUint32))}, 0},
		{"shadow, within", "edge", []*rlv3.RateLimitDescriptor{desc("shadow=x")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/SECOND reset=1s"}, 1},
		{"shadow, over but reported OK", "edge", []*rlv3.RateLimitDescriptor{desc("shadow=x")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/SECOND reset=1s"}, 1},
		{"token bucket extension", "edge", []*rlv3.RateLimitDescriptor{desc("tb=x")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 10/SECOND rem=4 reset=1s"}, 1},
		{"one descriptor over makes the whole request over", "edge",
			[]*rlv3.RateLimitDescriptor{desc("remote_address=3.3.3.3"), desc("remote_address=1.1.1.1"), desc("path=/x")}, 0,
			rlsv3.RateLimitResponse_OVER_LIMIT, []string{"OK 2/SECOND rem=1 reset=1s", "OVER_LIMIT 2/SECOND reset=1s", "OK"}, 2},
		{"replaces: the replaced rule is not checked", "repl", []*rlv3.RateLimitDescriptor{desc("a=x"), desc("b=y")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK", "OK 5/SECOND rem=4 reset=1s"}, 1},
		{"replaced rule alone applies", "repl", []*rlv3.RateLimitDescriptor{desc("a=x")}, 0,
			rlsv3.RateLimitResponse_OK, []string{"OK 1/SECOND reset=1s"}, 1},
		{"limit override from Envoy", "edge", []*rlv3.RateLimitDescriptor{{
			Entries: desc("remote_address=4.4.4.4").Entries,
			Limit:   &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)},
		}}, 0, rlsv3.RateLimitResponse_OK, []string{"OK 7/MINUTEx2 rem=6 reset=2m0s"}, 1},
		{"limit override ignored for an unknown domain", "nope", []*rlv3.RateLimitDescriptor{{
			Entries: desc("remote_address=4.4.4.4").Entries,
			Limit:   &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE},
		}}, 0, rlsv3.RateLimitResponse_OK, []string{"OK"}, 0},
		{"negative hits are not refunded: peek", "edge", []*rlv3.RateLimitDescriptor{{
			Entries: desc("remote_address=1.1.1.2").Entries, HitsAddend: wrapperspb.UInt64(1), IsNegativeHits: true,
		}}, 0, rlsv3.RateLimitResponse_OK, []string{"OK 2/SECOND rem=1 reset=1s"}, 1},
	}
	for _, s := range steps {
		resp, err := client.ShouldRateLimit(context.Background(),
			&rlsv3.RateLimitRequest{Domain: s.domain, Descriptors: s.descs, HitsAddend: s.hits})
		if err != nil {
			t.Fatalf("%s: %v", s.step, err)
		}
		if resp.GetOverallCode() != s.overall {
			t.Errorf("%s: overall %v, want %v", s.step, resp.GetOverallCode(), s.overall)
		}
		var got []string
		for _, st := range resp.GetStatuses() {
			got = append(got, summary(st))
		}
		if strings.Join(got, " | ") != strings.Join(s.want, " | ") {
			t.Errorf("%s:\n got %q\nwant %q", s.step, got, s.want)
		}
		var checked int
		for _, b := range fc.TakeBatches() {
			checked += len(b)
			batches++
		}
		if checked != s.checked {
			t.Errorf("%s: %d requests checked, want %d", s.step, checked, s.checked)
		}
		if len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("%s: headers %v without Config.Headers", s.step, resp.GetResponseHeadersToAdd())
		}
	}
	if n := ic.calls.Load(); into && n != int64(batches) {
		t.Errorf("CheckInto called %d times for %d batches: want every batch decided by it", n, batches)
	}
}

// TestConcurrentCalls makes calls of one to three descriptors from many
// goroutines at once through one server over a CheckerInto, each
// goroutine on addresses of its own: every call must get the answers of
// its own descriptors (the third hit of an address is over its limit of
// 2), whatever the other calls do with the server's reused slices.
func TestConcurrentCalls(t *testing.T) {
	clock := checkertest.NewClock(t0)
	ic := &intoChecker{fakeChecker: newFakeChecker(clock)}
	cfg := DefaultConfig()
	cfg.Clock = clock
	srv, err := New(ic, parseRules(t, testRules), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			var descs []*rlv3.RateLimitDescriptor
			for d := range 1 + g%3 {
				descs = append(descs, desc(fmt.Sprintf("remote_address=192.0.2.%d", 3*g+d)))
			}
			for hit := 1; hit <= 3; hit++ {
				resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
				if err != nil {
					errs <- err
					return
				}
				want := "OK 2/SECOND rem=1 reset=1s"
				switch hit {
				case 2:
					want = "OK 2/SECOND reset=1s"
				case 3:
					want = "OVER_LIMIT 2/SECOND reset=1s"
				}
				if len(resp.GetStatuses()) != len(descs) {
					errs <- fmt.Errorf("goroutine %d, hit %d: %d statuses for %d descriptors", g, hit, len(resp.GetStatuses()), len(descs))
					return
				}
				for i, st := range resp.GetStatuses() {
					if got := summary(st); got != want {
						errs <- fmt.Errorf("goroutine %d, hit %d, descriptor %d: got %q, want %q", g, hit, i, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRequestsSentToTheChecker(t *testing.T) {
	client, fc, _ := newTestServer(t, parseRules(t, testRules), DefaultConfig())
	_, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 4,
		Descriptors: []*rlv3.RateLimitDescriptor{desc("tb=x"), desc("path=/login", "user=a/b")}})
	if err != nil {
		t.Fatal(err)
	}
	batches := fc.TakeBatches()
	if len(batches) != 1 || len(batches[0]) != 2 {
		t.Fatalf("batches %v, want one batch of two", batches)
	}
	tb, login := batches[0][0], batches[0][1]
	if tb.Key != "\x00rls/edge/tb=x" || tb.Hits != 4 || tb.Mode != rlcheck.ModeOwner || tb.Limit.Burst != 5 {
		t.Errorf("token bucket request = %+v", tb)
	}
	if login.Key != "\x00rls/edge/path=%2Flogin/user=a%2Fb" || login.Limit.Period != time.Minute {
		t.Errorf("nested request = %+v", login)
	}
}

func TestHeaders(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Headers = true
	client, _, clock := newTestServer(t, parseRules(t, testRules), cfg)
	steps := []struct {
		step  string
		at    time.Time
		descs []*rlv3.RateLimitDescriptor
		want  string
	}{
		{"no limited descriptor: no headers", t0, []*rlv3.RateLimitDescriptor{desc("ldap=x"), desc("path=/x")}, ""},
		{"one limited descriptor", t0, []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")},
			"x-ratelimit-limit: 2, x-ratelimit-remaining: 1, x-ratelimit-reset: 1"},
		{"the least remaining wins", t0, []*rlv3.RateLimitDescriptor{desc("remote_address=10.0.0.9"), desc("remote_address=1.1.1.1")},
			"x-ratelimit-limit: 2, x-ratelimit-remaining: 0, x-ratelimit-reset: 1"},
		{"over: retry-after, rounded up", t0.Add(500 * time.Millisecond), []*rlv3.RateLimitDescriptor{desc("remote_address=1.1.1.1")},
			"x-ratelimit-limit: 2, x-ratelimit-remaining: 0, x-ratelimit-reset: 1, retry-after: 1"},
		{"over a rule that denies all: no retry-after", t0, []*rlv3.RateLimitDescriptor{desc("remote_address=50.0.0.5")},
			"x-ratelimit-limit: 0, x-ratelimit-remaining: 0, x-ratelimit-reset: 1"},
		{"over a minute window", t0, []*rlv3.RateLimitDescriptor{withHits(desc("path=/login", "user=z"), 4)},
			"x-ratelimit-limit: 3, x-ratelimit-remaining: 3, x-ratelimit-reset: 60"},
	}
	for _, s := range steps {
		clock.Set(s.at)
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: s.descs})
		if err != nil {
			t.Fatalf("%s: %v", s.step, err)
		}
		var got []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			got = append(got, h.GetKey()+": "+h.GetValue())
		}
		if g := strings.Join(got, ", "); g != s.want {
			t.Errorf("%s:\n got %q\nwant %q", s.step, g, s.want)
		}
	}
}

func TestErrors(t *testing.T) {
	client, fc, _ := newTestServer(t, parseRules(t, testRules), DefaultConfig())
	many := make([]*rlv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("remote_address=9.9.9.9")
	}
	ok := []*rlv3.RateLimitDescriptor{desc("remote_address=8.8.8.8")}
	tests := []struct {
		step    string
		req     *rlsv3.RateLimitRequest
		batch   error
		itemErr error
		want    codes.Code
	}{
		// Lyft's service fails these with a plain error: gRPC code Unknown.
		{"empty domain: Unknown, as Lyft", &rlsv3.RateLimitRequest{Descriptors: ok}, nil, nil, codes.Unknown},
		{"no descriptors: Unknown, as Lyft", &rlsv3.RateLimitRequest{Domain: "edge"}, nil, nil, codes.Unknown},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, nil, nil, codes.InvalidArgument},
		{"override with an unknown unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: desc("k=v").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}}}, nil, nil, codes.InvalidArgument},
		{"checker fails: Unavailable, so Envoy's failure mode decides", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ok},
			errors.New("boom"), nil, codes.Unavailable},
		{"checker's status passes through", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ok},
			status.Error(codes.DeadlineExceeded, "slow"), nil, codes.DeadlineExceeded},
		{"item: invalid limit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ok}, nil, bucket.ErrInvalidLimit, codes.InvalidArgument},
		{"item: no members", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ok}, nil, rlcheck.ErrNoMembers, codes.Unavailable},
	}
	for _, tt := range tests {
		fc.SetErr(tt.batch)
		fc.SetItemErr("\x00rls/edge/remote_address=8.8.8.8", tt.itemErr)
		_, err := client.ShouldRateLimit(context.Background(), tt.req)
		if got := status.Code(err); got != tt.want {
			t.Errorf("%s: code %v (%v), want %v", tt.step, got, err, tt.want)
		}
	}
}

// TestBadKeys: a descriptor whose key cannot be formed is OVER_LIMIT by
// default, not an error that Envoy's default failure mode turns into
// "allow" (issue 16); the others of the request are decided as usual, and
// each bad key is reported. AllowBadKeys answers OK instead.
func TestBadKeys(t *testing.T) {
	long := desc("remote_address=" + strings.Repeat("a", 2000))
	ok := desc("remote_address=8.8.8.8")
	steps := []struct {
		step  string
		descs []*rlv3.RateLimitDescriptor
		item  error // the checker's answer to the good descriptor's key
		want  string
	}{
		{"no entries", []*rlv3.RateLimitDescriptor{{}, desc("remote_address=1.1.1.1")}, nil, "OVER_LIMIT [OVER_LIMIT OK]"},
		{"an entry without a key", []*rlv3.RateLimitDescriptor{desc("=v"), desc("remote_address=2.2.2.2")}, nil, "OVER_LIMIT [OVER_LIMIT OK]"},
		{"a value of 2000 bytes", []*rlv3.RateLimitDescriptor{long, desc("remote_address=3.3.3.3")}, nil, "OVER_LIMIT [OVER_LIMIT OK]"},
		{"the checker refuses the key", []*rlv3.RateLimitDescriptor{ok}, rlcheck.ErrKeyTooLong, "OVER_LIMIT [OVER_LIMIT]"},
	}
	for _, allow := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.MaxKeyLen, cfg.AllowBadKeys = 1024, allow
		var reported []error
		cfg.OnBadKey = func(err error) { reported = append(reported, err) }
		client, fc, _ := newTestServer(t, parseRules(t, testRules), cfg)
		for _, s := range steps {
			fc.SetItemErr("\x00rls/edge/remote_address=8.8.8.8", s.item)
			resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: s.descs})
			if err != nil {
				t.Errorf("allow %v, %s: %v, want an answer", allow, s.step, err)
				continue
			}
			var codes []string
			for _, st := range resp.GetStatuses() {
				codes = append(codes, st.GetCode().String())
			}
			got := resp.GetOverallCode().String() + " [" + strings.Join(codes, " ") + "]"
			want := s.want
			if allow {
				want = strings.ReplaceAll(want, "OVER_LIMIT", "OK")
			}
			if got != want {
				t.Errorf("allow %v, %s: %s, want %s", allow, s.step, got, want)
			}
		}
		if len(reported) != len(steps) || !errors.Is(reported[0], ErrBadKey) {
			t.Errorf("allow %v: OnBadKey told %v, want %d bad keys", allow, reported, len(steps))
		}
	}
}

func TestReloadKeepsBucketState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	v1 := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 4}\n"
	v2 := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 8}\n"
	if err := os.WriteFile(path, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := rules.NewStore(rules.StoreConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	client, _, _ := newTestServer(t, st, DefaultConfig())
	check := func(step string, want string) {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlv3.RateLimitDescriptor{desc("ip=1")}})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := summary(resp.GetStatuses()[0]); got != want {
			t.Errorf("%s: %q, want %q", step, got, want)
		}
	}
	check("1st of 4", "OK 4/MINUTE rem=3 reset=1m0s")
	check("2nd of 4", "OK 4/MINUTE rem=2 reset=1m0s")
	check("3rd of 4", "OK 4/MINUTE rem=1 reset=1m0s")
	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	// The same bucket, reconfigured as Guava's setRate does: three quarters
	// used of 4 become three quarters used of 8 (6), and this hit makes 7.
	// A reset bucket would have 7 remaining.
	check("4th, now of 8", "OK 8/MINUTE rem=1 reset=1m0s")
}

func TestNewValidates(t *testing.T) {
	set := parseRules(t, testRules)
	fc := newFakeChecker(checkertest.NewClock(t0))
	if _, err := New(nil, set, DefaultConfig()); err == nil {
		t.Error("nil checker accepted")
	}
	if _, err := New(fc, nil, DefaultConfig()); err == nil {
		t.Error("nil rules accepted")
	}
	bad := DefaultConfig()
	bad.MaxDescriptors = 0
	if _, err := New(fc, set, bad); err == nil {
		t.Error("MaxDescriptors 0 accepted")
	}
	bad = DefaultConfig()
	bad.Headers, bad.ResetHeader = true, ""
	if _, err := New(fc, set, bad); err == nil {
		t.Error("Headers without names accepted")
	}
}

// BenchmarkShouldRateLimit measures the server's own work per call (match,
// key, batch, answer) over a fake checker, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		b.Fatal(err)
	}
	clock := checkertest.NewClock(t0)
	cfg := DefaultConfig()
	cfg.Clock, cfg.Headers = clock, true
	srv, err := New(newFakeChecker(clock), set, cfg)
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
		desc("remote_address=10.0.0.9"), desc("path=/login", "user=ada"),
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
