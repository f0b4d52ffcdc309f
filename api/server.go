package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/rules"
)

// Backend decides the valid requests of a call, one Response per Request
// in order: the node's path to its coordination core. Its error is for the
// call as a whole, a gRPC status error (Unavailable while shutting down,
// DeadlineExceeded or Canceled when the context ends first); the Server
// passes it on, as an HTTP status over HTTP. It must be safe for
// concurrent use, and must not keep reqs once Check returns (the Server
// reuses it for another call). envoy.Checker and middleware.Checker have
// the same shape.
type Backend interface {
	Check(ctx context.Context, reqs []check.Request) ([]check.Response, error)
}

// BackendInto is a Backend that can write its answers into a slice the
// caller gives (len(out) == len(reqs)) instead of allocating them. The
// Server uses CheckInto when every item of a call is valid, which saves an
// allocation and a copy of the answers per call. On an error out's content
// is unspecified. CheckInto must not keep reqs or out once it returns.
type BackendInto interface {
	Backend
	CheckInto(ctx context.Context, reqs []check.Request, out []check.Response) error
}

// API names the API a call arrived by, for an Observer.
type API int

// The APIs.
const (
	// GRPC is ringlimit.v1.RateLimiter/Check (and the embedding form).
	GRPC API = 0
	// HTTP is POST /v1/check.
	HTTP API = 1
)

// String returns "grpc" or "http".
func (a API) String() string {
	if a == HTTP {
		return "http"
	}
	return "grpc"
}

// Observer hears of every answered item and every call, for metrics. Its
// methods are called on the request path: they must not block, and must be
// safe for concurrent use.
type Observer interface {
	// Decision reports the answer to one item. alg and mode are as the item
	// asked (alg 0 is the token bucket; an out-of-range value means the
	// item was invalid); r.Mode is the mode it was decided in.
	Decision(alg, mode int64, r *check.Response)
	// Call reports one call of items items, answered in d.
	Call(api API, items int, d time.Duration)
}

// Config configures a Server.
type Config struct {
	// Node is the node's name, reported in every answer.
	Node string
	// MaxKeyLen bounds len(name) + len(unique_key) of an item, and
	// len(lease), in bytes.
	MaxKeyLen int
	// MaxBatchItems bounds the items of one call; a larger call is refused
	// as a whole.
	MaxBatchItems int
	// MaxBodyBytes bounds the body of POST /v1/check; a larger one gets 413.
	MaxBodyBytes int64
	// GRPCRulesOnly makes RateLimiter/Check (not Check, the embedding form)
	// take only items that name a rule; HTTPRulesOnly the same for POST
	// /v1/check.
	GRPCRulesOnly, HTTPRulesOnly bool
	// Rules returns the rules in force and whether the node has a rules file
	// at all (for the message of an unknown rule). Nil: no rules.
	Rules func() (*rules.Set, bool)
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxKeyLen <= 0:
		return fmt.Errorf("api: MaxKeyLen %d: must be positive", c.MaxKeyLen)
	case c.MaxBatchItems <= 0:
		return fmt.Errorf("api: MaxBatchItems %d: must be positive", c.MaxBatchItems)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("api: MaxBodyBytes %d: must be positive", c.MaxBodyBytes)
	}
	return nil
}

// Server serves the public check API over a Backend. It is safe for
// concurrent use.
type Server struct {
	cfg Config
	b   Backend
	obs Observer
	// calls holds *callSlices for reuse (getCall, putCall).
	calls sync.Pool
}

// callSlices are the slices of one call that do not outlive it: its items,
// answers, the requests sent to the Backend and their items' indexes. They
// are reused from call to call (Server.calls): 416 bytes an item, 42 KB of
// a 100-check call, which the collector would otherwise sweep after each.
type callSlices struct {
	items []item
	out   []check.Response
	reqs  []check.Request
	idx   []int
}

// maxPooledItems bounds the items of the slices kept for reuse: a call of
// more items allocates its own.
const maxPooledItems = 1024

