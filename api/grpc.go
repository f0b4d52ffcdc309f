package api

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// Check decides a batch of items, as the gRPC RateLimiter/Check method does
// (but not bound by Config.GRPCRulesOnly): the embedding form. Each invalid
// item is answered with STATUS_ERROR and a message naming the field; the
// others are decided. The error, a gRPC status error, is for the call as a
// whole: InvalidArgument for no items or too many, or the Backend's.
func (s *Server) Check(ctx context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	return s.checkProto(ctx, req, false)
}

// checkProto is Check; with rulesOnly, items that name no rule are answered
// with an error (Config.GRPCRulesOnly).
func (s *Server) checkProto(ctx context.Context, req *ringlimitv1.CheckRequest, rulesOnly bool) (*ringlimitv1.CheckResponse, error) {
	start := time.Now()
	if err := s.checkBatch(len(req.GetItems())); err != nil {
		return nil, err
	}
	items := make([]item, len(req.Items))
	for i, pi := range req.Items {
		items[i] = fromProto(pi)
	}
	out := make([]check.Response, len(items))
	if err := s.decide(ctx, items, out, rulesOnly); err != nil {
		return nil, err
	}
	resp := &ringlimitv1.CheckResponse{Items: make([]*ringlimitv1.CheckResult, len(out)), Node: s.cfg.Node}
	for i := range out {
		resp.Items[i] = toProto(&out[i])
	}
	s.obs.Call(GRPC, len(items), time.Since(start))
	return resp, nil
}

// checkWire is checkProto for items decoded from the wire (decodeItems)
// into c.items, answered in wire form (appendResponse) from a call that
// began at start. The caller puts c back (putCall).
func (s *Server) checkWire(ctx context.Context, c *callSlices, rulesOnly bool, start time.Time) (*rawFrame, error) {
	items := c.items
	out := c.answers(len(items))
	if err := s.decideWith(ctx, c, items, out, rulesOnly); err != nil {
		return nil, err
	}
	// About 40 bytes per answer; append grows it if need be.
	b := appendResponse(make([]byte, 0, 48*len(out)+len(s.cfg.Node)+8), s.cfg.Node, out)
	s.obs.Call(GRPC, len(items), time.Since(start))
	return &rawFrame{b: b}, nil
}

// fromProto decodes one item. Invalid durations are recorded in item.err;
// enum values are checked by item.request.
func fromProto(pi *ringlimitv1.CheckItem) item {
	it := item{
		name:          pi.GetName(),
		uniqueKey:     pi.GetUniqueKey(),
		hits:          1, // unset counts 1; only an explicit 0 peeks
		limit:         pi.GetLimit(),
		burst:         pi.GetBurst(),
		algorithm:     int64(pi.GetAlgorithm()),
		mode:          int64(pi.GetMode()),
		policy:        int64(pi.GetPolicy()),
		countRejected: pi.GetCountRejected(),
		lease:         pi.GetLease(),
		release:       pi.GetRelease(),
		rule:          pi.GetRule(),

		maxBurstSeconds: pi.GetMaxBurstSeconds(),
		coldFactor:      pi.GetColdFactor(),
	}
	if pi.Hits != nil {
		it.hits = *pi.Hits
	}
	it.period, it.err = protoDuration("period", pi.GetPeriod(), it.err)
	it.maxWait, it.err = protoDuration("max_wait", pi.GetMaxWait(), it.err)
	it.minGap, it.err = protoDuration("min_gap", pi.GetMinGap(), it.err)
	it.warmUp, it.err = protoDuration("warm_up", pi.GetWarmUp(), it.err)
	return it
}

// protoDuration converts d (nil is zero), keeping the first error.
// Durations beyond time.Duration's range (about 292 years) saturate, and the
// limit's validation then judges them.
func protoDuration(field string, d *durationpb.Duration, prev error) (time.Duration, error) {
	if d == nil {
		return 0, prev
	}
	if err := d.CheckValid(); err != nil {
		if prev == nil {
			prev = fieldErr(field, "invalid duration (seconds %d, nanos %d)", d.GetSeconds(), d.GetNanos())
		}
		return 0, prev
	}
	return d.AsDuration(), prev
}

// toProto encodes one answer. An error is never reported as under limit.
func toProto(r *check.Response) *ringlimitv1.CheckResult {
	if r.Err != nil {
		return &ringlimitv1.CheckResult{
			Status: ringlimitv1.Status_STATUS_ERROR,
			Error:  errorMessage(r.Err),
			Owner:  r.Owner,
			Mode:   ringlimitv1.Mode(r.Mode),
		}
	}
	res := &ringlimitv1.CheckResult{
		Status:       ringlimitv1.Status_STATUS_OVER_LIMIT,
		Limit:        r.Limit,
		Remaining:    r.Remaining,
		Owner:        r.Owner,
		Mode:         ringlimitv1.Mode(r.Mode),
		Degraded:     r.Degraded,
		Reconfigured: r.Reconfigured,
	}
	if r.Allowed {
		res.Status = ringlimitv1.Status_STATUS_UNDER_LIMIT
	}
	if !r.ResetAt.IsZero() {
		res.ResetTime = timestamppb.New(r.ResetAt)
	}
	if r.RetryAfter > 0 {
		res.RetryAfter = durationpb.New(r.RetryAfter)
	}
	if r.Wait > 0 {
		res.Wait = durationpb.New(r.Wait)
	}
	return res
}

// Register registers ringlimit.v1.RateLimiter on g, bound by
// Config.GRPCRulesOnly. g must use Codec (grpc.ForceServerCodecV2).
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&rateLimiterDesc, grpcAPI{s: s})
}

// grpcAPI serves ringlimit.v1.RateLimiter.
type grpcAPI struct {
	ringlimitv1.UnimplementedRateLimiterServer
	s *Server
}

// Check implements ringlimitv1.RateLimiterServer.
func (a grpcAPI) Check(ctx context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	return a.s.checkProto(ctx, req, a.s.cfg.GRPCRulesOnly)
}
