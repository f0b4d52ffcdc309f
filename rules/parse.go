package rules

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// Limits on the input, so that a hostile or broken file cannot exhaust
// memory or the stack.
const (
	// maxErrors is the most problems reported for one load.
	maxErrors = 50
	// maxDepth is the deepest nesting of descriptors accepted.
	maxDepth = 32
	// maxNodes bounds the YAML nodes visited, aliases expanded (a guard
	// against alias bombs).
	maxNodes = 1 << 20
)

// file is one rules file: its name for messages and its content.
type file struct {
	name string
	data []byte
}

// The keys accepted in each context. Lyft's keys first, then ringlimit's
// extensions.
var (
	domainKeys     = []string{"domain", "descriptors", "algorithm", "mode", "policy", "count_rejected"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "share_threshold"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"unit_multiplier", "algorithm", "burst", "mode", "policy", "max_wait", "min_gap", "warm_up", "count_rejected",
		"max_burst_seconds", "cold_factor"}
	replacesKeys = []string{"name"}
)

// refusedKeys are the keys of Lyft's format that ringlimit refuses, with the
// reason. Lyft's service reads each of them in a descriptor; none changes
// which requests it admits or what it answers in the statuses.
var refusedKeys = map[string]string{
	"detailed_metric": "it only renames the statistics Lyft's service keeps per descriptor, " +
		"which ringlimit does not keep (its metrics are per node); remove it",
	"value_to_metric": "it only renames the statistics Lyft's service keeps per descriptor, " +
		"which ringlimit does not keep (its metrics are per node); remove it",
	"metadata": "Lyft's service sends it only in the response's dynamic metadata " +
		"(RESPONSE_DYNAMIC_METADATA), which ringlimit does not send; remove it",
}

// lyftKeys are the keys Lyft's service accepts anywhere in a file (it checks
// every key against one list, whatever its place), with where it reads
// them: elsewhere it ignores them, and ringlimit refuses them.
var lyftKeys = map[string]string{
	"domain": "a document", "descriptors": "a document or a descriptor",
	"key": "a descriptor", "value": "a descriptor", "rate_limit": "a descriptor",
	"shadow_mode": "a descriptor", "quota_mode": "a descriptor", "share_threshold": "a descriptor",
	"detailed_metric": "a descriptor", "value_to_metric": "a descriptor", "metadata": "a descriptor",
	"unit": "rate_limit", "requests_per_unit": "rate_limit", "unlimited": "rate_limit",
	"name": "rate_limit or a replaces entry", "replaces": "rate_limit",
}

// Parse returns the rules of one file named name (the name is only used in
// messages). The file holds one domain, or several as separate YAML
// documents. An invalid file yields an ErrorList naming every problem found
// (up to 50) by file and line.
func Parse(name string, data []byte) (*Set, error) {
	return build([]file{{name: name, data: data}})
}

// build parses files into one Set; every domain must be defined once.
func build(files []file) (*Set, error) { return buildBudget(files, maxNodes) }

