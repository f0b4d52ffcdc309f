package api

import (
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// The JSON shape of POST /v1/check: the gRPC messages' fields, snake_case,
// with durations as Go duration strings ("500ms", "1m30s") and enumerations
// as names ("token_bucket", "owner", "fail-open"). See docs/api.md.

// JSONCheckRequest is the body of POST /v1/check.
type JSONCheckRequest struct {
	Items []JSONItem `json:"items"`
}

// JSONItem is one item; see CheckItem in ringlimit.proto.
type JSONItem struct {
	Name          string `json:"name"`
	UniqueKey     string `json:"unique_key"`
	Hits          *int64 `json:"hits"` // nil (absent, or null) counts 1
	Limit         int64  `json:"limit"`
	Period        string `json:"period"`
	Burst         int64  `json:"burst"`
	Algorithm     string `json:"algorithm"`
	Mode          string `json:"mode"`
	Policy        string `json:"policy"`
	MaxWait       string `json:"max_wait"`
	MinGap        string `json:"min_gap"`
	CountRejected bool   `json:"count_rejected"`
	WarmUp        string `json:"warm_up"`
	Lease         string `json:"lease"`
	Release       bool   `json:"release"`
	Rule          string `json:"rule"`
	// Guava's options; 0 (or absent) is the default.
	MaxBurstSeconds float64 `json:"max_burst_seconds"`
	ColdFactor      float64 `json:"cold_factor"`
}

// JSONCheckResponse is the answer of POST /v1/check.
type JSONCheckResponse struct {
	Items []JSONResult `json:"items"`
	Node  string       `json:"node"`
}

// JSONResult answers one item; see CheckResult in ringlimit.proto.
type JSONResult struct {
	Status     string     `json:"status"`
	Error      string     `json:"error,omitempty"`
	Limit      int64      `json:"limit"`
	Remaining  int64      `json:"remaining"`
	ResetTime  *time.Time `json:"reset_time,omitempty"`
	RetryAfter string     `json:"retry_after"`
	Wait       string     `json:"wait"`
	Owner      string     `json:"owner,omitempty"`
	Mode       string     `json:"mode,omitempty"`
	Degraded   bool       `json:"degraded,omitempty"`
	// Reconfigured: the check changed the limit of the key's bucket.
	Reconfigured bool `json:"reconfigured,omitempty"`
}

// JSONError is the body of every HTTP error answer.
type JSONError struct {
	Error string `json:"error"`
}

// The statuses as spelt in JSON.
const (
	statusUnderLimit = "under_limit"
	statusOverLimit  = "over_limit"
	statusError      = "error"
)

// fromJSON decodes one item; the first malformed duration or unknown name
// is recorded in item.err.
func fromJSON(j *JSONItem) item {
	it := item{
		name:          j.Name,
		uniqueKey:     j.UniqueKey,
		hits:          1, // absent counts 1; only an explicit 0 peeks
		limit:         j.Limit,
		burst:         j.Burst,
		countRejected: j.CountRejected,
		lease:         j.Lease,
		release:       j.Release,
		rule:          j.Rule,

		maxBurstSeconds: j.MaxBurstSeconds,
		coldFactor:      j.ColdFactor,
	}
	if j.Hits != nil {
		it.hits = *j.Hits
	}
	it.period, it.err = jsonDuration("period", j.Period, it.err)
	it.maxWait, it.err = jsonDuration("max_wait", j.MaxWait, it.err)
	it.minGap, it.err = jsonDuration("min_gap", j.MinGap, it.err)
	it.warmUp, it.err = jsonDuration("warm_up", j.WarmUp, it.err)
	if j.Algorithm != "" && it.err == nil {
		a, err := bucket.ParseAlgorithm(j.Algorithm)
		if err != nil {
			it.err = fieldErr("algorithm", "unknown algorithm %q (want %s)", j.Algorithm, algorithmNames())
		}
		it.algorithm = int64(a)
	}
	if it.err == nil {
		m, err := check.ParseMode(j.Mode)
		if err != nil {
			it.err = fieldErr("mode", "unknown mode %q (want local, owner, cached or leased)", j.Mode)
		}
		it.mode = int64(m)
	}
	if it.err == nil {
		p, err := check.ParsePolicy(j.Policy)
		if err != nil {
			it.err = fieldErr("policy", "unknown policy %q (want fail-open, fail-closed or local-share)", j.Policy)
		}
		it.policy = int64(p)
	}
	return it
}

// algorithmNames lists the algorithms' names as JSON spells them: "a, b, c".
func algorithmNames() string {
	var names []string
	for _, a := range bucket.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// jsonDuration parses a Go duration string ("" is zero), keeping the first
// error.
func jsonDuration(field, s string, prev error) (time.Duration, error) {
	if s == "" || prev != nil {
		return 0, prev
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fieldErr(field, "invalid duration %q (want a Go duration such as \"500ms\" or \"1m\")", s)
	}
	return d, nil
}

// toJSON encodes one answer. An error is never reported as under limit.
func toJSON(r *check.Response) JSONResult {
	res := JSONResult{Owner: r.Owner, RetryAfter: "0s", Wait: "0s"}
	if r.Mode != check.ModeDefault {
		res.Mode = r.Mode.String()
	}
	if r.Err != nil {
		res.Status = statusError
		res.Error = errorMessage(r.Err)
		return res
	}
	res.Status = statusOverLimit
	if r.Allowed {
		res.Status = statusUnderLimit
	}
	res.Limit, res.Remaining, res.Degraded, res.Reconfigured = r.Limit, r.Remaining, r.Degraded, r.Reconfigured
	if !r.ResetAt.IsZero() {
		t := r.ResetAt.UTC()
		res.ResetTime = &t
	}
	res.RetryAfter = r.RetryAfter.String()
	res.Wait = r.Wait.String()
	return res
}
