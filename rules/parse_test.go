package rules

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

func mustParse(t *testing.T, src string) *Set {
	t.Helper()
	s, err := Parse("rules.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// lyftExamples returns the examples of Lyft's README: detailed_metric,
// which ringlimit refuses, is refused with its reason and line; without it
// the file loads.
func lyftExamples(t *testing.T) *Set {
	t.Helper()
	data, err := os.ReadFile("testdata/lyft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse("lyft.yaml", data)
	const want = "lyft.yaml:110:5: detailed_metric is not supported: it only renames the statistics"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Parse(lyft.yaml) = %v, want %s...", err, want)
	}
	data = bytes.Replace(data, []byte("    detailed_metric: true\n"), nil, 1)
	s, err := Parse("lyft.yaml", data)
	if err != nil {
		t.Fatalf("Lyft's README examples without detailed_metric must load: %v", err)
	}
	return s
}

func TestParseLyftExamples(t *testing.T) {
	s := lyftExamples(t)
	want := []string{"edge_proxy_per_ip", "example4", "example6", "example7", "example8", "example9",
		"internal", "messaging", "mongo_cps"}
	if got := s.Domains(); !slices.Equal(got, want) {
		t.Errorf("domains = %v, want %v", got, want)
	}
	if s.Len() != 17 {
		t.Errorf("Len = %d, want 17", s.Len())
	}
}

func TestParseRuleFields(t *testing.T) {
	s := mustParse(t, `
domain: api
algorithm: token_bucket   # file default
mode: cached
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit:
          name: login_per_user
          replaces: [{name: other}]
          unit: minute
          unit_multiplier: 5
          requests_per_unit: 30
          algorithm: gcra
          burst: 60
          mode: owner
          policy: fail-closed
  - key: ldap
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: shaped
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: smooth_warming_up, warm_up: 3s, max_wait: 250ms}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_log, min_gap: 100ms, count_rejected: true}
  - key: guava_bursty
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: smooth_bursty, max_burst_seconds: 2.5}
  - key: guava_cold
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: smooth_warming_up, warm_up: 4s, cold_factor: 10}
`)
	tests := []struct {
		name string
		want Rule
	}{
		{"api/remote_address", Rule{Domain: "api", RequestsPerUnit: 10, Unit: UnitSecond, Multiplier: 1, Mode: check.ModeCached,
			Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: time.Second}}},
		{"api/path=%2Flogin/user", Rule{Domain: "api", Label: "login_per_user", Replaces: []string{"other"},
			RequestsPerUnit: 30, Unit: UnitMinute, Multiplier: 5, Mode: check.ModeOwner, Policy: check.PolicyFailClosed,
			Limit: bucket.Limit{Algorithm: bucket.GCRA, Limit: 30, Period: 5 * time.Minute, Burst: 60}}},
		{"api/ldap", Rule{Domain: "api", Unlimited: true, Multiplier: 1, Mode: check.ModeCached}},
		{"api/blocked", Rule{Domain: "api", Unit: UnitHour, Multiplier: 1, Mode: check.ModeCached}},
		{"api/shaped", Rule{Domain: "api", RequestsPerUnit: 2, Unit: UnitSecond, Multiplier: 1, Mode: check.ModeCached,
			Limit: bucket.Limit{Algorithm: bucket.SmoothWarmingUp, Limit: 2, Period: time.Second, WarmUp: 3 * time.Second, MaxWait: 250 * time.Millisecond}}},
		{"api/log", Rule{Domain: "api", RequestsPerUnit: 2, Unit: UnitSecond, Multiplier: 1, Mode: check.ModeCached,
			Limit: bucket.Limit{Algorithm: bucket.SlidingLog, Limit: 2, Period: time.Second, MinGap: 100 * time.Millisecond, CountRejected: true}}},
		{"api/guava_bursty", Rule{Domain: "api", RequestsPerUnit: 5, Unit: UnitSecond, Multiplier: 1, Mode: check.ModeCached,
			Limit: bucket.Limit{Algorithm: bucket.SmoothBursty, Limit: 5, Period: time.Second, MaxBurstMillis: 2500}}},
		{"api/guava_cold", Rule{Domain: "api", RequestsPerUnit: 5, Unit: UnitSecond, Multiplier: 1, Mode: check.ModeCached,
			Limit: bucket.Limit{Algorithm: bucket.SmoothWarmingUp, Limit: 5, Period: time.Second, WarmUp: 4 * time.Second, ColdFactorMilli: 10000}}},
	}
	for _, tt := range tests {
		r, ok := s.Lookup(tt.name)
		if !ok {
			t.Errorf("Lookup(%q) found nothing; rules: %v", tt.name, s.names)
			continue
		}
		tt.want.Name = tt.name
		got := *r
		got.Path, got.File, got.Line, got.Shadow = nil, "", 0, false
		if !got.equal(&tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
	if r, _ := s.Lookup("api/path=%2Flogin/user"); r.Line != 12 || r.File != "rules.yaml" {
		t.Errorf("login rule: Line %d File %q, want 12 rules.yaml", r.Line, r.File)
	}
	if r, _ := s.Lookup("api/blocked"); !r.DeniesAll() {
		t.Error("requests_per_unit: 0 must deny all")
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each error, in order
	}{
		// The YAML library names the line that opens the broken block;
		// the error names the line at fault (issue 18: line 2 for line 6).
		{"syntax", "domain: a\ndescriptors:\n  - key: k\n   value: v\n",
			[]string{"f.yaml:4: invalid YAML: did not find expected '-' indicator (check this line's indentation against the block that starts at line 2)"}},
		{"syntax tab", "domain: a\ndescriptors:\n  - key: k\n\tvalue: v\n",
			[]string{"f.yaml:4: invalid YAML: found a tab character"}},
		{"indented less, line 6", "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n     requests_per_unit: 5\n",
			[]string{"f.yaml:6: invalid YAML: did not find expected key (check this line's indentation against the block that starts at line 2)"}},
		{"indented more, line 6", "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n        requests_per_unit: 5\n",
			[]string{"f.yaml:6: invalid YAML: mapping values are not allowed in this context"}},
		{"list item out of line, line 7", "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n   - key: b\n",
			[]string{"f.yaml:7: invalid YAML: did not find expected '-' indicator"}},
		{"tab, line 6", "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n\trequests_per_unit: 5\n",
			[]string{"f.yaml:6: invalid YAML: found a tab character"}},
		{"second document, line 8", "domain: a\n---\ndomain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n     requests_per_unit: 5\n",
			[]string{"f.yaml:8: invalid YAML: did not find expected key"}},
		{"not a mapping", "- a\n- b\n", []string{"f.yaml:1:1: a rules document must be a mapping, got a list"}},
		{"no domain", "descriptors: []\n", []string{"f.yaml:1:1: missing domain"}},
		{"unknown key", "domain: a\ndescriptor: []\n", []string{`f.yaml:2:1: unknown key "descriptor" in a rules document`}},
		{"duplicate key", "domain: a\ndomain: b\n", []string{`f.yaml:2:1: duplicate key "domain" in a rules document (first at line 1)`}},
		{"empty key", "domain: a\ndescriptors:\n  - value: v\n", []string{"f.yaml:3:5: descriptor has no key"}},
		{"duplicate descriptor", "domain: a\ndescriptors:\n  - key: k\n  - key: j\n  - key: k\n",
			[]string{`f.yaml:5:5: duplicate descriptor "k" (first at line 3)`}},
		{"bad unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{`f.yaml:4:24: unknown unit "fortnight"`}},
		{"missing unit and rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {name: x}\n",
			[]string{"f.yaml:4:5: missing unit", "f.yaml:4:5: missing requests_per_unit"}},
		{"negative rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{"f.yaml:4:51: requests_per_unit must be between 0 and"}},
		{"rpu not a number", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: ten}\n",
			[]string{`f.yaml:4:51: requests_per_unit must be an integer, got "ten"`}},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"f.yaml:4:41: unit must not be set when unlimited is true"}},
		{"bad algorithm", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
			[]string{`f.yaml:4:65: unknown algorithm "magic"`}},
		{"concurrency", "domain: a\nalgorithm: concurrency\n", []string{"f.yaml:2:12: algorithm concurrency cannot be used in rules"}},
		{"bad mode and policy", "domain: a\nmode: eventual\npolicy: open\n",
			[]string{`f.yaml:2:7: unknown mode "eventual"`, `f.yaml:3:9: unknown policy "open"`}},
		{"bucket validation", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: smooth_warming_up\n",
			[]string{"f.yaml:4:5: warm_up: smooth_warming_up needs a warm-up period of at least 1µs"}},
		{"max_burst_seconds zero", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_bursty, max_burst_seconds: 0}\n",
			[]string{`f.yaml:4:99: max_burst_seconds must be positive, got 0 (leave it out for the default)`}},
		{"max_burst_seconds not a number", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_bursty, max_burst_seconds: lots}\n",
			[]string{`f.yaml:4:99: max_burst_seconds must be a number, got "lots"`}},
		{"max_burst_seconds infinite", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_bursty, max_burst_seconds: .inf}\n",
			[]string{`f.yaml:4:99: max_burst_seconds must be a number, got ".inf"`}},
		{"max_burst_seconds with burst", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_bursty, burst: 2, max_burst_seconds: 2}\n",
			[]string{`f.yaml:4:109: max_burst_seconds: set burst or max_burst_seconds, not both`}},
		{"cold_factor on another algorithm", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, cold_factor: 2}\n",
			[]string{`f.yaml:4:67: cold_factor: applies to smooth_warming_up only, not fixed_window`}},
		{"max_burst_seconds not in thousandths", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_bursty, max_burst_seconds: 0.0005}\n",
			[]string{`f.yaml:4:99: max_burst_seconds: must be a multiple of 0.001, got 0.0005`}},
		{"cold_factor below 1", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: smooth_warming_up, warm_up: 1s, cold_factor: 0.5}\n",
			[]string{`f.yaml:4:110: cold_factor: must be at least 1, got 0.5`}},
		{"sliding log too long", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 2000000\n      algorithm: sliding_log\n",
			[]string{"f.yaml:6:26: requests_per_unit: sliding_log keeps one timestamp per permit"}},
		{"bad bool", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n",
			[]string{`f.yaml:4:18: shadow_mode must be true or false, got "yes please"`}},
		{"bad duration", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, max_wait: soon}\n",
			[]string{`f.yaml:4:64: max_wait must be a non-negative duration`}},
		{"replaces itself", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unlimited: true, replaces: [{name: n}]}\n",
			[]string{`f.yaml:4:55: rule "n" replaces itself`}},
		{"descriptors not a list", "domain: a\ndescriptors: {key: k}\n", []string{"f.yaml:2:14: descriptors must be a list, got a mapping"}},
		{"duplicate domain", "domain: a\n---\ndomain: a\n", []string{`f.yaml:3:9: duplicate domain "a" (first defined at f.yaml:1)`}},
		{"period overflow", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 4000000, requests_per_unit: 1}\n",
			[]string{"f.yaml:4:47: unit_multiplier 4000000 makes the period longer than"}},
		{"several errors in line order", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: sec, requests_per_unit: 1}\n  - key: j\n    bogus: 1\n",
			[]string{`f.yaml:4:24: unknown unit "sec"`, `f.yaml:6:5: unknown key "bogus" in a descriptor`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse accepted the rules: %v", s.names)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want ErrorList", err)
			}
			if len(list) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(list), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(list[i].Error(), w) {
					t.Errorf("error %d = %q, want prefix %q", i, list[i].Error(), w)
				}
			}
		})
	}
}

