package rules

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/bucket"
)

// naiveWildcard is the reference for wildcardMatch: the pattern as a
// regular expression, each '*' any run of bytes.
func naiveWildcard(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`).MatchString(value)
}

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true},
		{"foo*", "foo1", true},
		{"foo*", "fo", false},
		{"bar*b", "barb", true},
		{"bar*b", "barab", true},
		{"bar*b", "bar", false},
		{"bar*b", "barbx", false},
		{"foo*bar*baz", "foobarbaz", true},
		{"foo*bar*baz", "foo-bar-baz", true},
		{"foo*bar*baz", "foobaz", false},
		{"foo*bar*baz", "foo-baz-bar", false},
		{"a*a", "a", false}, // the first and last parts must not overlap
		{"a*a", "aa", true},
		{"*", "", true},
		{"**", "x", true},
		{"*x*", "yxy", true},
		{"ab*ab*ab", "abab", false},
		{"ab*ab*ab", "ababab", true},
	}
	for _, tt := range tests {
		if got := wildcardMatch(strings.Split(tt.pattern, "*"), tt.value); got != tt.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
		if got := naiveWildcard(tt.pattern, tt.value); got != tt.want {
			t.Errorf("reference(%q, %q) = %v, want %v: the table is wrong", tt.pattern, tt.value, got, tt.want)
		}
	}
}

// FuzzWildcardMatch compares wildcardMatch with the regular expression of
// the same pattern.
func FuzzWildcardMatch(f *testing.F) {
	f.Add("foo*bar*baz", "foo-bar-baz")
	f.Add("a*a", "a")
	f.Add("*ab*", "xaby")
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if len(pattern) > 64 || len(value) > 256 || !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return // the reference, a regexp, reads UTF-8
		}
		if got, want := wildcardMatch(strings.Split(pattern, "*"), value), naiveWildcard(pattern, value); got != want {
			t.Fatalf("wildcardMatch(%q, %q) = %v, reference %v", pattern, value, got, want)
		}
	})
}

func TestMatchMiddleWildcards(t *testing.T) {
	s := mustParse(t, `
domain: w
descriptors:
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: first
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: first
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: first
    value: ab*c
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: n
    value: x*
    descriptors:
      - key: m
        value: "*y*"
        rate_limit: {unit: minute, requests_per_unit: 4}
`)
	tests := []struct {
		entries string
		want    string // rule name, "" for none
	}{
		{"mid=barab", "w/mid=bar*b"},
		{"mid=barb", "w/mid=bar*b"},
		{"mid=bar*b", "w/mid=bar*b"},
		{"mid=bar", ""},
		{"mid=barbx", ""},
		{"multi=foo1bar2baz", "w/multi=foo*bar*baz"},
		{"multi=foobaz", ""},
		{"first=abc", "w/first=a*"},    // the first in file order, not the longest
		{"first=ab*c", "w/first=ab*c"}, // but a value equal to the pattern is an exact match
		{"n=x1,m=zyz", "w/n=x*/m=*y*"},
		{"n=x1,m=zz", ""},
	}
	for _, tt := range tests {
		var es []Entry
		for _, p := range strings.Split(tt.entries, ",") {
			k, v, _ := strings.Cut(p, "=")
			es = append(es, Entry{k, v})
		}
		r, ok := s.Match("w", es)
		got := ""
		if ok {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("Match(%s) = %q, want %q", tt.entries, got, tt.want)
		}
	}
}

func TestParseLyftKeys(t *testing.T) {
	s := mustParse(t, `
domain: k
count_rejected: true
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: files
    value: "*.pdf"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, count_rejected: false}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