// buildBudget is build visiting at most budget YAML nodes.
func buildBudget(files []file, budget int) (*Set, error) {
	s := &Set{domains: map[string]*domain{}, byName: map[string]*Rule{}}
	p := &parser{set: s, budget: budget}
	for _, f := range files {
		p.file = f.name
		p.parseFile(f.data)
	}
	if len(p.errs) > 0 {
		order := make(map[string]int, len(files))
		for i, f := range files {
			order[f.name] = i
		}
		slices.SortStableFunc(p.errs, func(a, b *ParseError) int {
			return cmp.Or(cmp.Compare(order[a.File], order[b.File]), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		if p.dropped > 0 {
			p.errs = append(p.errs, &ParseError{File: p.file, Msg: fmt.Sprintf("too many errors: %d more not shown", p.dropped)})
		}
		return nil, p.errs
	}
	for name := range s.byName {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	return s, nil
}

// parser holds the state of one build.
type parser struct {
	set     *Set
	file    string
	errs    ErrorList
	dropped int
	budget  int // YAML nodes still to visit
}

// errorf records a problem at n (nil: the whole file).
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	e := &ParseError{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

// parseFile parses every YAML document of the current file as a domain.
func (p *parser) parseFile(data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			p.syntaxError(err, data)
			return
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := p.deref(doc.Content[0])
		if root == nil || root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue
		}
		p.parseDomain(root)
	}
}

// syntaxError records a YAML syntax error of data, at the line that breaks
// it. yaml.v3 names some errors by the line where the enclosing block
// starts: a line 6 indented wrongly was "line 2: did not find expected
// key". The line at fault is the first at which data, cut after it, fails
// with the same error (syntaxLine).
func (p *parser) syntaxError(err error, data []byte) {
	line, msg := splitSyntaxError(err)
	if line > 0 {
		if at := syntaxLine(data, line, msg); at != line {
			msg = fmt.Sprintf("%s (check this line's indentation against the block that starts at line %d)", msg, line)
			line = at
		}
	}
	p.errorf(&yaml.Node{Line: line}, "invalid YAML: %s", msg)
}

// splitSyntaxError returns the line of a yaml.v3 syntax error, when its
// message has one ("yaml: line 3: ..."; 0 otherwise), and the rest of the
// message. yaml.v3 has no error type that carries the line.
func splitSyntaxError(err error) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
		_, msg, _ = strings.Cut(msg, ": ")
	}
	return line, msg
}

// maxSyntaxLines bounds the lines searched for a syntax error's line (each
// step of the search decodes the file once more).
const maxSyntaxLines = 100_000

// syntaxLine returns the first line n from `from` on such that the first n
// lines of data fail to decode with msg, the error of the whole of data; or
// from if there is none. An error stops yaml.v3 at its first problem, and a
// cut taken before the problem decodes or fails otherwise (a block cut
// short is still YAML), so a binary search finds the line.
func syntaxLine(data []byte, from int, msg string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxLines || from > len(lines) {
		return from
	}
	fails := func(n int) bool {
		dec := yaml.NewDecoder(bytes.NewReader(bytes.Join(lines[:n], nil)))
		for {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if err == nil {
				continue
			}
			_, m := splitSyntaxError(err)
			return !errors.Is(err, io.EOF) && m == msg
		}
	}
	lo, hi := from, len(lines)
	if !fails(hi) {
		return from
	}
	for lo < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// defaults reads the algorithm, mode, policy and count_rejected of f, each
// falling back to base.
func (p *parser) defaults(f map[string]*yaml.Node, base defaults) defaults {
	out := base
	if f["count_rejected"] != nil {
		out.countRejected = p.flag(f, "count_rejected")
		out.countRejectedAt = f[keyPrefix+"count_rejected"]
	}
	if s := p.str(f, "algorithm"); s != "" {
		a, err := bucket.ParseAlgorithm(s)
		switch {
		case err != nil:
			p.errorf(f["algorithm"], "unknown algorithm %q (want one of %s)", s, algorithmList())
		case a == bucket.Concurrency:
			p.errorf(f["algorithm"], "algorithm concurrency cannot be used in rules: its permits need a release")
		default:
			out.algorithm = a
		}
	}
	if s := p.str(f, "mode"); s != "" {
		m, err := check.ParseMode(s)
		if err != nil {
			p.errorf(f["mode"], "unknown mode %q (want local, owner, cached or leased)", s)
		}
		out.mode = m
	}
	if s := p.str(f, "policy"); s != "" {
		pol, err := check.ParsePolicy(s)
		if err != nil {
			p.errorf(f["policy"], "unknown policy %q (want fail-open, fail-closed or local-share)", s)
		}
		out.policy = pol
	}
	return out
}

// parseDomain parses one document: a domain and its descriptors.
func (p *parser) parseDomain(root *yaml.Node) {
	f, ok := p.fields(root, "a rules document", domainKeys)
	if !ok {
		return
	}
	name := p.str(f, "domain")
	if name == "" {
		p.errorf(root, "missing domain: every rules document needs a non-empty domain")
		return
	}
	d := &domain{name: name, file: p.file, line: f["domain"].Line,
		defaults: p.defaults(f, defaults{algorithm: DefaultAlgorithm})}
	if df := d.defaults; df.countRejected && !countsRejected(df.algorithm) {
		p.errorf(df.countRejectedAt, "count_rejected applies to fixed_window and sliding_log, not to the domain's algorithm %v", df.algorithm)
	}
	if prev, dup := p.set.domains[name]; dup {
		p.errorf(f["domain"], "duplicate domain %q (first defined at %s:%d)", name, prev.file, prev.line)
		return
	}
	p.set.domains[name] = d
	if ds := f["descriptors"]; ds != nil {
		p.descriptors(d, &d.root, nil, nil, ds)
	}
}

// descriptors parses a list of descriptors into l; path is the path of the
// enclosing descriptor, shared its share_threshold flags (nil when none).
func (p *parser) descriptors(d *domain, l *level, path []Step, shared []bool, seq *yaml.Node) {
	if seq.Kind == yaml.ScalarNode && seq.Tag == "!!null" {
		return
	}
	if seq.Kind != yaml.SequenceNode {
		p.errorf(seq, "descriptors must be a list, got %s", kindName(seq))
		return
	}
	if len(path) >= maxDepth {
		p.errorf(seq, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for _, item := range seq.Content {
		item = p.deref(item)
		if item == nil {
			return
		}
		f, ok := p.fields(item, "a descriptor", descriptorKeys)
		if !ok {
			continue
		}
		step := Step{Key: p.str(f, "key"), Value: p.str(f, "value")}
		if step.Key == "" {
			p.errorf(item, "descriptor has no key (key is required and must not be empty)")
			continue
		}
		if strings.Contains(step.Key, "*") {
			// Lyft's service would match it as a wildcard over "key_value",
			// catching other keys; a wildcard belongs in the value.
			p.errorf(f["key"], "key %q holds '*': keys match exactly; write the wildcard in value", step.Key)
			continue
		}
		n := &node{step: step}
		if first, ok := l.add(n, item.Line); !ok {
			p.errorf(item, "duplicate descriptor %s (first at line %d)", stepString(step), first)
			continue
		}
		full := append(slices.Clip(path), step)
		fl := flags{shadow: p.flag(f, "shadow_mode"), quota: p.flag(f, "quota_mode"), shared: shared}
		if p.flag(f, "share_threshold") {
			if !strings.Contains(step.Value, "*") {
				p.errorf(f["share_threshold"], "share_threshold needs a wildcard value (one holding '*'), got %s", stepString(step))
			}
			fl.shared = make([]bool, len(full))
			copy(fl.shared, shared)
			fl.shared[len(path)] = true
		} else if shared != nil {
			fl.shared = append(slices.Clip(shared), false)
		}
		rl := f["rate_limit"]
		for _, flag := range []struct {
			key string
			set bool
		}{{"shadow_mode", fl.shadow}, {"quota_mode", fl.quota}} {
			if rl == nil && flag.set {
				p.errorf(f[keyPrefix+flag.key], "%s without a rate_limit in the same descriptor does nothing (Lyft's service ignores it too); remove it or add the rate_limit", flag.key)
			}
		}
		if rl != nil {
			n.rule = p.rateLimit(d, full, f[keyPrefix+"rate_limit"], rl, fl)
		}
		if ds := f["descriptors"]; ds != nil {
			p.descriptors(d, &n.children, full, fl.shared, ds)
		}
	}
}

// flags are a descriptor's flags of Lyft's format that its rule takes.
type flags struct {
	shadow, quota bool
	shared        []bool // share_threshold along the path; nil when none
}

// rateLimit parses the rate_limit block n of the descriptor at path; at is
// the word rate_limit, where the rule is said to be.
func (p *parser) rateLimit(d *domain, path []Step, at, n *yaml.Node, fl flags) *Rule {
	f, ok := p.fields(n, "rate_limit", rateLimitKeys)
	if !ok {
		return nil
	}
	r := &Rule{Name: RuleName(d.name, path), Domain: d.name, Path: path, Shadow: fl.shadow,
		Quota: fl.quota, Label: p.str(f, "name"), File: p.file, Line: at.Line, Multiplier: 1}
	if slices.Contains(fl.shared, true) {
		r.Shared = fl.shared
	}
	p.replaces(r, f["replaces"])
	df := p.defaults(f, d.defaults)
	r.Mode, r.Policy = df.mode, df.policy
	if p.flag(f, "unlimited") {
		if f["unit"] != nil {
			p.errorf(f["unit"], "unit must not be set when unlimited is true")
		}
		r.Unlimited = true
		return p.register(r, at)
	}
	switch un := f["unit"]; {
	case un == nil:
		p.errorf(at, "missing unit (second, minute, hour, day, week, month or year)")
	default:
		s := p.str(f, "unit")
		if u, ok := ParseUnit(s); ok {
			r.Unit = u
		} else if un.Kind == yaml.ScalarNode && un.Tag != "!!null" {
			p.errorf(un, "unknown unit %q (want second, minute, hour, day, week, month or year)", s)
		}
	}
	rpu, ok := p.integer(f, "requests_per_unit", 0, bucket.MaxLimit)
	if !ok {
		p.errorf(at, "missing requests_per_unit (0 denies every request)")
	}
	r.RequestsPerUnit = rpu
	r.CountDenied = rpu == 0 && df.countRejected
	if m, ok := p.integer(f, "unit_multiplier", 1, math.MaxUint32); ok {
		r.Multiplier = uint32(max(m, 1))
	}
	if r.Unit.Valid() && time.Duration(r.Multiplier) > bucket.MaxPeriod/r.Unit.Duration() {
		p.errorf(f["unit_multiplier"], "unit_multiplier %d makes the period longer than %v", r.Multiplier, bucket.MaxPeriod)
		return nil
	}
	burst, _ := p.integer(f, "burst", 0, bucket.MaxLimit)
	lim := bucket.Limit{
		Algorithm: df.algorithm, Limit: r.RequestsPerUnit, Period: r.Period(), Burst: burst,
		MaxWait: p.duration(f, "max_wait"), MinGap: p.duration(f, "min_gap"),
		WarmUp: p.duration(f, "warm_up"), CountRejected: df.countRejected,
	}
	if lim.CountRejected && !countsRejected(lim.Algorithm) {
		p.errorf(cmp.Or(f[keyPrefix+"count_rejected"], df.countRejectedAt), "count_rejected applies to fixed_window and sliding_log, not to %v", lim.Algorithm)
		return nil
	}
	if err := lim.SetGuavaOptions(p.positive(f, "max_burst_seconds"), p.positive(f, "cold_factor")); err != nil {
		p.limitError(f, at, err)
		return nil
	}
	if r.RequestsPerUnit > 0 && r.Unit.Valid() {
		if err := lim.Validate(); err != nil {
			p.limitError(f, at, err)
			return nil
		}
		r.Limit = lim
	}
	return p.register(r, at)
}

// countsRejected reports whether the algorithm a can count rejected hits
// (Limit.CountRejected).
func countsRejected(a bucket.Algorithm) bool {
	return a == bucket.FixedWindow || a == bucket.SlidingLog
}

// limitError reports err, an error of bucket about the limit of the
// rate_limit block at at whose fields are f, at the key it names.
func (p *parser) limitError(f map[string]*yaml.Node, at *yaml.Node, err error) {
	var le *bucket.LimitError
	if errors.As(err, &le) {
		field := limitFields[le.Field]
		p.errorf(cmp.Or(f[field], at), "%s: %s", cmp.Or(field, le.Field), le.Reason)
	} else {
		p.errorf(at, "%v", err)
	}
}

// limitFields maps the fields of bucket.LimitError to the keys of a
// rate_limit block.
var limitFields = map[string]string{
	"algorithm": "algorithm", "limit": "requests_per_unit", "period": "unit", "burst": "burst",
	"max_wait": "max_wait", "min_gap": "min_gap", "warm_up": "warm_up",
	"max_burst_seconds": "max_burst_seconds", "cold_factor": "cold_factor",
}

// replaces parses Lyft's replaces list into r.
func (p *parser) replaces(r *Rule, n *yaml.Node) {
	if n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "replaces must be a list of {name: ...}, got %s", kindName(n))
		return
	}
	for _, item := range n.Content {
		item = p.deref(item)
		if item == nil {
			return
		}
		f, ok := p.fields(item, "a replaces entry", replacesKeys)
		if !ok {
			continue
		}
		name := p.str(f, "name")
		switch {
		case name == "":
			p.errorf(item, "replaces entry has an empty name")
		case name == r.Label:
			p.errorf(item, "rule %q replaces itself", name)
		default:
			r.Replaces = append(r.Replaces, name)
		}
	}
}

// register indexes r by name and returns it.
func (p *parser) register(r *Rule, at *yaml.Node) *Rule {
	if prev, dup := p.set.byName[r.Name]; dup {
		// Unreachable while RuleName is injective and paths are unique per
		// level; kept so that a future change cannot silently shadow a rule.
		p.errorf(at, "rule %q already defined at %s:%d", r.Name, prev.File, prev.Line)
		return nil
	}
	p.set.byName[r.Name] = r
	return r
}

// stepString returns a step as written: key, or key=value.
func stepString(s Step) string {
	if s.Value == "" {
		return fmt.Sprintf("%q", s.Key)
	}
	return fmt.Sprintf("%q=%q", s.Key, s.Value)
}

// algorithmList names the algorithms usable in rules.
func algorithmList() string {
	var names []string
	for _, a := range bucket.Algorithms() {
		if a != bucket.Concurrency {
			names = append(names, a.String())
		}
	}
	return strings.Join(names, ", ")
}
