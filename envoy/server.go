package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/rules"
)

// Checker decides a batch of check requests: the node (or, in tests, a fake
// over in-memory buckets). Check returns one Response per Request, in order;
// its error is for the batch as a whole (the node is shutting down, the
// context ended). It must be safe for concurrent use, and must not keep
// reqs once Check returns: the Server reuses it for another call.
type Checker interface {
	Check(ctx context.Context, reqs []check.Request) ([]check.Response, error)
}

// CheckerInto is a Checker that can write its answers into a slice the
// caller gives (len(out) == len(reqs)) instead of allocating them; the
// Server then uses CheckInto, which saves an allocation per call. On an
// error out's content is unspecified. CheckInto must not keep reqs or out
// once it returns.
type CheckerInto interface {
	Checker
	CheckInto(ctx context.Context, reqs []check.Request, out []check.Response) error
}

// RuleSource returns the rules in force: a *rules.Store, or a fixed
// *rules.Set.
type RuleSource interface {
	Rules() *rules.Set
}

// Clock reads the current time. The server reads it once per call, to turn
// the absolute reset times of decisions into durations.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

// Now returns the wall-clock time.
func (systemClock) Now() time.Time { return time.Now() }

// Config configures a Server.
type Config struct {
	// Headers makes every response carry response_headers_to_add: the
	// limit, remaining and reset of the most constrained limited descriptor
	// (the one with the least remaining), as Lyft's service does with
	// LIMIT_RESPONSE_HEADERS_ENABLED, plus retry-after when over the limit.
	// Default false: Envoy can compute x-ratelimit-* itself from the
	// statuses (enable_x_ratelimit_headers), and doing both duplicates them.
	Headers bool
	// LimitHeader, RemainingHeader and ResetHeader name the headers. Defaults
	// x-ratelimit-limit, x-ratelimit-remaining and x-ratelimit-reset, the
	// names Envoy uses; Lyft's service defaults to RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset.
	LimitHeader, RemainingHeader, ResetHeader string
	// MaxDescriptors is the most descriptors accepted in one request.
	// Default 64: Envoy sends one per matching rate limit action, a handful
	// in practice; the bound keeps one call from flooding the checker.
	MaxDescriptors int
	// Clock reads the time. Nil means the system clock.
	Clock Clock

	// MaxKeyLen bounds a descriptor's bucket key (rules.DescriptorKey), in
	// bytes: a longer key is a bad key. Zero leaves the bound to the
	// checker, whose refusal of a key (too long, empty) is a bad key too.
	MaxKeyLen int
	// AllowBadKeys answers OK for a descriptor whose key cannot be formed
	// (no entries, an entry without a key, a key too long). Default false:
	// OVER_LIMIT for that descriptor. Failing the call instead would let
	// Envoy's default (failure_mode_deny false) admit the request, so a
	// client could escape its limit by sending a value too long.
	AllowBadKeys bool
	// OnBadKey, if set, is told of every descriptor decided by the bad-key
	// policy, with the reason (wrapping ErrBadKey). It must not block.
	OnBadKey func(err error)
}

// ErrBadKey: a descriptor's bucket key cannot be formed. Such a descriptor
// is decided by Config.AllowBadKeys, never by a limit.
var ErrBadKey = errors.New("envoy: bad descriptor key")

// DefaultConfig returns the default configuration: no response headers, at
// most 64 descriptors per request, the system clock.
func DefaultConfig() Config {
	return Config{
		LimitHeader:     "x-ratelimit-limit",
		RemainingHeader: "x-ratelimit-remaining",
		ResetHeader:     "x-ratelimit-reset",
		MaxDescriptors:  64,
		Clock:           systemClock{},
	}
}

// Validate reports whether c can configure a Server.
func (c Config) Validate() error {
	switch {
	case c.MaxDescriptors <= 0:
		return fmt.Errorf("envoy: MaxDescriptors must be positive, got %d", c.MaxDescriptors)
	case c.Headers && (c.LimitHeader == "" || c.RemainingHeader == "" || c.ResetHeader == ""):
		return errors.New("envoy: Headers needs LimitHeader, RemainingHeader and ResetHeader")
	case c.Clock == nil:
		return errors.New("envoy: Clock is nil")
	case c.MaxKeyLen < 0:
		return fmt.Errorf("envoy: MaxKeyLen must not be negative, got %d", c.MaxKeyLen)
	}
	return nil
}

