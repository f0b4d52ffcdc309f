package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gubernator "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// conns is one client connection per node of a system; calls go to the
// nodes round robin.
type conns struct {
	cc   []*grpc.ClientConn
	next atomic.Uint64
}

// dial connects to every address (lazily, as gRPC does).
func dial(addrs []string) (*conns, error) {
	c := &conns{}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("compare: dial %s: %w", a, err)
		}
		c.cc = append(c.cc, cc)
	}
	return c, nil
}

// pick returns the next connection, round robin.
func (c *conns) pick() *grpc.ClientConn {
	return c.cc[int(c.next.Add(1)%uint64(len(c.cc)))]
}

func (c *conns) close() {
	for _, cc := range c.cc {
		cc.Close()
	}
}

// workload is what every call of a load run asks: items per call, keys
// drawn uniformly from keys distinct ones, each limited to limit hits per
// period.
type workload struct {
	name   string // limit name: unique per run, so every run starts on fresh buckets
	items  int
	keys   int
	limit  int64
	period time.Duration
}

// keyOf returns the unique key of index i.
func keyOf(i int) string { return "k" + strconv.Itoa(i) }

// ringlimitCaller returns a caller of ringlimit.v1.RateLimiter/Check (a
// ringlimit node, or the baseline server) in mode.
func ringlimitCaller(c *conns, wl workload, mode ringlimitv1.Mode, seed uint64) caller {
	rng := rand.New(rand.NewPCG(seed, 1))
	period := durationpb.New(wl.period)
	req := &ringlimitv1.CheckRequest{Items: make([]*ringlimitv1.CheckItem, wl.items)}
	for i := range req.Items {
		req.Items[i] = &ringlimitv1.CheckItem{Name: wl.name, Hits: proto.Int64(1), Limit: wl.limit, Period: period,
			Algorithm: ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Mode: mode}
	}
	return func(ctx context.Context) (outcome, error) {
		for _, it := range req.Items {
			it.UniqueKey = keyOf(rng.IntN(wl.keys))
		}
		resp, err := ringlimitv1.NewRateLimiterClient(c.pick()).Check(ctx, req)
		if err != nil {
			return outcome{}, err
		}
		return ringlimitOutcome(resp), nil
	}
}

// ringlimitOutcome counts the decisions of resp. An item decided by the
// partition policy (degraded) is counted apart: the limiter did not decide
// it.
func ringlimitOutcome(resp *ringlimitv1.CheckResponse) outcome {
	var o outcome
	for _, r := range resp.GetItems() {
		switch {
		case r.GetDegraded():
			o.degraded++
		case r.GetStatus() == ringlimitv1.Status_STATUS_ERROR:
			o.itemErrors++
		case r.GetStatus() == ringlimitv1.Status_STATUS_UNDER_LIMIT:
			o.admitted++
		case r.GetStatus() == ringlimitv1.Status_STATUS_OVER_LIMIT:
			o.rejected++
		default:
			o.itemErrors++
		}
	}
	return o
}

// gubernatorCaller returns a caller of Gubernator's V1/GetRateLimits with
// behavior (BATCHING or GLOBAL).
func gubernatorCaller(c *conns, wl workload, behavior gubernator.Behavior, seed uint64) caller {
	rng := rand.New(rand.NewPCG(seed, 1))
	req := &gubernator.GetRateLimitsReq{Requests: make([]*gubernator.RateLimitReq, wl.items)}
	for i := range req.Requests {
		req.Requests[i] = &gubernator.RateLimitReq{Name: wl.name, Hits: 1, Limit: wl.limit,
			Duration: wl.period.Milliseconds(), Algorithm: gubernator.Algorithm_TOKEN_BUCKET, Behavior: behavior}
	}
	return func(ctx context.Context) (outcome, error) {
		for _, r := range req.Requests {
			r.UniqueKey = keyOf(rng.IntN(wl.keys))
		}
		resp, err := gubernator.NewV1Client(c.pick()).GetRateLimits(ctx, req)
		if err != nil {
			return outcome{}, err
		}
		return gubernatorOutcome(resp), nil
	}
}

// gubernatorOutcome counts the decisions of resp.
func gubernatorOutcome(resp *gubernator.GetRateLimitsResp) outcome {
	var o outcome
	for _, r := range resp.GetResponses() {
		switch {
		case r.GetError() != "":
			o.itemErrors++
		case r.GetStatus() == gubernator.Status_UNDER_LIMIT:
			o.admitted++
		default:
			o.rejected++
		}
	}
	return o
}

// rlsDomain is the domain of the rules every RLS call names; its rule
// limits each value of the descriptor key rlsKey.
const (
	rlsDomain      = "bench"
	rlsDomainOwner = "bench_owner" // ringlimit only: the same rule in owner mode
	rlsKey         = "user"
	rlsLimit       = 1000 // per second, per value: never reached by the load
)

// rlsCaller returns a caller of Envoy's RateLimitService/ShouldRateLimit with
// one descriptor, (rlsKey, a value drawn from keys).
func rlsCaller(c *conns, domain string, keys int, seed uint64) caller {
	rng := rand.New(rand.NewPCG(seed, 1))
	entry := &rlv3.RateLimitDescriptor_Entry{Key: rlsKey}
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{entry}}}}
	return func(ctx context.Context) (outcome, error) {
		entry.Value = "u" + strconv.Itoa(rng.IntN(keys))
		resp, err := rlsv3.NewRateLimitServiceClient(c.pick()).ShouldRateLimit(ctx, req)
		if err != nil {
			return outcome{}, err
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			return outcome{admitted: 1}, nil
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return outcome{rejected: 1}, nil
		}
		return outcome{itemErrors: 1}, nil
	}
}

// errNoAnswer is returned when a probe gets no usable answer.
var errNoAnswer = errors.New("compare: no answer")
