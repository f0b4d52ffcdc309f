package client

import (
	"context"
	"errors"
	"strings"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// ErrBadKey is the Err of a Response to a Request whose Key is not a
// bucket key: the limit's name, a NUL byte, the client's key.
var ErrBadKey = errors.New("client: key is not name NUL unique_key")

// Checker adapts a Client to the batch form of the coordination core, the
// one package middleware's Checker takes:
//
//	mw, err := middleware.RateLimit(client.Checker{C: c}, opts)
//
// Each Request's Key is split at its first NUL byte into the item's name and
// key (api.Key joins them so), and each answer comes back as a
// Response. It is safe for concurrent use, as the Client is.
type Checker struct {
	// C is the client that carries the calls.
	C *Client
}

// Check decides reqs in one call. A Request whose Key has no NUL byte is
// answered with ErrBadKey without being sent; an item the node could not
// decide is answered with its *ItemError. The error is the call's, as for
// Client.Check.
func (k Checker) Check(ctx context.Context, reqs []check.Request) ([]check.Response, error) {
	out := make([]check.Response, len(reqs))
	items := make([]Item, 0, len(reqs))
	idx := make([]int, 0, len(reqs)) // idx[j] is the request of items[j]
	for i := range reqs {
		r := &reqs[i]
		name, key, ok := strings.Cut(r.Key, "\x00")
		if !ok {
			out[i] = check.Response{Err: ErrBadKey}
			continue
		}
		items = append(items, Item{
			Name: name, Key: key, Hits: r.Hits, Peek: r.Hits == 0,
			Limit: r.Limit.Limit, Period: r.Limit.Period, Burst: r.Limit.Burst,
			Algorithm: r.Limit.Algorithm, Mode: r.Mode, Policy: r.Policy,
			MaxWait: r.Limit.MaxWait, MinGap: r.Limit.MinGap, CountRejected: r.Limit.CountRejected,
			WarmUp: r.Limit.WarmUp, Lease: r.Lease, Release: r.Release,
			MaxBurstSeconds: float64(r.Limit.MaxBurstMillis) / 1000, ColdFactor: float64(r.Limit.ColdFactorMilli) / 1000,
		})
		idx = append(idx, i)
	}
	if len(items) == 0 {
		return out, nil
	}
	res, err := k.C.Check(ctx, items...)
	if err != nil {
		return nil, err
	}
	for j, r := range res {
		out[idx[j]] = check.Response{
			Decision: bucket.Decision{
				Allowed: r.Allowed(), Limit: r.Limit, Remaining: r.Remaining,
				ResetAt: r.ResetAt, RetryAfter: r.RetryAfter, Wait: r.Wait,
			},
			Owner: r.Owner, Mode: r.Mode, Degraded: r.Degraded, Err: r.Err,
		}
	}
	return out, nil
}
