package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHistBucketsBoundTheRelativeError(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 12345, 1e6, 987654321, 1 << 40, 1<<63 - 1} {
		b := bucketOf(v)
		lo := lowerBound(b)
		if lo > v {
			t.Errorf("v %d: bucket %d starts at %d, above v", v, b, lo)
		}
		if v >= histExact && float64(v-lo)/float64(v) > 1.0/histSub {
			t.Errorf("v %d: bucket %d starts at %d, relative error %.4f", v, b, lo, float64(v-lo)/float64(v))
		}
		if b < 0 || b >= histBuckets {
			t.Errorf("v %d: bucket %d out of range", v, b)
		}
	}
}

func TestHistQuantiles(t *testing.T) {
	var h, a, b hist
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond
		h.record(d)
		if i%2 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	a.merge(&b)
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		for name, hh := range map[string]*hist{"direct": &h, "merged": &a} {
			got := hh.quantile(tt.q)
			if got > tt.want || float64(tt.want-got)/float64(tt.want) > 1.0/histSub {
				t.Errorf("%s q%.2f = %v, want %v within 1/%d below", name, tt.q, got, tt.want, histSub)
			}
		}
	}
	var empty hist
	if got := empty.quantile(0.5); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
}

func TestChooserIsSeededAndZipfIsSkewed(t *testing.T) {
	cfg := &config{keys: 100, dist: "zipf", zipfS: 1.2}
	draw := func(seed int64) []int {
		c, err := newChooser(cfg, rand.New(rand.NewSource(seed)))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, 2000)
		for i := range out {
			out[i] = c()
		}
		return out
	}
	x, y := draw(7), draw(7)
	counts := make([]int, cfg.keys)
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("draw %d differs for one seed: %d vs %d", i, x[i], y[i])
		}
		counts[x[i]]++
	}
	if counts[0] < 5*counts[50] || counts[0] < 200 {
		t.Errorf("zipf counts: key 0 drawn %d times, key 50 %d times; want key 0 far more frequent", counts[0], counts[50])
	}
}

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// TestTargetsFromEnv: RINGLIMIT_ADDR (printed by make run for its
// PORT_BASE) is the default of --targets; the flag wins.
func TestTargetsFromEnv(t *testing.T) {
	env := func(name string) string {
		if name == envTargets {
			return "127.0.0.1:17001, 127.0.0.1:17002"
		}
		return ""
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:17001|127.0.0.1:17002"},
		{[]string{"--targets", "h:1"}, "h:1"},
	} {
		cfg, err := parseFlags(tc.args, env, io.Discard)
		if err != nil || strings.Join(cfg.targets, "|") != tc.want {
			t.Errorf("%q: %v, %v; want targets %q", tc.args, cfg, err, tc.want)
		}
	}
	cfg, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil || strings.Join(cfg.targets, "|") != "127.0.0.1:7101|127.0.0.1:7102|127.0.0.1:7103" {
		t.Errorf("no environment: %v, %v; want make run's default ports", cfg, err)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--targets", "a:1, b:2", "--dist", "zipf", "--mode", "", "--algorithm", "gcra"}, ""},
		{[]string{"--dist", "normal"}, `--dist "normal"`},
		{[]string{"--dist", "zipf", "--zipf-s", "1"}, "--zipf-s"},
		{[]string{"--mode", "eventual"}, "--mode"},
		{[]string{"--algorithm", "unspecified"}, "--algorithm"},
		{[]string{"--targets", ""}, "--targets"},
		{[]string{"--max-calls", "0"}, "bounded"},
		{[]string{"--duration", "0s"}, "bounded"},
		{[]string{"--concurrency", "0"}, "at least 1"},
		{[]string{"--route", "owner", "--partitions", "271"}, ""},
		{[]string{"--route", "nearest"}, "--route"},
		{[]string{"--partitions", "0"}, "--partitions"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		cfg, err := parseFlags(tt.args, noEnv, &out)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: err %v, want one containing %q", tt.args, err, tt.wantErr)
		case tt.wantErr == "" && len(cfg.targets) == 0:
			t.Errorf("%q: no targets", tt.args)
		}
	}
}

