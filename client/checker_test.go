package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/middleware"
)

// A Checker is what package middleware checks requests through.
var _ middleware.Checker = client.Checker{}

func TestCheckerAgainstANode(t *testing.T) {
	node, stop := startNode()
	t.Cleanup(stop)
	c := newClient(t, []string{node.GRPCAddr()})
	k := client.Checker{C: c}

	limit := bucket.Limit{Algorithm: bucket.FixedWindow, Limit: 2, Period: time.Hour}
	req := check.Request{Key: api.Key("checker", "alice"), Hits: 1, Limit: limit, Mode: check.ModeOwner}
	bad := check.Request{Key: "no separator", Hits: 1, Limit: limit}
	invalid := check.Request{Key: api.Key("checker", "bob"), Hits: 1, Limit: bucket.Limit{Algorithm: bucket.FixedWindow, Period: time.Hour}}

	got, err := k.Check(t.Context(), []check.Request{req, bad, req, invalid, req})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		allowed   bool
		remaining int64
		err       error
	}{
		{true, 1, nil},
		{false, 0, client.ErrBadKey},
		{true, 0, nil},
		{false, 0, &client.ItemError{}},
		{false, 0, nil},
	} {
		g := got[i]
		switch {
		case want.err == nil && g.Err != nil:
			t.Errorf("response %d: unexpected error %v", i, g.Err)
		case errors.Is(want.err, client.ErrBadKey) && !errors.Is(g.Err, client.ErrBadKey):
			t.Errorf("response %d: err %v, want ErrBadKey", i, g.Err)
		case want.err != nil && !errors.Is(want.err, client.ErrBadKey):
			var ie *client.ItemError
			if !errors.As(g.Err, &ie) {
				t.Errorf("response %d: err %v, want an *ItemError", i, g.Err)
			}
		case g.Allowed != want.allowed || g.Remaining != want.remaining:
			t.Errorf("response %d: allowed %v remaining %d, want %v %d", i, g.Allowed, g.Remaining, want.allowed, want.remaining)
		}
		if g.Err == nil && (g.Owner != "node-a" || g.Mode != check.ModeOwner || g.Limit != 2 || g.ResetAt.IsZero()) {
			t.Errorf("response %d: %+v, want owner node-a, mode owner, limit 2, a reset time", i, g)
		}
	}
	if got[4].RetryAfter <= 0 {
		t.Errorf("over the limit with RetryAfter %v, want > 0", got[4].RetryAfter)
	}

	// Nothing to send: no call.
	if got, err := k.Check(t.Context(), []check.Request{bad}); err != nil || !errors.Is(got[0].Err, client.ErrBadKey) {
		t.Errorf("only a bad key: %+v, %v", got, err)
	}
}
