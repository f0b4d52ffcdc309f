package rules

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// deref follows aliases and counts visited nodes; it returns nil when the
// budget is spent.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	p.budget--
	if p.budget == -1 {
		p.errorf(n, "too many YAML nodes (aliases expanded)")
	}
	if p.budget < 0 {
		return nil
	}
	return n
}

// keyPrefix marks, in the map that fields returns, the key node of a field:
// f[keyPrefix+"unit"] is the node of the word unit, f["unit"] its value.
const keyPrefix = "\x00"

// fields returns the values of mapping n by key, and the key nodes under
// keyPrefix+key, after checking that n is a mapping whose keys are allowed
// and unique.
func (p *parser) fields(n *yaml.Node, what string, allowed []string) (map[string]*yaml.Node, bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, got %s", what, kindName(n))
		return nil, false
	}
	out := make(map[string]*yaml.Node, len(n.Content))
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.deref(n.Content[i]), p.deref(n.Content[i+1])
		if k == nil || v == nil {
			return nil, false
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s has a key that is not a string", what)
			continue
		}
		if reason, ok := refusedKeys[k.Value]; ok {
			p.errorf(k, "%s is not supported: %s", k.Value, reason)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			if where, ok := lyftKeys[k.Value]; ok {
				p.errorf(k, "key %q does nothing in %s: Lyft's service reads it only in %s (and ignores it here)", k.Value, what, where)
			} else {
				p.errorf(k, "unknown key %q in %s (want one of %s)", k.Value, what, strings.Join(allowed, ", "))
			}
			continue
		}
		if first, dup := lines[k.Value]; dup {
			p.errorf(k, "duplicate key %q in %s (first at line %d)", k.Value, what, first)
			continue
		}
		out[k.Value], out[keyPrefix+k.Value], lines[k.Value] = v, k, k.Line
	}
	return out, true
}

// str returns the string at f[key], "" when absent.
func (p *parser) str(f map[string]*yaml.Node, key string) string {
	n := f[key]
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, "%s must be a string, got %s", key, kindName(n))
		return ""
	}
	return n.Value
}

// flag returns the boolean at f[key], false when absent.
func (p *parser) flag(f map[string]*yaml.Node, key string) bool {
	n := f[key]
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n, "%s must be true or false, got %s", key, kindName(n))
		return false
	}
	return b
}

// integer returns the integer at f[key] in [lo, hi], and whether it is
// present.
func (p *parser) integer(f map[string]*yaml.Node, key string, lo, hi int64) (int64, bool) {
	n := f[key]
	if n == nil {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s must be an integer, got %s", key, kindName(n))
		return 0, true
	}
	if v < lo || v > hi {
		p.errorf(n, "%s must be between %d and %d, got %d", key, lo, hi, v)
	}
	return v, true
}

// positive returns the finite, positive number at f[key] (an integer or a
// decimal: 2, 2.5), zero when absent: the key's default, which an explicit
// 0 may not spell.
func (p *parser) positive(f map[string]*yaml.Node, key string) float64 {
	n := f[key]
	if n == nil {
		return 0
	}
	var v float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil ||
		math.IsNaN(v) || math.IsInf(v, 0) {
		p.errorf(n, "%s must be a number, got %s", key, kindName(n))
		return 0
	}
	if v <= 0 {
		p.errorf(n, "%s must be positive, got %s (leave it out for the default)", key, n.Value)
		return 0
	}
	return v
}

// duration returns the duration at f[key] ("250ms", "2s"), zero when absent.
func (p *parser) duration(f map[string]*yaml.Node, key string) time.Duration {
	s := p.str(f, key)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.errorf(f[key], "%s must be a non-negative duration such as 250ms or 2s, got %q", key, s)
		return 0
	}
	return d
}

// kindName names the kind of n for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}