// Server implements envoy.service.ratelimit.v3.RateLimitServiceServer over
// a rule source and a Checker. It is safe for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	checker Checker
	into    CheckerInto // checker, if it is one; else nil
	rules   RuleSource
	cfg     Config
	scratch sync.Pool // of *scratch
}

// scratch is what one call works in, reused by the next call: its plans,
// the entries of its descriptors, the batch sent to the checker and its
// answers. A call of a handful of descriptors then allocates only its
// bucket keys and its response.
type scratch struct {
	plans   []plan
	entries []rules.Entry
	batch   []check.Request
	resps   []check.Response
}

// maxScratch is the most descriptors (or entries) whose slices are kept
// for another call; a larger call's are left to the collector.
const maxScratch = 256

// getScratch returns a scratch with room for n plans.
func (s *Server) getScratch(n int) *scratch {
	sc, _ := s.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	sc.plans = slices.Grow(sc.plans[:0], n)[:n]
	return sc
}

// putScratch clears sc, so that it holds no key or error of this call, and
// keeps it for another call unless it grew too large.
func (s *Server) putScratch(sc *scratch) {
	if cap(sc.plans) > maxScratch || cap(sc.entries) > maxScratch || cap(sc.batch) > maxScratch {
		return
	}
	clear(sc.plans)
	clear(sc.entries[:cap(sc.entries)])
	clear(sc.batch[:cap(sc.batch)])
	clear(sc.resps[:cap(sc.resps)])
	sc.entries, sc.batch, sc.resps = sc.entries[:0], sc.batch[:0], sc.resps[:0]
	s.scratch.Put(sc)
}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// New returns a Server that matches requests to the rules of src and
// decides them with checker.
func New(checker Checker, src RuleSource, cfg Config) (*Server, error) {
	if checker == nil || src == nil {
		return nil, errors.New("envoy: New needs a Checker and a RuleSource")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	into, _ := checker.(CheckerInto)
	return &Server{checker: checker, into: into, rules: src, cfg: cfg}, nil
}

// Register registers s on g as envoy.service.ratelimit.v3.RateLimitService.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// plan is what one descriptor asks for.
type plan struct {
	rule   *rules.Rule // nil: no limit applies
	hits   int64
	req    int   // index into the checker batch, -1 when not checked
	badKey error // the descriptor's key cannot be formed: decided by the bad-key policy
}

// ShouldRateLimit decides every descriptor of req and answers OVER_LIMIT if
// any is over its limit (for quota_mode rules: if all of them are).
// Descriptors that match no rule (or whose domain is unknown) are OK with no
// limit, as in Lyft's service. A descriptor whose key cannot be formed (no
// entries, an entry without a key, a key too long) is decided by
// Config.AllowBadKeys: OVER_LIMIT by default (Lyft's service answers OK:
// a deliberate difference, docs/envoy.md). An empty domain or descriptor
// list fails with the gRPC code Unknown and Lyft's message, as Lyft's
// service fails it; more than MaxDescriptors descriptors or an invalid limit
// override fail with InvalidArgument; a failed check fails the whole call
// (mostly Unavailable), so that Envoy applies its failure_mode_deny setting.
// The overall code is never UNKNOWN, which Envoy asserts against.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain, descs := req.GetDomain(), req.GetDescriptors()
	switch {
	case domain == "":
		return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
	case len(descs) == 0:
		return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	case len(descs) > s.cfg.MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, more than the maximum %d", len(descs), s.cfg.MaxDescriptors)
	}
	set := s.rules.Rules()
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // as Envoy documents: an unset hits_addend counts one hit
	}
	sc := s.getScratch(len(descs))
	defer s.putScratch(sc)
	plans := sc.plans
	batch := sc.batch
	for i, d := range descs {
		var entries []rules.Entry
		var err error
		sc.entries, entries, err = entriesOf(sc.entries, i, d)
		if err != nil {
			plans[i] = plan{req: -1, badKey: err}
			continue
		}
		r, err := ruleOf(set, domain, entries, d.GetLimit())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
		}
		p := plan{rule: r, hits: hits, req: -1}
		if h := d.GetHitsAddend(); h != nil {
			p.hits = int64(min(h.GetValue(), math.MaxInt64))
		}
		if d.GetIsNegativeHits() {
			p.hits = 0 // refunds are not supported: peek
		}
		plans[i] = p
		if r == nil || r.Unlimited || r.DeniesAll() && !r.CountDenied {
			continue
		}
		key := r.BucketKey(domain, entries)
		if s.cfg.MaxKeyLen > 0 && len(key) > s.cfg.MaxKeyLen {
			plans[i].badKey = fmt.Errorf("%w: descriptor %d: %d bytes, more than %d", ErrBadKey, i, len(key), s.cfg.MaxKeyLen)
			continue
		}
		plans[i].req = len(batch)
		if r.DeniesAll() {
			batch = append(batch, r.DenyCheck(key, p.hits))
		} else {
			batch = append(batch, r.Request(key, p.hits))
		}
	}
	dropReplaced(plans, &batch)
	sc.batch = batch
	resps, err := s.check(ctx, sc)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(plans))}
	// One allocation holds every descriptor's status, limit and reset: the
	// response outlives the call (gRPC encodes it after the handler
	// returns), so it cannot come from the scratch.
	answers := make([]answer, len(plans))
	var over []*check.Response // decisions over the limit, for retry-after
	var quota, quotaOver int   // quota_mode descriptors, and those over the limit
	for i, p := range plans {
		var r *check.Response
		if p.req >= 0 {
			r = &resps[p.req]
			if errors.Is(r.Err, check.ErrKeyTooLong) || errors.Is(r.Err, check.ErrEmptyKey) {
				p.badKey, r = fmt.Errorf("%w: descriptor %d: %w", ErrBadKey, i, r.Err), nil
			} else if r.Err != nil {
				return nil, itemError(i, r.Err)
			}
		}
		a := &answers[i]
		if p.badKey != nil {
			s.badKeyStatus(a, p.badKey)
		} else {
			a.descriptorStatus(p.rule, r, p.hits, now)
		}
		st := &a.st
		out.Statuses[i] = st
		isQuota := p.rule != nil && p.rule.Quota && !p.rule.Unlimited
		if isQuota {
			quota++
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if isQuota {
				quotaOver++
				continue
			}
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if p.rule == nil || p.rule.DeniesAll() {
				r = nil // no retry-after: it never passes (or a bad key)
			}
			over = append(over, r)
		}
	}
	if quota > 0 && quotaOver == quota {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.cfg.Headers {
		out.ResponseHeadersToAdd = s.headers(out.Statuses, over)
	}
	return out, nil
}