func TestParseEmptyAndMultiDocument(t *testing.T) {
	tests := []struct {
		src     string
		domains []string
	}{
		{"", nil},
		{"# only a comment\n", nil},
		{"---\n---\n", nil},
		{"domain: a\n", []string{"a"}},
		{"domain: a\ndescriptors:\n", []string{"a"}},
		{"domain: b\n---\ndomain: a\n", []string{"a", "b"}},
	}
	for _, tt := range tests {
		s := mustParse(t, tt.src)
		if got := s.Domains(); !slices.Equal(got, tt.domains) {
			t.Errorf("%q: domains %v, want %v", tt.src, got, tt.domains)
		}
	}
}

func TestParseAliasesResolvedAndBombRejected(t *testing.T) {
	s := mustParse(t, `
domain: a
descriptors:
  - key: k1
    rate_limit: &std {unit: second, requests_per_unit: 7}
  - key: k2
    rate_limit: *std
`)
	if r, ok := s.Lookup("a/k2"); !ok || r.RequestsPerUnit != 7 {
		t.Errorf("alias not followed: %+v %v", r, ok)
	}
	var b strings.Builder
	b.WriteString("domain: a\nx0: &x0 [{key: k}]\n")
	for i := 1; i < 30; i++ {
		b.WriteString("x" + strconv.Itoa(i) + ": &x" + strconv.Itoa(i) + " [{key: k, descriptors: *x" + strconv.Itoa(i-1) + "}, {key: j, descriptors: *x" + strconv.Itoa(i-1) + "}]\n")
	}
	// Only domain and descriptors are allowed at the root, so the bomb is
	// reached through descriptors.
	src := strings.Replace(b.String(), "x29:", "descriptors:", 1)
	_, err := buildBudget([]file{{name: "bomb.yaml", data: []byte(src)}}, 10000)
	if err == nil || !strings.Contains(err.Error(), "too many YAML nodes") {
		t.Fatalf("alias bomb: got %v, want too many YAML nodes", err)
	}
}

func FuzzParse(f *testing.F) {
	data, _ := os.ReadFile("testdata/lyft.yaml")
	f.Add(data)
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Parse("fuzz.yaml", src)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		for _, r := range s.All() {
			if !r.Unlimited && !r.DeniesAll() {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("rule %s has an invalid limit: %v", r.Name, err)
				}
			}
		}
	})
}