// getCall returns slices for a call, empty.
func (s *Server) getCall() *callSlices {
	if c, ok := s.calls.Get().(*callSlices); ok {
		return c
	}
	return new(callSlices)
}

// putCall keeps c for another call, with the strings and errors its slices
// held cleared, unless they grew beyond maxPooledItems.
func (s *Server) putCall(c *callSlices) {
	if cap(c.items) > maxPooledItems || cap(c.out) > maxPooledItems || cap(c.reqs) > maxPooledItems {
		return
	}
	clear(c.items[:cap(c.items)])
	clear(c.out[:cap(c.out)])
	clear(c.reqs[:cap(c.reqs)])
	c.items, c.out, c.reqs, c.idx = c.items[:0], c.out[:0], c.reqs[:0], c.idx[:0]
	s.calls.Put(c)
}

// answers returns c.out resized to n zero answers.
func (c *callSlices) answers(n int) []check.Response {
	if cap(c.out) < n {
		c.out = make([]check.Response, n)
	}
	c.out = c.out[:n]
	clear(c.out)
	return c.out
}

// New returns a Server of cfg over b, reporting to obs (nil: to no one).
func New(cfg Config, b Backend, obs Observer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("api: no Backend")
	}
	if cfg.Rules == nil {
		empty := &rules.Set{}
		cfg.Rules = func() (*rules.Set, bool) { return empty, false }
	}
	if obs == nil {
		obs = nopObserver{}
	}
	return &Server{cfg: cfg, b: b, obs: obs}, nil
}

// nopObserver is the Observer of a Server given none.
type nopObserver struct{}

func (nopObserver) Decision(int64, int64, *check.Response) {}
func (nopObserver) Call(API, int, time.Duration)           {}

// checkBatch validates the size of a call: the only whole-call input error.
func (s *Server) checkBatch(items int) error {
	switch {
	case items == 0:
		return status.Error(codes.InvalidArgument, "items: must not be empty")
	case items > s.cfg.MaxBatchItems:
		return status.Error(codes.InvalidArgument,
			fmt.Sprintf("items: %d items, more than the maximum %d", items, s.cfg.MaxBatchItems))
	}
	return nil
}

// decide answers items into out: rules first, then validation; the valid
// items go to the Backend in one batch. Invalid items are answered with
// their FieldError and do not reach it.
func (s *Server) decide(ctx context.Context, items []item, out []check.Response, rulesOnly bool) error {
	c := s.getCall()
	defer s.putCall(c)
	return s.decideWith(ctx, c, items, out, rulesOnly)
}

// decideWith is decide, with the requests and indexes in c's slices.
func (s *Server) decideWith(ctx context.Context, c *callSlices, items []item, out []check.Response, rulesOnly bool) error {
	ruled := s.resolveRules(items, rulesOnly)
	idx := c.idx[:0] // idx[j] is the item of reqs[j]
	reqs := c.reqs[:0]
	defer func() { c.idx, c.reqs = idx, reqs }() // keep what append grew
	for i := range items {
		r, err := items[i].request(s.cfg.MaxKeyLen)
		if err != nil {
			out[i] = check.Response{Err: err}
			continue
		}
		idx = append(idx, i)
		reqs = append(reqs, r)
	}
	if bi, ok := s.b.(BackendInto); ok && len(reqs) == len(items) {
		// Every item is valid: the answers go straight to out.
		if err := bi.CheckInto(ctx, reqs, out); err != nil {
			return err
		}
	} else {
		resps, err := s.b.Check(ctx, reqs)
		if err != nil {
			return err
		}
		if len(resps) != len(reqs) {
			return status.Error(codes.Internal, fmt.Sprintf("api: the backend answered %d requests of %d", len(resps), len(reqs)))
		}
		for j, i := range idx {
			out[i] = resps[j]
		}
	}
	applyRuleAnswers(ruled, out)
	for i := range out {
		s.obs.Decision(items[i].algorithm, items[i].mode, &out[i])
	}
	return nil
}

// maxAlgorithm is the largest valid wire value of an algorithm.
const maxAlgorithm = int64(bucket.SmoothWarmingUp)
