package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"
)

// step is one call of a sequence: at is its time since the sequence's
// start.
type step struct {
	at  time.Duration
	req *rlsv3.RateLimitRequest
}

// sequence is a run of calls that starts with every counter fresh.
type sequence struct {
	name  string
	steps []step
}

// ydesc and yroot read the descriptor tree of a config file, to derive
// requests from it.
type ydesc struct {
	Key       string `yaml:"key"`
	Value     string `yaml:"value"`
	RateLimit *struct {
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	} `yaml:"rate_limit"`
	Descriptors []ydesc `yaml:"descriptors"`
}

type yroot struct {
	Domain      string  `yaml:"domain"`
	Descriptors []ydesc `yaml:"descriptors"`
}

// target is a descriptor derived from a config file, with the
// requests_per_unit of the descriptor it was derived from (0 without one).
type target struct {
	entries []*rlv3.RateLimitDescriptor_Entry
	rpu     uint32
}

// readTree returns the domains of a config file; a file that is not YAML
// gives none.
func readTree(content []byte) []yroot {
	var out []yroot
	dec := yaml.NewDecoder(bytes.NewReader(content))
	for {
		var r yroot
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			return out
		}
		out = append(out, r)
	}
}

// candidates returns values to send for a descriptor's value: for a
// key-only descriptor two values; for a wildcard values it matches (the
// '*' empty and not) and one it does not; for an exact value the value and
// another.
func candidates(v string) []string {
	switch {
	case v == "":
		return []string{"u1", "u2"}
	case strings.Contains(v, "*"):
		return []string{strings.ReplaceAll(v, "*", ""), strings.ReplaceAll(v, "*", "-x-"), "q" + strings.ReplaceAll(v, "*", "") + "q"}
	default:
		return []string{v, v + "q"}
	}
}

// targets derives descriptors from a descriptor tree: every level, with
// the candidate values, at most max of them, then a few one level too deep.
func targets(ds []ydesc, max int) []target {
	var out []target
	seen := map[string]bool{}
	var walk func(prefix []*rlv3.RateLimitDescriptor_Entry, ds []ydesc, depth int)
	walk = func(prefix []*rlv3.RateLimitDescriptor_Entry, ds []ydesc, depth int) {
		for _, d := range ds {
			for _, v := range candidates(d.Value) {
				if len(out) >= max {
					return
				}
				es := append(append([]*rlv3.RateLimitDescriptor_Entry(nil), prefix...), &rlv3.RateLimitDescriptor_Entry{Key: d.Key, Value: v})
				var rpu uint32
				if d.RateLimit != nil {
					rpu = d.RateLimit.RequestsPerUnit
				}
				if k := entriesString(es); !seen[k] {
					seen[k] = true
					out = append(out, target{es, rpu})
				}
				if depth < 4 {
					walk(es, d.Descriptors, depth+1)
				}
			}
		}
	}
	walk(nil, ds, 0)
	for i := 0; i < 3 && i < len(out); i++ {
		es := append(append([]*rlv3.RateLimitDescriptor_Entry(nil), out[i].entries...), &rlv3.RateLimitDescriptor_Entry{Key: "extra", Value: "1"})
		out = append(out, target{es, out[i].rpu})
	}
	return out
}

// extraTargets returns the descriptors a file names in comments of the
// form "# conformance: k=v,k=v", for cases its tree does not give.
func extraTargets(content []byte) []target {
	var out []target
	for _, line := range strings.Split(string(content), "\n") {
		spec, ok := strings.CutPrefix(line, "# conformance: ")
		if !ok {
			continue
		}
		var es []*rlv3.RateLimitDescriptor_Entry
		for _, p := range strings.Split(spec, ",") {
			k, v, _ := strings.Cut(p, "=")
			es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		out = append(out, target{es, 3})
	}
	return out
}

// entriesString renders entries as k=v,k=v.
func entriesString(es []*rlv3.RateLimitDescriptor_Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.GetKey() + "=" + e.GetValue()
	}
	return strings.Join(parts, ",")
}

func descriptor(es []*rlv3.RateLimitDescriptor_Entry) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: es}
}

