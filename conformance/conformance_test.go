package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	logger "github.com/sirupsen/logrus"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ringlimit/ringlimit/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/results*.golden from this run")

// The targets compared with Lyft's service: ringlimit loading each file as
// it is, and in "Lyft mode": count_rejected (Lyft's counting) added for the
// file's domain, the lines of detailed_metric and value_to_metric removed
// (ringlimit refuses them; they only name Lyft's statistics and change none
// of its answers), and the node's EnvoyAllowBadKeys set (a descriptor whose
// key cannot be formed is OK, as in Lyft's service, not OVER_LIMIT).
const (
	asIs     = "ringlimit"
	lyftMode = "ringlimit-lyft-mode"
)

var variants = []string{asIs, lyftMode}

// metricKey matches a line of a key that only names Lyft's statistics.
var metricKey = regexp.MustCompile(`^\s*(detailed_metric|value_to_metric):`)

// variantContent returns the file as the variant loads it.
func variantContent(variant string, content []byte) []byte {
	if variant != lyftMode {
		return content
	}
	var out []byte
	for _, line := range bytes.SplitAfter(content, []byte("\n")) {
		if metricKey.Match(line) {
			continue
		}
		out = append(out, line...)
		// After the domain line: a file may start with "---".
		if bytes.HasPrefix(line, []byte("domain:")) {
			out = append(out, "count_rejected: true # added by the conformance test\n"...)
		}
	}
	return out
}

// configFiles lists the config files under testdata, in order.
func configFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"testdata/lyft", "testdata/lyft-main", "testdata/ringlimit"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(files)
	return files
}

// TestConformance loads every config file into Lyft's service and into a
// ringlimit node (as is, and in Lyft mode), sends each file's
// request sequences to all of them through one RLS v3 client, and compares
// every field of every response. The figures and every difference are
// written to testdata/results.golden (results-short.golden with -short):
// the test fails when they change; -update rewrites them.
func TestConformance(t *testing.T) {
	logger.SetLevel(logger.ErrorLevel) // Lyft's service logs each Redis connection at warning level
	redisAddr := startRedis(t)
	short := testing.Short()
	// Every sequence starts more than a year after the last one ended:
	// fresh windows in both services for every unit.
	epoch := time.Unix(2_000_000_000, 250_000_000)
	var report strings.Builder
	totals := map[string]*tally{}
	for _, v := range variants {
		totals[v] = &tally{}
	}
	var lyftOK, total int
	ringOK := map[string]int{}
	for fi, path := range configFiles(t) {
		// A subtest per file: its services stop when it ends.
		t.Run(strings.TrimPrefix(path, "testdata/"), func(t *testing.T) {
			name := strings.TrimPrefix(path, "testdata/")
			content, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			total++
			fmt.Fprintf(&report, "\n## %s\n", name)
			lcfg, lerr := loadLyft(name, content)
			fmt.Fprintf(&report, "lyft: %s\n", accepted(lerr))
			if lerr == nil {
				lyftOK++
			}
			// A clock per variant, shared by its ringlimit node and its Lyft
			// service: the node's driver reads its clock on every tick, and
			// a node that saw another variant's later times would answer
			// this variant's requests at those times (its core never goes
			// back in time).
			clients := map[string]rlsv3.RateLimitServiceClient{}
			clocks := map[string]*fakeClock{}
			for _, v := range variants {
				vc := variantContent(v, content)
				_, rerr := rules.Parse(name, vc)
				fmt.Fprintf(&report, "%s: %s\n", v, accepted(rerr))
				if rerr == nil {
					ringOK[v]++
					if lerr == nil {
						clocks[v] = &fakeClock{now: epoch}
						clients[v] = startRinglimit(t, name, vc, clocks[v], v == lyftMode)
					}
				}
			}
			if lerr != nil || len(clients) == 0 {
				return
			}
			seqs := sequences(content, short)
			for _, v := range variants {
				if clients[v] == nil {
					continue
				}
				// A Lyft service of its own per variant, under its own Redis
				// key prefix: each variant replays the sequences from fresh
				// counters.
				clk := clocks[v]
				lyft := startLyft(t, redisAddr, fmt.Sprintf("f%d_%s_", fi, v), lcfg, clk)
				tl := &tally{}
				for si, s := range seqs {
					start := epoch.Add(time.Duration(si) * 400 * 24 * time.Hour)
					for i, st := range s.steps {
						clk.Set(start.Add(st.at))
						want := call(lyft, st.req)
						got := call(clients[v], st.req)
						tl.add(fmt.Sprintf("%s, step %d", s.name, i+1), st.req, want, got)
					}
				}
				fmt.Fprintf(&report, "%s: %d requests compared, %d identical, %d differ\n", v, tl.requests, tl.requests-tl.differ, tl.differ)
				report.WriteString(tl.summary())
				totals[v].merge(tl)
			}
		})
	}
	var head strings.Builder
	fmt.Fprintf(&head, "# Conformance of ringlimit's Envoy service with Lyft's ratelimit\n")
	fmt.Fprintf(&head, "config files: %d; accepted by Lyft: %d", total, lyftOK)
	for _, v := range variants {
		fmt.Fprintf(&head, "; by %s: %d", v, ringOK[v])
	}
	head.WriteString("\n")
	for _, v := range variants {
		fmt.Fprintf(&head, "%s: %d requests compared, %d identical, %d differ\n", v, totals[v].requests, totals[v].requests-totals[v].differ, totals[v].differ)
	}
	got := head.String() + report.String()
	golden := "testdata/results.golden"
	if short {
		golden = "testdata/results-short.golden"
	}
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("results differ from %s (a difference appeared or went away: check it, document it in docs/envoy.md, then -update):\n%s",
			golden, lineDiff(string(want), got))
	}
	t.Log("\n" + head.String())
}

