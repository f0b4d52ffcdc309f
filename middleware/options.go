package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/rules"
)

// Checker decides a batch of check requests: the node (embedded, or a
// client of one), or in tests a fake over in-memory buckets. Check returns
// one Response per Request, in order; its error is for the batch as a whole.
// It must be safe for concurrent use.
type Checker interface {
	Check(ctx context.Context, reqs []check.Request) ([]check.Response, error)
}

// RuleSource returns the rules in force: a *rules.Store, or a fixed
// *rules.Set.
type RuleSource interface {
	Rules() *rules.Set
}

// Clock reads the current time, to turn a decision's reset time into the
// seconds of RateLimit-Reset.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

// Now returns the wall-clock time.
func (systemClock) Now() time.Time { return time.Now() }

// Errors of the package.
var (
	// ErrNoKey: the request carries no client key (the header is missing or
	// empty, or the address cannot be read).
	ErrNoKey = errors.New("middleware: no client key in the request")
	// ErrUnknownRule: the named rule is not in the rules in force.
	ErrUnknownRule = errors.New("middleware: unknown rule")
	// ErrBadKey: the request's client key cannot make a bucket key: it is
	// missing (ErrNoKey), longer than Options.MaxKeyLen, not UTF-8, or the
	// checker refused it. Such a request is decided by
	// Options.AllowBadKeys, never by a limit.
	ErrBadKey = errors.New("middleware: bad client key")
)

// Options configures RateLimit and AuthRequest. Give either Name and Limit,
// or Rules and Rule (or RuleOf).
type Options struct {
	// Name names a fixed limit. A client's bucket key is Name, a NUL byte and
	// the client key: the key the public API gives (name, unique_key), so a
	// limit can be shared between this middleware and other callers.
	Name string
	// Limit is the fixed limit of every client.
	Limit bucket.Limit
	// Mode and Policy override the node's default consistency mode and
	// partition policy for a fixed limit (rules carry their own).
	Mode   check.Mode
	Policy check.Policy

	// Rules and Rule take the limit from the rule named Rule (a name such as
	// "http/remote_address", see rules.RuleName), looked up on every request
	// so that a reload applies at once. The bucket key is the rule's name, a
	// NUL byte and the client key.
	Rules RuleSource
	Rule  string
	// RuleOf, if set, names the rule of each request instead of Rule (for
	// instance from a header that nginx sets: see RuleFromHeader).
	RuleOf func(r *http.Request) string

	// Key returns the client key of a request. Default: RateLimit keys by
	// the client address (ClientIP(0)); AuthRequest by the X-Real-IP header
	// (FromHeader("X-Real-IP")), which nginx sets to the client's address.
	Key KeyFunc
	// Hits is the number of hits each request takes. Default 1.
	Hits int64
	// FailClosed makes a failed check (the checker's error, an unknown rule)
	// reject the request with 503 Service Unavailable; a request without a
	// usable key is decided by AllowBadKeys instead. Default false: the request passes (fail open), as Envoy's
	// rate limit filter does by default, so that an outage of the limiter is
	// not an outage of the service. The cluster's own partition policy
	// decides what a reachable node answers when an owner is unreachable;
	// this option is only for calls that fail outright.
	FailClosed bool
	// OnError, if set, is told of every failed check. It must not block.
	OnError func(r *http.Request, err error)

	// MaxKeyLen bounds the client key, in bytes: a longer key is a bad key.
	// Zero leaves the bound to the checker (the node refuses bucket keys
	// over its MaxKeyLen, and that is a bad key too).
	MaxKeyLen int
	// AllowBadKeys lets through a request whose client key cannot be
	// formed (ErrBadKey). Default false: it is denied with 403 Forbidden,
	// which nginx's auth_request passes on as such; passing it would let a
	// client escape its limit by sending no key, or one too long.
	AllowBadKeys bool
	// OnBadKey, if set, is told of every request decided by the bad-key
	// policy, with the reason (wrapping ErrBadKey). It must not block.
	OnBadKey func(r *http.Request, err error)
	// Rejected, if set, writes the response to a request over the limit:
	// the RateLimit-* and Retry-After headers are already set on w, and it
	// must answer 429 (w.WriteHeader(http.StatusTooManyRequests)) before
	// writing its body, such as a JSON error. Nil writes a short plain-text
	// message (AuthRequest: no body).
	Rejected func(w http.ResponseWriter, r *http.Request)
	// Clock reads the time. Nil means the system clock.
	Clock Clock
	// Sleep waits d or until ctx ends, for the shaping algorithms
	// (leaky_queue, smooth_bursty and smooth_warming_up with a max_wait),
	// which admit a request after a wait. Nil means a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// withDefaults validates o and fills in its defaults; key is the default
// KeyFunc.
func (o Options) withDefaults(key KeyFunc) (Options, error) {
	switch {
	case o.Rules == nil && (o.Rule != "" || o.RuleOf != nil):
		return o, errors.New("middleware: Rule and RuleOf need Rules")
	case o.Rules != nil && o.Rule == "" && o.RuleOf == nil:
		return o, errors.New("middleware: Rules needs Rule or RuleOf")
	case o.Rules == nil && o.Name == "":
		return o, errors.New("middleware: Name is required with a fixed Limit")
	case o.Hits < 0:
		return o, fmt.Errorf("middleware: Hits must not be negative, got %d", o.Hits)
	case o.MaxKeyLen < 0:
		return o, fmt.Errorf("middleware: MaxKeyLen must not be negative, got %d", o.MaxKeyLen)
	}
	if o.Rules == nil {
		if err := o.Limit.Validate(); err != nil {
			return o, fmt.Errorf("middleware: %w", err)
		}
	}
	if o.Hits == 0 {
		o.Hits = 1
	}
	if o.Key == nil {
		o.Key = key
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	return o, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RuleFromHeader returns a RuleOf that names the rule by the header name
// of each request. The header must be set by a trusted proxy (nginx's
// proxy_set_header), never passed through from clients, or a client could
// pick its own limit.
func RuleFromHeader(name string) func(r *http.Request) string {
	return func(r *http.Request) string { return r.Header.Get(name) }
}