func request(domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// sequences returns the calls sent for one config file: for each derived
// descriptor, a run that crosses its limit with single hits and with
// hits_addend (request and descriptor), peeks, and moves to the next second,
// minute and hour; then all descriptors in one request; then requests
// whose answer does not depend on the file's rules.
func sequences(content []byte, short bool) []sequence {
	max := 40
	if short {
		max = 12
	}
	var out []sequence
	domain := "unknown"
	for _, r := range readTree(content) {
		if r.Domain != "" {
			domain = r.Domain
		}
		ts := append(targets(r.Descriptors, max), extraTargets(content)...)
		for _, tg := range ts {
			d := func() *rlv3.RateLimitDescriptor { return descriptor(tg.entries) }
			peek := func() *rlv3.RateLimitDescriptor {
				x := d()
				x.HitsAddend = wrapperspb.UInt64(0)
				return x
			}
			s := sequence{name: r.Domain + " " + entriesString(tg.entries), steps: []step{
				{0, request(r.Domain, 0, d())},
				{10 * time.Millisecond, request(r.Domain, max32(tg.rpu, 3)-2, d())},
				{20 * time.Millisecond, request(r.Domain, 1, d())},
				{30 * time.Millisecond, request(r.Domain, 1, d())},
				{40 * time.Millisecond, request(r.Domain, 1, d())},
				{50 * time.Millisecond, request(r.Domain, 1, peek())},
				{60 * time.Millisecond, request(r.Domain, tg.rpu+5, d())},
				{70 * time.Millisecond, request(r.Domain, 1, d())},
				{time.Second, request(r.Domain, 1, d())},
				{time.Second + 10*time.Millisecond, request(r.Domain, 1, peek())},
			}}
			if !short {
				s.steps = append(s.steps,
					step{61 * time.Second, request(r.Domain, 1, d())},
					step{time.Hour + time.Second, request(r.Domain, 1, d())})
			}
			out = append(out, s)
		}
		if len(ts) > 0 {
			n := 200
			if short {
				n = 50
			}
			out = append(out, randomSequence(r.Domain, ts, n, 1))
		}
		if len(ts) > 1 {
			var all []*rlv3.RateLimitDescriptor
			for i := 0; i < len(ts) && i < 20; i++ {
				all = append(all, descriptor(ts[i].entries))
			}
			s := sequence{name: r.Domain + " all descriptors in one request"}
			for i := range 3 {
				s.steps = append(s.steps, step{time.Duration(i) * 10 * time.Millisecond, request(r.Domain, 0, all...)})
			}
			s.steps = append(s.steps, step{30 * time.Millisecond, request(r.Domain, 2, all...)})
			out = append(out, s)
		}
	}
	return append(out, probes(domain))
}

// randomSequence returns n requests over the targets of a file, drawn from
// a seeded source: 1 to 3 descriptors each (the same one twice at times),
// request and descriptor hits_addend from 0 to the limit and beyond, the
// clock moving on by 0 to 700 ms between requests.
func randomSequence(domain string, ts []target, n int, seed uint64) sequence {
	rng := rand.New(rand.NewPCG(seed, 0))
	s := sequence{name: domain + " random"}
	var at time.Duration
	for range n {
		var ds []*rlv3.RateLimitDescriptor
		for range 1 + rng.IntN(3) {
			tg := ts[rng.IntN(len(ts))]
			d := descriptor(tg.entries)
			if rng.IntN(4) == 0 {
				d.HitsAddend = wrapperspb.UInt64(uint64(rng.IntN(int(tg.rpu) + 3)))
			}
			ds = append(ds, d)
		}
		s.steps = append(s.steps, step{at, request(domain, uint32(rng.IntN(4)), ds...)})
		at += time.Duration(rng.IntN(8)) * 100 * time.Millisecond
	}
	return s
}

// probes are requests whose answer does not depend on the rules: malformed
// ones, an unknown domain, limits sent by Envoy.
func probes(domain string) sequence {
	e := func(pairs ...string) []*rlv3.RateLimitDescriptor_Entry {
		var es []*rlv3.RateLimitDescriptor_Entry
		for _, p := range pairs {
			k, v, _ := strings.Cut(p, "=")
			es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		return es
	}
	override := func(rpu uint32, mult uint32) *rlv3.RateLimitDescriptor {
		d := descriptor(e("probe=override"))
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_SECOND}
		if mult > 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return d
	}
	negative := descriptor(e("probe=negative"))
	negative.IsNegativeHits = true
	var many []*rlv3.RateLimitDescriptor
	for i := range 65 {
		many = append(many, descriptor(e(fmt.Sprintf("probe=%d", i))))
	}
	return sequence{name: "probes", steps: []step{
		{0, request("no-such-domain", 0, descriptor(e("k=v")))},
		{0, request("", 0, descriptor(e("k=v")))},
		{0, request(domain, 0)},
		{0, request(domain, 0, &rlv3.RateLimitDescriptor{})},
		{0, request(domain, 0, descriptor(e("=v")))},
		{0, request(domain, 0, override(2, 0))},
		{0, request(domain, 0, override(2, 0))},
		{0, request(domain, 0, override(2, 0))},
		{0, request(domain, 0, override(2, 3))},
		{0, request(domain, 0, negative)},
		{0, request(domain, 0, many...)},
	}}
}

func max32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}
