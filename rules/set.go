package rules

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// DefaultAlgorithm is the algorithm of a rule that names none, in a file
// that names no default: fixed windows aligned on multiples of the period
// since the Unix epoch, which is how Lyft's ratelimit service counts, so a
// Lyft configuration admits the same requests here.
const DefaultAlgorithm = bucket.FixedWindow

// Set is an immutable set of rules, indexed by domain and descriptor path
// and by name. A Set is safe for concurrent use. The zero Set is empty.
type Set struct {
	domains map[string]*domain
	byName  map[string]*Rule
	names   []string // sorted
}

// domain is the rules of one domain: a tree of descriptor levels.
type domain struct {
	name     string
	file     string
	line     int
	defaults defaults
	root     level
}

// defaults are a file's defaults for its rules (a ringlimit extension).
type defaults struct {
	algorithm       bucket.Algorithm
	mode            check.Mode
	policy          check.Policy
	countRejected   bool
	countRejectedAt *yaml.Node // where countRejected was set, for messages
}

// level is one level of descriptors under a domain or a descriptor.
type level struct {
	exact    map[Step]*node   // by key and value, wildcard values included (as written)
	wildcard []*node          // value holding '*', in file order
	any      map[string]*node // key only, by key
	lines    map[Step]int     // line of every node, by its step as written
	order    []*node          // in file order
}

// node is one descriptor of a rules file.
type node struct {
	step     Step
	parts    []string // the value split at '*' when it holds one (a wildcard)
	rule     *Rule    // nil for a placeholder that only holds nested descriptors
	children level
}

func (l *level) empty() bool { return len(l.order) == 0 }

// add inserts n, or returns the line of the descriptor with the same key and
// value already present.
func (l *level) add(n *node, line int) (int, bool) {
	if first, dup := l.lines[n.step]; dup {
		return first, false
	}
	if l.lines == nil {
		l.lines, l.exact, l.any = map[Step]int{}, map[Step]*node{}, map[string]*node{}
	}
	l.lines[n.step] = line
	l.order = append(l.order, n)
	switch v := n.step.Value; {
	case v == "":
		l.any[n.step.Key] = n
	default:
		l.exact[n.step] = n
		if strings.Contains(v, "*") {
			n.parts = strings.Split(v, "*")
			l.wildcard = append(l.wildcard, n)
		}
	}
	return 0, true
}

// find returns the node that e selects at this level, as Lyft's service
// selects it: the descriptor with the same key and value (as written, '*'
// included), else the first in file order whose wildcard value matches the
// entry's value, else the one with the key and no value.
func (l *level) find(e Entry) *node {
	if n := l.exact[Step(e)]; n != nil {
		return n
	}
	for _, n := range l.wildcard {
		if n.step.Key == e.Key && wildcardMatch(n.parts, e.Value) {
			return n
		}
	}
	return l.any[e.Key]
}

// wildcardMatch reports whether value matches the wildcard pattern split at
// its '*' into parts (strings.Split(pattern, "*")): each '*' stands for any
// run of bytes, empty included, and the literal parts must appear in order,
// the first at the start and the last at the end, without overlapping. This
// is the matching of Lyft's service (wildcardMatch in its
// src/config/config_impl.go): "foo*" matches every value starting with
// "foo", "bar*b" matches "barb" and "bar-b" but not "bar", and
// "foo*bar*baz" matches "foo-bar-baz" and "foobarbaz".
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Match returns the rule that applies to a descriptor of domain, with Lyft's
// semantics: entries are matched level by level, outermost first; at each
// level a descriptor with the same key and value is preferred to one whose
// wildcard value matches the entry's value (see [WildcardMatch]; the first
// such descriptor in file order), which is preferred to one with the key and
// no value; there is no
// backtracking; and a rule applies only when its depth equals the number of
// entries. It reports false when no rule applies (the descriptor is then not
// limited).
func (s *Set) Match(domainName string, entries []Entry) (*Rule, bool) {
	if s == nil || len(entries) == 0 {
		return nil, false
	}
	d := s.domains[domainName]
	if d == nil {
		return nil, false
	}
	l := &d.root
	for i, e := range entries {
		n := l.find(e)
		switch {
		case n == nil:
			return nil, false
		case i == len(entries)-1:
			return n.rule, n.rule != nil
		case n.children.empty():
			return nil, false
		}
		l = &n.children
	}
	return nil, false
}