// check decides sc's batch into sc.resps (nil for an empty batch), with
// CheckInto when the checker has it.
func (s *Server) check(ctx context.Context, sc *scratch) ([]check.Response, error) {
	batch := sc.batch
	if len(batch) == 0 {
		return nil, nil
	}
	var resps []check.Response
	var err error
	if s.into != nil {
		sc.resps = slices.Grow(sc.resps[:0], len(batch))[:len(batch)]
		resps, err = sc.resps, s.into.CheckInto(ctx, batch, sc.resps)
	} else {
		resps, err = s.checker.Check(ctx, batch)
	}
	if err != nil {
		return nil, checkError(ctx, err)
	}
	if len(resps) != len(batch) {
		return nil, status.Errorf(codes.Internal, "checker answered %d of %d requests", len(resps), len(batch))
	}
	return resps, nil
}

// answer is one descriptor's part of a response: its status, and the limit
// and reset the status points to, allocated together.
type answer struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// badKeyStatus answers a descriptor whose key cannot be formed, by the
// bad-key policy, in a, and reports it.
func (s *Server) badKeyStatus(a *answer, err error) {
	if s.cfg.OnBadKey != nil {
		s.cfg.OnBadKey(err)
	}
	a.st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	if s.cfg.AllowBadKeys {
		a.st.Code = rlsv3.RateLimitResponse_OK
	}
}