func TestRunAgainstOneNode(t *testing.T) {
	nc := ringlimit.DefaultConfig()
	nc.Name, nc.API.GRPCAddr, nc.API.HTTPAddr, nc.Gossip.Addr, nc.Gossip.Profile = "solo", "127.0.0.1:0", "", "127.0.0.1:0", ringlimit.GossipLocal
	nc.Peer.Secret = []byte("ringlimit test cluster secret, 32")
	n, err := ringlimit.Start(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !n.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("node not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cfg, err := parseFlags([]string{"--targets", n.GRPCAddr(), "--concurrency", "4", "--items", "5",
		"--max-calls", "200", "--duration", "30s", "--keys", "10", "--limit", "50", "--period", "1h", "--mode", "local"}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	st, elapsed, err := run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.calls != 200 || st.rpcErrors != 0 {
		t.Errorf("calls %d, failed %d; want 200 calls, none failed", st.calls, st.rpcErrors)
	}
	if got := st.items[classOwner]; got != 1000 || st.items[classForwarded] != 0 {
		t.Errorf("owner-answered %d, forwarded %d; want 1000 and 0 on a single node", got, st.items[classForwarded])
	}
	// 10 keys of 50 permits: exactly 500 of the 1000 hits fit.
	if st.status[ringlimitv1.Status_STATUS_UNDER_LIMIT] != 500 || st.status[ringlimitv1.Status_STATUS_OVER_LIMIT] != 500 {
		t.Errorf("statuses %v; want 500 under and 500 over the limit", st.status)
	}
	var out bytes.Buffer
	newReport(cfg, st, elapsed).print(&out)
	for _, want := range []string{"calls 200", "decisions 1000", "owner-answered", "forwarded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBaseline: --baseline drives the in-process server that answers every
// item under limit, and reports every call.
func TestBaseline(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--baseline", "--max-calls", "300", "--duration", "30s", "--concurrency", "4", "--items", "3", "--json"}
	if code := mainErr(t.Context(), args, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	for _, want := range []string{`"calls": 300`, `"rpc_errors": 0`, `"decisions": 900`, `"under_limit": 900`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %s:\n%s", want, out.String())
		}
	}
}

// TestOwnerRoute: a call goes round-robin (-1) until an answer names its
// key's owner and that owner's target is known from an answer of its own;
// then to that target. A node answering at another target moves its name.
func TestOwnerRoute(t *testing.T) {
	r := newOwnerRoute(3, 7)
	req := func(keys ...string) *ringlimitv1.CheckRequest {
		q := &ringlimitv1.CheckRequest{}
		for _, k := range keys {
			q.Items = append(q.Items, &ringlimitv1.CheckItem{Name: "api", UniqueKey: k})
		}
		return q
	}
	resp := func(node string, owners ...string) *ringlimitv1.CheckResponse {
		p := &ringlimitv1.CheckResponse{Node: node}
		for _, o := range owners {
			p.Items = append(p.Items, &ringlimitv1.CheckResult{Owner: o})
		}
		return p
	}
	// Keys of three different partitions.
	var keys []string
	parts := map[int]bool{}
	for i := 0; len(keys) < 3; i++ {
		k := fmt.Sprint("k", i)
		if p := r.table.Partition("api", k); !parts[p] {
			parts[p] = true
			keys = append(keys, k)
		}
	}
	a, b, c := keys[0], keys[1], keys[2]
	steps := []struct {
		name   string
		learn  func()
		req    *ringlimitv1.CheckRequest
		target int
	}{
		{"nothing known", func() {}, req(a), -1},
		{"owner known, its target not", func() { r.learn(0, req(a), resp("n1", "n2")) }, req(a), -1},
		{"n2 answered at target 2", func() { r.learn(2, req(b), resp("n2", "n2")) }, req(a), 2},
		{"b learned with it", func() {}, req(b), 2},
		{"n1 is at target 0", func() { r.learn(0, req(c), resp("n1", "n1")) }, req(c), 0},
		{"majority of a batch", func() {}, req(a, c, b), 2},
		{"n2 moved to target 1", func() { r.learn(1, req(b), resp("n2", "n2")) }, req(a), 1},
		{"the ring changed: a's owner is n1", func() { r.learn(1, req(a), resp("n2", "n1")) }, req(a), 0},
		{"n3 now answers at target 0: n1 unknown", func() { r.learn(0, req(c), resp("n3", "n1")) }, req(c), -1},
	}
	for _, st := range steps {
		st.learn()
		if got := r.pick(st.req); got != st.target {
			t.Errorf("%s: pick = %d, want %d", st.name, got, st.target)
		}
	}
}
