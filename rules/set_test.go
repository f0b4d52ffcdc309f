package rules

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// e builds entries from "key=value" pairs.
func e(pairs ...string) []Entry {
	out := make([]Entry, len(pairs))
	for i, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		out[i] = Entry{Key: k, Value: v}
	}
	return out
}

func TestMatchLyftSemantics(t *testing.T) {
	s := lyftExamples(t)
	extra := mustParse(t, `
domain: nest
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: y
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: d
        rate_limit: {unit: second, requests_per_unit: 4}
  - key: w
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5}
`)
	tests := []struct {
		step    string
		set     *Set
		domain  string
		entries []Entry
		want    string // rule name, "" for no rule
	}{
		{"exact value", s, "mongo_cps", e("database=users"), "mongo_cps/database=users"},
		{"unknown value, no key-only rule", s, "mongo_cps", e("database=orders"), ""},
		{"unknown domain", s, "nope", e("database=users"), ""},
		{"no entries", s, "mongo_cps", nil, ""},
		{"key-only rule, any value", s, "edge_proxy_per_ip", e("remote_address=10.0.0.1"), "edge_proxy_per_ip/remote_address"},
		{"exact preferred to key-only", s, "edge_proxy_per_ip", e("remote_address=50.0.0.5"), "edge_proxy_per_ip/remote_address=50.0.0.5"},
		{"key-only matches an empty value", s, "edge_proxy_per_ip", e("remote_address="), "edge_proxy_per_ip/remote_address"},
		{"nested", s, "messaging", e("message_type=marketing", "to_number=2061111111"), "messaging/message_type=marketing/to_number"},
		{"placeholder has no rule", s, "messaging", e("message_type=marketing"), ""},
		{"top-level key-only", s, "messaging", e("to_number=2061111111"), "messaging/to_number"},
		{"more entries than the rule's depth", s, "messaging", e("to_number=1", "x=y"), ""},
		{"example4: depth must match", s, "example4", e("key=value"), ""},
		{"example4: two levels", s, "example4", e("key=value", "subkey=subvalue"), "example4/key=value/subkey"},
		{"unlimited rule still matches", s, "internal", e("ldap=anything"), "internal/ldap"},
		{"wildcard prefix", s, "example9", e("key1=value_1"), "example9/key1=value*"},
		{"longest wildcard prefix first", s, "example9", e("key1=valu"), "example9/key1=val*"},
		{"wildcard prefix must match", s, "example9", e("key1=other"), ""},
		{"wildcard key must match", s, "example9", e("key2=value_1"), ""},
		{"keys are case-sensitive", s, "mongo_cps", e("Database=users"), ""},
		{"exact parent, exact child", extra, "nest", e("a=x", "b=y"), "nest/a=x/b=y"},
		{"no backtracking to the key-only parent", extra, "nest", e("a=x", "b=z"), ""},
		{"key-only parent", extra, "nest", e("a=q", "b=z"), "nest/a/b"},
		{"rule with nested rules, own depth", extra, "nest", e("c=1"), "nest/c"},
		{"rule with nested rules, nested depth", extra, "nest", e("c=1", "d=2"), "nest/c/d"},
		{"star alone matches any value", extra, "nest", e("w=anything"), "nest/w=*"},
		{"star alone matches the empty value", extra, "nest", e("w="), "nest/w=*"},
	}
	for _, tt := range tests {
		r, ok := tt.set.Match(tt.domain, tt.entries)
		got := ""
		if ok {
			got = r.Name
		}
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("%s: Match(%q, %v) = %q, %v; want %q", tt.step, tt.domain, tt.entries, got, ok, tt.want)
		}
	}
}

func TestNilSetIsEmpty(t *testing.T) {
	var s *Set
	if _, ok := s.Match("a", e("k=v")); ok {
		t.Error("nil Set matched")
	}
	if _, ok := s.Lookup("a/k"); ok || s.Len() != 0 || s.All() != nil || s.Domains() != nil || s.HasDomain("a") {
		t.Error("nil Set is not empty")
	}
	if c := (&Set{}).Diff(s); !c.Empty() {
		t.Errorf("Diff of empty sets: %+v", c)
	}
}