// entriesOf appends the entries of descriptor i to buf and returns buf and
// the entries appended, or an error wrapping ErrBadKey when they cannot
// make a bucket key.
func entriesOf(buf []rules.Entry, i int, d *rlv3.RateLimitDescriptor) ([]rules.Entry, []rules.Entry, error) {
	es := d.GetEntries()
	if len(es) == 0 {
		return buf, nil, fmt.Errorf("%w: descriptor %d has no entries", ErrBadKey, i)
	}
	start := len(buf)
	for j, e := range es {
		if e.GetKey() == "" {
			return buf[:start], nil, fmt.Errorf("%w: descriptor %d entry %d has an empty key", ErrBadKey, i, j)
		}
		buf = append(buf, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	// Capped, so that appending the next descriptor's entries never writes
	// into these.
	return buf, buf[start:len(buf):len(buf)], nil
}

// ruleOf returns the rule of a descriptor: the limit override Envoy sent
// with it when the domain exists (as Lyft's service does), else the matching
// rule, else nil.
func ruleOf(set *rules.Set, domain string, entries []rules.Entry, o *rlv3.RateLimitDescriptor_RateLimitOverride) (*rules.Rule, error) {
	if o != nil && set.HasDomain(domain) {
		unit, ok := unitFromType(o.GetUnit())
		if !ok {
			return nil, fmt.Errorf("limit override has unknown unit %v", o.GetUnit())
		}
		return set.Override(domain, entries, int64(o.GetRequestsPerUnit()), unit, o.GetUnitMultiplier().GetValue())
	}
	r, _ := set.Match(domain, entries)
	return r, nil
}

// dropReplaced applies Lyft's replaces: a rule whose label is replaced by
// another rule matched in the same request is not checked, and its
// descriptor is answered OK with no limit. The batch is rebuilt without it.
func dropReplaced(plans []plan, batch *[]check.Request) {
	replaced := map[string]bool{}
	for _, p := range plans {
		if p.rule != nil {
			for _, name := range p.rule.Replaces {
				replaced[name] = true
			}
		}
	}
	if len(replaced) == 0 {
		return
	}
	kept := (*batch)[:0]
	for i := range plans {
		p := &plans[i]
		if p.rule == nil || p.rule.Label == "" || !replaced[p.rule.Label] {
			if p.req >= 0 {
				req := (*batch)[p.req]
				p.req = len(kept)
				kept = append(kept, req)
			}
			continue
		}
		p.rule, p.req = nil, -1
	}
	*batch = kept
}

// descriptorStatus answers, in a, one descriptor of hits hits: r is its
// check's response, nil when it was not checked.
func (a *answer) descriptorStatus(rule *rules.Rule, r *check.Response, hits int64, now time.Time) {
	st := &a.st
	switch {
	case rule == nil:
		st.Code = rlsv3.RateLimitResponse_OK
		return
	case rule.Unlimited:
		st.Code, st.LimitRemaining = rlsv3.RateLimitResponse_OK, math.MaxUint32
		return
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	st.CurrentLimit = a.currentLimit(rule)
	if rule.DeniesAll() { // "resets" at the end of the current unit, as Lyft reports it
		// A peek passes, as in Lyft's service, unless the rule counts
		// refused hits and has counted some in this window.
		if hits == 0 && (r == nil || r.Remaining == 1) {
			st.Code = rlsv3.RateLimitResponse_OK
		}
		p := rule.Period()
		st.DurationUntilReset = a.wholeSeconds(p - time.Duration(now.UnixNano()%int64(p)))
	} else {
		if r.Allowed {
			st.Code = rlsv3.RateLimitResponse_OK
		}
		st.LimitRemaining = clamp32(r.Remaining)
		st.DurationUntilReset = a.wholeSeconds(max(r.ResetAt.Sub(now), 0))
	}
	if rule.Shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
}

// wholeSeconds returns d rounded up to whole seconds, as Lyft's service
// reports the time until a reset (it counts in Unix seconds): for a fixed
// window, the same value; for other algorithms, never earlier than the
// reset. It returns a's reset.
func (a *answer) wholeSeconds(d time.Duration) *durationpb.Duration {
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	a.reset.Seconds = int64(s)
	return &a.reset
}

// currentLimit is the rule's limit as Envoy reports it, named by the rule's
// label (rate_limit.name) as in Lyft's service: empty without one. It
// returns a's limit.
func (a *answer) currentLimit(rule *rules.Rule) *rlsv3.RateLimitResponse_RateLimit {
	l := &a.limit
	l.Name = rule.Label
	l.RequestsPerUnit = clamp32(rule.RequestsPerUnit)
	l.Unit = unitToResponse(rule.Unit)
	if rule.Multiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(rule.Multiplier)
	}
	return l
}

// clamp32 returns v within [0, MaxUint32].
func clamp32(v int64) uint32 { return uint32(min(max(v, 0), math.MaxUint32)) }

// checkError turns the checker's batch error into a gRPC status error.
func checkError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Errorf(codes.Unavailable, "check failed: %v", err)
}

// itemError turns the error of the check of descriptor i into a gRPC status
// error: InvalidArgument for input the checker rejects, else Unavailable.
func itemError(i int, err error) error {
	code := codes.Unavailable
	if errors.Is(err, bucket.ErrInvalidLimit) || errors.Is(err, check.ErrEmptyKey) || errors.Is(err, check.ErrKeyTooLong) {
		code = codes.InvalidArgument
	}
	return status.Errorf(code, "descriptor %d: %v", i, err)
}
