package ringlimit

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestZeroAlgorithmIsTokenBucket: through the Go API, a limit with no
// Algorithm (bucket.Limit{Limit: 3, Period: time.Minute}) is the token
// bucket, as an unset algorithm is on the wire, in every mode; and it is the
// same bucket as an explicit TokenBucket's for the key. Before, every such
// request was answered with "algorithm: unknown algorithm 0".
func TestZeroAlgorithmIsTokenBucket(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	for _, mode := range []check.Mode{check.ModeLocal, check.ModeOwner, check.ModeCached, check.ModeLeased} {
		key := api.Key("zero", mode.String())
		req := check.Request{Key: key, Hits: 1, Limit: bucket.Limit{Limit: 3, Period: time.Minute}, Mode: mode}
		explicit := req
		explicit.Limit.Algorithm = bucket.TokenBucket
		for i, r := range []check.Request{req, req, explicit, req} {
			resps, err := n.Checker().Check(t.Context(), []check.Request{r})
			if err != nil {
				t.Fatal(err)
			}
			got := resps[0]
			if want := i < 3; got.Err != nil || got.Allowed != want {
				t.Errorf("%v: check %d (algorithm %v): allowed %v, err %v; want allowed %v, no error", mode, i, r.Limit.Algorithm, got.Allowed, got.Err, want)
			}
		}
	}
}

// TestConcurrencyLeaseIsDecidedByTheOwner pins what docs/api.md says of an
// answer's mode: a concurrency item that names a lease holder (acquire, or
// release) is decided by the key's owner in cached and leased mode, since
// only the owner knows who holds which permit, and its answer says mode
// owner; without a lease, or in local mode, it is decided in the mode asked
// for.
func TestConcurrencyLeaseIsDecidedByTheOwner(t *testing.T) {
	n := startNode(t, testConfig("solo"))
	waitMembers(t, []*Node{n}, []string{"solo"})
	for _, tc := range []struct{ extra, mode, wantMode string }{
		{`"lease":"w1",`, "cached", "owner"},
		{`"lease":"w1","release":true,`, "cached", "owner"},
		{`"lease":"w1",`, "leased", "owner"},
		{``, "cached", "cached"},
		{`"lease":"w1",`, "local", "local"}, // local mode keeps its own permits
	} {
		body := `{"items":[{` + tc.extra + `"name":"conc","unique_key":"k","limit":2,"period":"1m","algorithm":"concurrency","mode":"` + tc.mode + `"}]}`
		code, b := post(t, n, "application/json", []byte(body))
		var got api.JSONCheckResponse
		if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil || len(got.Items) != 1 {
			t.Fatalf("%s: HTTP %d %s (%v)", body, code, b, err)
		}
		if r := got.Items[0]; r.Status == check.StatusError.String() || r.Mode != tc.wantMode {
			t.Errorf("%s: status %s (%s), mode %q; want mode %q", body, r.Status, r.Error, r.Mode, tc.wantMode)
		}
	}
}
