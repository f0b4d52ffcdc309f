package envoy

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/rules"
)

// headers returns the response headers of a decision: limit, remaining and
// reset (whole seconds, rounded up) of the limited descriptor with the least
// remaining, and, when over, retry-after: the longest wait among the
// descriptors over their limit (left out when one of them can never pass).
// over holds the responses of the descriptors over the limit, nil for rules
// that deny all.
func (s *Server) headers(statuses []*rlsv3.RateLimitResponse_DescriptorStatus, over []*check.Response) []*corev3.HeaderValue {
	var least *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range statuses {
		if st.CurrentLimit != nil && (least == nil || st.LimitRemaining < least.LimitRemaining) {
			least = st
		}
	}
	if least == nil {
		return nil
	}
	h := []*corev3.HeaderValue{
		{Key: s.cfg.LimitHeader, Value: strconv.FormatUint(uint64(least.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.cfg.RemainingHeader, Value: strconv.FormatUint(uint64(least.LimitRemaining), 10)},
		{Key: s.cfg.ResetHeader, Value: strconv.FormatInt(ceilSeconds(least.DurationUntilReset.AsDuration()), 10)},
	}
	if len(over) == 0 {
		return h
	}
	var wait time.Duration
	for _, r := range over {
		if r == nil || r.RetryAfter == bucket.MaxRetry {
			return h // never: no retry-after is better than a false one
		}
		wait = max(wait, r.RetryAfter)
	}
	return append(h, &corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(max(ceilSeconds(wait), 1), 10)})
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// unitToResponse maps a rule's unit to the unit of RateLimitResponse.
func unitToResponse(u rules.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case rules.UnitSecond:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case rules.UnitMinute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case rules.UnitHour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case rules.UnitDay:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case rules.UnitWeek:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case rules.UnitMonth:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case rules.UnitYear:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// unitFromType maps the unit of a descriptor's limit override.
func unitFromType(u typev3.RateLimitUnit) (rules.Unit, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return rules.UnitSecond, true
	case typev3.RateLimitUnit_MINUTE:
		return rules.UnitMinute, true
	case typev3.RateLimitUnit_HOUR:
		return rules.UnitHour, true
	case typev3.RateLimitUnit_DAY:
		return rules.UnitDay, true
	case typev3.RateLimitUnit_MONTH:
		return rules.UnitMonth, true
	case typev3.RateLimitUnit_YEAR:
		return rules.UnitYear, true
	}
	return 0, false
}
