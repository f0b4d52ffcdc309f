package check_test

import (
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// TestValuesMatchTheWire pins the numeric values of the vocabulary to the
// wire's enumerations: the public APIs convert between them without a table.
func TestValuesMatchTheWire(t *testing.T) {
	modes := map[check.Mode]ringlimitv1.Mode{
		check.ModeDefault: ringlimitv1.Mode_MODE_DEFAULT, check.ModeLocal: ringlimitv1.Mode_MODE_LOCAL,
		check.ModeOwner: ringlimitv1.Mode_MODE_OWNER, check.ModeCached: ringlimitv1.Mode_MODE_CACHED,
		check.ModeLeased: ringlimitv1.Mode_MODE_LEASED,
	}
	for m, w := range modes {
		if int32(m) != int32(w) {
			t.Errorf("mode %v is %d; the wire's %v is %d", m, m, w, w)
		}
	}
	policies := map[check.Policy]ringlimitv1.Policy{
		check.PolicyDefault: ringlimitv1.Policy_POLICY_DEFAULT, check.PolicyFailOpen: ringlimitv1.Policy_POLICY_FAIL_OPEN,
		check.PolicyFailClosed: ringlimitv1.Policy_POLICY_FAIL_CLOSED, check.PolicyLocalShare: ringlimitv1.Policy_POLICY_LOCAL_SHARE,
	}
	for p, w := range policies {
		if int32(p) != int32(w) {
			t.Errorf("policy %v is %d; the wire's %v is %d", p, p, w, w)
		}
	}
	statuses := map[check.Status]ringlimitv1.Status{
		check.StatusUnspecified: ringlimitv1.Status_STATUS_UNSPECIFIED, check.StatusUnderLimit: ringlimitv1.Status_STATUS_UNDER_LIMIT,
		check.StatusOverLimit: ringlimitv1.Status_STATUS_OVER_LIMIT, check.StatusError: ringlimitv1.Status_STATUS_ERROR,
	}
	for s, w := range statuses {
		if int32(s) != int32(w) {
			t.Errorf("status %v is %d; the wire's %v is %d", s, s, w, w)
		}
	}
	if len(modes) != len(ringlimitv1.Mode_name) || len(policies) != len(ringlimitv1.Policy_name) || len(statuses) != len(ringlimitv1.Status_name) {
		t.Errorf("the wire has %d modes, %d policies, %d statuses; check has %d, %d, %d",
			len(ringlimitv1.Mode_name), len(ringlimitv1.Policy_name), len(ringlimitv1.Status_name), len(modes), len(policies), len(statuses))
	}
	// The zero algorithm is the token bucket on the wire and in bucket.
	if int32(ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET) != int32(bucket.TokenBucket) {
		t.Errorf("token bucket: wire %d, bucket %d", ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, bucket.TokenBucket)
	}
	if got := (bucket.Limit{Limit: 3, Period: 60e9}).WithDefaults().Algorithm; got != bucket.TokenBucket {
		t.Errorf("the zero algorithm is %v; want token_bucket", got)
	}
}

// TestParseRoundTrips checks that every name parses back to its value, that
// "" and "default" are the defaults, and that an unknown name is an error
// that lists the valid ones.
func TestParseRoundTrips(t *testing.T) {
	for m := check.ModeDefault; m.Valid(); m++ {
		if got, err := check.ParseMode(m.String()); got != m || err != nil {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for p := check.PolicyDefault; p.Valid(); p++ {
		if got, err := check.ParsePolicy(p.String()); got != p || err != nil {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	if m, err := check.ParseMode(""); m != check.ModeDefault || err != nil {
		t.Errorf(`ParseMode("") = %v, %v`, m, err)
	}
	_, err := check.ParseMode("bogus")
	if !errors.Is(err, check.ErrUnknownMode) || err.Error() != `check: unknown mode "bogus" (want local, owner, cached, leased)` {
		t.Errorf("ParseMode(bogus): %v", err)
	}
	_, err = check.ParsePolicy("open")
	if !errors.Is(err, check.ErrUnknownPolicy) || err.Error() != `check: unknown partition policy "open" (want fail-open, fail-closed, local-share)` {
		t.Errorf("ParsePolicy(open): %v", err)
	}
	if s := check.Mode(9).String(); s != "mode(9)" {
		t.Errorf("Mode(9) = %q", s)
	}
}

// TestResponseStatus: an error is never a success, and a decision's
// Allowed picks under or over the limit.
func TestResponseStatus(t *testing.T) {
	for _, c := range []struct {
		r    check.Response
		want check.Status
	}{
		{check.Response{Decision: bucket.Decision{Allowed: true}}, check.StatusUnderLimit},
		{check.Response{}, check.StatusOverLimit},
		{check.Response{Decision: bucket.Decision{Allowed: true}, Err: check.ErrKeyTooLong}, check.StatusError},
	} {
		if got := c.r.Status(); got != c.want {
			t.Errorf("%+v: status %v; want %v", c.r, got, c.want)
		}
	}
}