// accepted renders a load result.
func accepted(err error) string {
	if err == nil {
		return "accepted"
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return "refused: " + msg
}

// result is one answer: the response, or the error's code and message.
type result struct {
	resp *rlsv3.RateLimitResponse
	err  error
}

func call(c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, proto.Clone(req).(*rlsv3.RateLimitRequest))
	return result{resp, err}
}

// fields flattens a result into field path -> value, every set field of
// the response (a present message is "{}"), or the error.
func (r result) fields() map[string]string {
	out := map[string]string{}
	if r.err != nil {
		st := status.Convert(r.err)
		out["error"] = fmt.Sprintf("%v: %s", st.Code(), st.Message())
		return out
	}
	flatten(r.resp.ProtoReflect(), "", out)
	return out
}

func flatten(m protoreflect.Message, prefix string, out map[string]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			out[name+".len"] = fmt.Sprint(l.Len())
			for i := 0; i < l.Len(); i++ {
				leaf(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i), out)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				leaf(fd.MapValue(), mv, fmt.Sprintf("%s[%v]", name, k.Interface()), out)
				return true
			})
		default:
			leaf(fd, v, name, out)
		}
		return true
	})
}

func leaf(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string, out map[string]string) {
	switch {
	case fd.Message() != nil:
		out[name] = "{}"
		flatten(v.Message(), name+".", out)
	case fd.Enum() != nil:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			out[name] = string(ev.Name())
		} else {
			out[name] = fmt.Sprint(v.Enum())
		}
	default:
		out[name] = fmt.Sprint(v.Interface())
	}
}

// tally counts the requests of one file and target and groups their
// differences by the fields that differ.
type tally struct {
	requests, differ int
	byField          map[string]*fieldDiff
	order            []string
}

// fieldDiff is how often one set of fields (list indexes elided) differs,
// and the first example.
type fieldDiff struct {
	count   int
	example string
}

var index = regexp.MustCompile(`\[\d+\]`)

func (t *tally) add(where string, req *rlsv3.RateLimitRequest, want, got result) {
	t.requests++
	w, g := want.fields(), got.fields()
	var keys []string
	for k := range w {
		if g[k] != w[k] {
			keys = append(keys, k)
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	t.differ++
	slices.Sort(keys)
	var kinds, diffs []string
	for _, k := range keys {
		if f := index.ReplaceAllString(k, "[]"); !slices.Contains(kinds, f) {
			kinds = append(kinds, f)
		}
		diffs = append(diffs, fmt.Sprintf("%s: lyft %s, ringlimit %s", k, orAbsent(w, k), orAbsent(g, k)))
	}
	if len(diffs) > 4 {
		diffs = append(diffs[:4], fmt.Sprintf("... %d fields", len(keys)))
	}
	kind := strings.Join(kinds, " ")
	if t.byField == nil {
		t.byField = map[string]*fieldDiff{}
	}
	d := t.byField[kind]
	if d == nil {
		d = &fieldDiff{example: fmt.Sprintf("%s (%s): %s", where, describe(req), strings.Join(diffs, "; "))}
		t.byField[kind] = d
		t.order = append(t.order, kind)
	}
	d.count++
}

func (t *tally) merge(o *tally) {
	t.requests += o.requests
	t.differ += o.differ
}

func (t *tally) summary() string {
	var b strings.Builder
	for _, f := range t.order {
		d := t.byField[f]
		fmt.Fprintf(&b, "  - %d requests differ in %s; first: %s\n", d.count, f, d.example)
	}
	return b.String()
}

func orAbsent(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return "(absent)"
}

// describe renders a request compactly.
func describe(req *rlsv3.RateLimitRequest) string {
	var ds []string
	for _, d := range req.GetDescriptors() {
		s := "[" + entriesString(d.GetEntries())
		if h := d.GetHitsAddend(); h != nil {
			s += fmt.Sprintf(" hits=%d", h.GetValue())
		}
		if l := d.GetLimit(); l != nil {
			s += fmt.Sprintf(" limit=%d/%v", l.GetRequestsPerUnit(), l.GetUnit())
			if m := l.GetUnitMultiplier(); m != nil {
				s += fmt.Sprintf("x%d", m.GetValue())
			}
		}
		if d.GetIsNegativeHits() {
			s += " negative"
		}
		ds = append(ds, s+"]")
	}
	if len(ds) > 3 {
		ds = append(ds[:3], fmt.Sprintf("... %d descriptors", len(req.GetDescriptors())))
	}
	return fmt.Sprintf("domain %q hits_addend %d %s", req.GetDomain(), req.GetHitsAddend(), strings.Join(ds, " "))
}

// lineDiff lists the lines of want missing from got and the reverse.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