// Lookup returns the rule named name (see [RuleName]), so that a check can
// name a rule instead of spelling out its limit.
func (s *Set) Lookup(name string) (*Rule, bool) {
	if s == nil {
		return nil, false
	}
	r, ok := s.byName[name]
	return r, ok
}

// HasDomain reports whether the set has a domain named name.
func (s *Set) HasDomain(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[name]
	return ok
}

// Domains returns the names of the set's domains, sorted.
func (s *Set) Domains() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.domains))
	for name := range s.domains {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// All returns the set's rules sorted by name.
func (s *Set) All() []*Rule {
	if s == nil {
		return nil
	}
	out := make([]*Rule, len(s.names))
	for i, name := range s.names {
		out[i] = s.byName[name]
	}
	return out
}

// Len returns the number of rules in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// Rules returns s itself, so that a fixed Set can be used wherever a source
// of the current rules (such as a [Store]) is expected.
func (s *Set) Rules() *Set { return s }

// Override returns the rule for a limit that Envoy sends with a descriptor
// (RateLimitDescriptor.limit), in place of the configured one: the domain's
// defaults with requestsPerUnit per multiplier units. Its name is built from
// the descriptor's entries. The domain must exist in the set (as Lyft's
// service requires); the error reports an unknown domain or an invalid
// limit.
func (s *Set) Override(domainName string, entries []Entry, requestsPerUnit int64, unit Unit, multiplier uint32) (*Rule, error) {
	if !s.HasDomain(domainName) {
		return nil, fmt.Errorf("%w %q", ErrUnknownDomain, domainName)
	}
	d := s.domains[domainName]
	path := make([]Step, len(entries))
	for i, e := range entries {
		path[i] = Step(e)
	}
	r := &Rule{
		Name: RuleName(domainName, path), Domain: domainName, Path: path,
		RequestsPerUnit: requestsPerUnit, Unit: unit, Multiplier: max(multiplier, 1),
		Mode: d.defaults.mode, Policy: d.defaults.policy,
	}
	if !unit.Valid() {
		return nil, fmt.Errorf("%w: unknown unit %d", ErrInvalidOverride, uint8(unit))
	}
	if requestsPerUnit < 0 {
		return nil, fmt.Errorf("%w: requests_per_unit %d is negative", ErrInvalidOverride, requestsPerUnit)
	}
	if requestsPerUnit == 0 {
		r.CountDenied = d.defaults.countRejected
		return r, nil
	}
	r.Limit = bucket.Limit{Algorithm: d.defaults.algorithm, Limit: requestsPerUnit, Period: r.Period(),
		CountRejected: d.defaults.countRejected}
	if err := r.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOverride, err)
	}
	return r, nil
}

// Changes lists the rule names that differ between two sets, each list
// sorted.
type Changes struct {
	// Added are the rules of the new set only.
	Added []string
	// Removed are the rules of the old set only.
	Removed []string
	// Changed are the rules of both whose limit, mode, policy or flags
	// differ. Their live buckets are reconfigured, not reset.
	Changed []string
}

// Empty reports whether no rule was added, removed or changed.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// Diff returns the changes from old to s. Either set may be nil (empty).
func (s *Set) Diff(old *Set) Changes {
	var c Changes
	for _, r := range s.All() {
		o, ok := old.Lookup(r.Name)
		switch {
		case !ok:
			c.Added = append(c.Added, r.Name)
		case !r.equal(o):
			c.Changed = append(c.Changed, r.Name)
		}
	}
	for _, o := range old.All() {
		if _, ok := s.Lookup(o.Name); !ok {
			c.Removed = append(c.Removed, o.Name)
		}
	}
	return c
}