`)
	if z, _ := s.Lookup("k/zero"); !z.CountDenied {
		t.Error("k/zero: a rule of 0 does not count the hits it refuses under the domain's count_rejected")
	}
	q, _ := s.Lookup("k/q")
	if !q.Quota || !q.Limit.CountRejected || q.Limit.Algorithm != bucket.FixedWindow {
		t.Errorf("k/q: Quota %v CountRejected %v, want true true", q.Quota, q.Limit.CountRejected)
	}
	u, _ := s.Lookup("k/files=*.pdf/user")
	if len(u.Shared) != 2 || !u.Shared[0] || u.Shared[1] {
		t.Errorf("k/files=*.pdf/user: Shared %v, want [true false]", u.Shared)
	}
	a := u.BucketKey("k", []Entry{{"files", "a.pdf"}, {"user", "u1"}})
	b := u.BucketKey("k", []Entry{{"files", "b.pdf"}, {"user", "u1"}})
	c := u.BucketKey("k", []Entry{{"files", "b.pdf"}, {"user", "u2"}})
	if a != b || a == c {
		t.Errorf("shared bucket keys: a.pdf/u1 %q, b.pdf/u1 %q, b.pdf/u2 %q: want the first two equal, the third apart", a, b, c)
	}
	if l, _ := s.Lookup("k/log"); !l.Limit.CountRejected {
		t.Error("k/log: the domain's count_rejected does not reach sliding_log")
	}
	if l, _ := s.Lookup("k/tb"); l.Limit.CountRejected {
		t.Error("k/tb: count_rejected: false does not override the domain's")
	}
	q2, _ := s.Override("k", []Entry{{"x", "y"}}, 5, UnitSecond, 1)
	if !q2.Limit.CountRejected {
		t.Error("an override does not take the domain's count_rejected")
	}
	if z, _ := s.Override("k", []Entry{{"x", "y"}}, 0, UnitSecond, 1); !z.DeniesAll() || !z.CountDenied {
		t.Error("an override of 0 does not count the hits it refuses under the domain's count_rejected")
	}
	if z, _ := mustParse(t, "domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n").Lookup("z/k"); z.CountDenied {
		t.Error("a rule of 0 counts without count_rejected")
	}
}

func TestParseLyftKeysRefused(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"detailed_metric", "domain: a\ndescriptors:\n  - key: k\n    detailed_metric: true\n",
			`f.yaml:4:5: detailed_metric is not supported: it only renames the statistics Lyft's service keeps per descriptor`},
		{"value_to_metric", "domain: a\ndescriptors:\n  - key: k\n    value_to_metric: true\n",
			`f.yaml:4:5: value_to_metric is not supported: it only renames`},
		{"metadata", "domain: a\ndescriptors:\n  - key: k\n    metadata: {a: 1}\n",
			`f.yaml:4:5: metadata is not supported: Lyft's service sends it only in the response's dynamic metadata`},
		{"a Lyft key in the wrong place", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n",
			`f.yaml:4:54: key "shadow_mode" does nothing in rate_limit: Lyft's service reads it only in a descriptor (and ignores it here)`},
		{"share_threshold without a wildcard", "domain: a\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			`f.yaml:5:22: share_threshold needs a wildcard value (one holding '*'), got "k"="v"`},
		{"a wildcard in a key", "domain: a\ndescriptors:\n  - key: k*\n",
			`f.yaml:3:10: key "k*" holds '*': keys match exactly; write the wildcard in value`},
		{"shadow_mode without rate_limit", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n",
			`f.yaml:4:5: shadow_mode without a rate_limit in the same descriptor does nothing`},
		{"quota_mode without rate_limit", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			`f.yaml:4:5: quota_mode without a rate_limit in the same descriptor does nothing`},
		{"count_rejected on token_bucket", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, count_rejected: true}\n",
			`f.yaml:4:79: count_rejected applies to fixed_window and sliding_log, not to token_bucket`},
		{"a domain's count_rejected reaching token_bucket", "domain: a\ncount_rejected: true\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n",
			`f.yaml:2:1: count_rejected applies to fixed_window and sliding_log, not to gcra`},
		{"count_rejected with the domain's token_bucket", "domain: a\nalgorithm: token_bucket\ncount_rejected: true\n",
			`f.yaml:3:1: count_rejected applies to fixed_window and sliding_log, not to the domain's algorithm token_bucket`},
	}
	for _, tt := range tests {
		_, err := Parse("f.yaml", []byte(tt.src))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: error %v\nwant prefix %s", tt.name, err, tt.want)
		}
	}
}