func TestRuleNameAndDescriptorKeyAreUnambiguous(t *testing.T) {
	tests := []struct {
		domain string
		path   []Step
		want   string
	}{
		{"edge", []Step{{Key: "remote_address"}}, "edge/remote_address"},
		{"edge", []Step{{Key: "path", Value: "/a=b"}, {Key: "user"}}, "edge/path=%2Fa%3Db/user"},
		{"a/b", []Step{{Key: "k%", Value: "v\x00"}}, "a%2Fb/k%25=v%00"},
	}
	for _, tt := range tests {
		if got := RuleName(tt.domain, tt.path); got != tt.want {
			t.Errorf("RuleName(%q, %v) = %q, want %q", tt.domain, tt.path, got, tt.want)
		}
	}
	// Pairs that a naive join would confuse.
	keys := map[string]bool{}
	for _, c := range []struct {
		domain  string
		entries []Entry
	}{
		{"a", e("k=v/x=y")},
		{"a", e("k=v", "x=y")},
		{"a/k=v", e("x=y")},
		{"a", e("k=v=x")},
		{"a", e("k=v", "x=")},
		{"a", e("k=v")},
	} {
		k := DescriptorKey(c.domain, c.entries)
		if keys[k] {
			t.Errorf("DescriptorKey(%q, %v) = %q collides", c.domain, c.entries, k)
		}
		keys[k] = true
		if k[0] != 0 || strings.Count(k, "\x00") != 1 {
			t.Errorf("DescriptorKey %q must start with the only NUL byte", k)
		}
	}
}

func TestDiff(t *testing.T) {
	old := mustParse(t, `
domain: a
descriptors:
  - key: same
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: changed
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: removed
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	cur := mustParse(t, `
domain: a
descriptors:
  # comments and order do not matter
  - key: changed
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: same
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: added
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	got := cur.Diff(old)
	want := Changes{Added: []string{"a/added"}, Removed: []string{"a/removed"}, Changed: []string{"a/changed"}}
	if !slices.Equal(got.Added, want.Added) || !slices.Equal(got.Removed, want.Removed) || !slices.Equal(got.Changed, want.Changed) {
		t.Errorf("Diff = %+v, want %+v", got, want)
	}
	if c := cur.Diff(cur); !c.Empty() {
		t.Errorf("Diff with itself = %+v", c)
	}
}

func TestOverride(t *testing.T) {
	s := mustParse(t, "domain: a\nalgorithm: gcra\nmode: owner\n")
	r, err := s.Override("a", e("k=v"), 7, UnitMinute, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := bucket.Limit{Algorithm: bucket.GCRA, Limit: 7, Period: 2 * time.Minute}
	if r.Limit != want || r.Mode.String() != "owner" || r.Name != "a/k=v" {
		t.Errorf("Override = %+v, want limit %+v mode owner name a/k=v", r, want)
	}
	if r, err := s.Override("a", e("k=v"), 0, UnitSecond, 0); err != nil || !r.DeniesAll() {
		t.Errorf("zero override: %+v, %v; want a rule that denies all", r, err)
	}
	if _, err := s.Override("b", e("k=v"), 1, UnitSecond, 1); !errors.Is(err, ErrUnknownDomain) {
		t.Errorf("unknown domain: %v", err)
	}
	if _, err := s.Override("a", e("k=v"), 1, Unit(0), 1); !errors.Is(err, ErrInvalidOverride) {
		t.Errorf("invalid unit: %v", err)
	}
}

func TestUnits(t *testing.T) {
	for _, u := range []Unit{UnitSecond, UnitMinute, UnitHour, UnitDay, UnitWeek, UnitMonth, UnitYear} {
		got, ok := ParseUnit(strings.ToUpper(u.String()))
		if !ok || got != u || u.Duration() <= 0 {
			t.Errorf("unit %v: ParseUnit(upper) = %v, %v; Duration %v", u, got, ok, u.Duration())
		}
	}
	if UnitMonth.Duration() != 30*24*time.Hour || UnitYear.Duration() != 365*24*time.Hour {
		t.Error("month and year must count as Lyft does: 30 and 365 days")
	}
	if _, ok := ParseUnit(""); ok {
		t.Error("empty unit parsed")
	}
}

func BenchmarkMatch(b *testing.B) {
	data, err := os.ReadFile("testdata/lyft.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Parse("lyft.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	nested := e("message_type=marketing", "to_number=2061111111")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := s.Match("messaging", nested); !ok {
				b.Fatal("no match")
			}
		}
	})
}

func BenchmarkDescriptorKey(b *testing.B) {
	entries := e("message_type=marketing", "to_number=2061111111")
	b.ReportAllocs()
	for b.Loop() {
		_ = DescriptorKey("messaging", entries)
	}
}
