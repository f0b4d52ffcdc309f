package api

import (
	"errors"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/rules"
)

// errDecidedByRule marks an item answered by its rule alone (unlimited, or
// denying all): decide does not send it, and applyRuleAnswers writes its
// answer.
var errDecidedByRule = errors.New("api: decided by the rule")

// ruleAnswer is what naming a rule changes in the answer to one item.
type ruleAnswer struct {
	idx    int
	preset *check.Response // the answer, for a rule that needs no bucket
	shadow bool            // a shadow_mode rule: report over-limit answers as allowed
}

// resolveRules applies the rule named by each item that names one (see
// item.applyRule) and returns what the answers need afterwards (nil when
// no item names a rule). An item whose name is a rule's name is checked
// against that rule's bucket with the rule's limit, whatever limit it sets
// (a check cannot reconfigure the bucket of an nginx or Envoy rule). With
// rulesOnly, an item that names no rule is answered with an error.
func (s *Server) resolveRules(items []item, rulesOnly bool) []ruleAnswer {
	var out []ruleAnswer
	set, haveRules := s.cfg.Rules() // one version of the rules for the whole call
	for i := range items {
		it := &items[i]
		if it.rule == "" && it.name != "" && haveRules {
			if _, ok := set.Lookup(it.name); ok {
				it.rule, it.name = it.name, ""
				it.limit, it.period, it.burst, it.algorithm = 0, 0, 0, 0
				it.maxWait, it.minGap, it.countRejected, it.warmUp = 0, 0, false, 0
			}
		}
		if it.rule == "" {
			if rulesOnly && it.err == nil {
				it.err = fieldErr("rule", "this listener takes only checks that name a rule (rules only): the limit is not the caller's to choose")
			}
			continue
		}
		if a := items[i].applyRule(set, haveRules, s.cfg.MaxKeyLen); a.preset != nil || a.shadow {
			a.idx = i
			out = append(out, a)
		}
	}
	return out
}

// applyRuleAnswers writes the answers of rules into out.
func applyRuleAnswers(ans []ruleAnswer, out []check.Response) {
	for _, a := range ans {
		switch r := &out[a.idx]; {
		case a.preset != nil:
			*r = *a.preset
		case a.shadow && r.Err == nil:
			r.Allowed = true
		}
	}
}

// limitField returns the name of the first limit field it sets, or "".
func (it *item) limitField() string {
	switch {
	case it.limit != 0:
		return "limit"
	case it.period != 0:
		return "period"
	case it.burst != 0:
		return "burst"
	case it.algorithm != 0:
		return "algorithm"
	case it.maxWait != 0:
		return "max_wait"
	case it.minGap != 0:
		return "min_gap"
	case it.countRejected:
		return "count_rejected"
	case it.warmUp != 0:
		return "warm_up"
	case it.maxBurstSeconds != 0:
		return "max_burst_seconds"
	case it.coldFactor != 0:
		return "cold_factor"
	}
	return ""
}

// applyRule fills in the limit of an item that names a rule of set, or
// records why it cannot in it.err. The item must not also set a limit
// field or a name (an error naming the field, not an override: a check that
// asks for two limits at once is a mistake); its mode and policy, when set,
// override the rule's. The bucket is (rule name, unique_key), the one the
// middleware and the nginx endpoint use for the same rule. A rule that
// admits or denies everything needs no bucket: its answer is returned as
// the preset. haveRules tells an empty set from no rules file, for the
// message.
func (it *item) applyRule(set *rules.Set, haveRules bool, maxKeyLen int) ruleAnswer {
	if it.err != nil {
		return ruleAnswer{}
	}
	if f := it.limitField(); f != "" {
		it.err = fieldErr(f, "must not be set with rule: the rule %q sets the limit", it.rule)
		return ruleAnswer{}
	}
	if it.name != "" {
		it.err = fieldErr("name", "must be empty with rule: the bucket is (rule, unique_key)")
		return ruleAnswer{}
	}
	r, ok := set.Lookup(it.rule)
	switch {
	case !ok && !haveRules:
		it.err = fieldErr("rule", "unknown rule %q: the node has no rules file (--rules)", it.rule)
		return ruleAnswer{}
	case !ok:
		it.err = fieldErr("rule", "unknown rule %q", it.rule)
		return ruleAnswer{}
	}
	it.name, it.ruleBucket = r.Name, true
	if it.mode == 0 {
		it.mode = int64(r.Mode)
	}
	if it.policy == 0 {
		it.policy = int64(r.Policy)
	}
	if r.Unlimited || r.DeniesAll() {
		// Validate the rest of the item as a checked one would be.
		probe := *it
		probe.limit, probe.period, probe.algorithm = 1, time.Second, int64(bucket.TokenBucket)
		if _, err := probe.request(maxKeyLen); err != nil {
			it.err = err
			return ruleAnswer{}
		}
		it.err = errDecidedByRule
		it.algorithm = int64(bucket.TokenBucket) // for the metrics' label
		preset := &check.Response{Mode: check.Mode(it.mode)}
		if r.Unlimited {
			preset.Allowed, preset.Remaining = true, math.MaxInt64
		} else {
			preset.RetryAfter = bucket.MaxRetry
		}
		return ruleAnswer{preset: preset}
	}
	l := r.Limit
	it.limit, it.period, it.burst, it.algorithm = l.Limit, l.Period, l.Burst, int64(l.Algorithm)
	it.maxWait, it.minGap, it.countRejected, it.warmUp = l.MaxWait, l.MinGap, l.CountRejected, l.WarmUp
	it.maxBurstSeconds, it.coldFactor = float64(l.MaxBurstMillis)/1000, float64(l.ColdFactorMilli)/1000
	return ruleAnswer{shadow: r.Shadow}
}
