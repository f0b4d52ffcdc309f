package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// keySep separates a limit's name from the client key in a bucket key, as
// the public API does (api.Key), so that both name the same buckets.
const keySep = "\x00"

// The response headers, from the IETF draft "RateLimit header fields for
// HTTP" (draft-ietf-httpapi-ratelimit-headers, the three-field form), and
// Retry-After (RFC 9110).
const (
	HeaderLimit      = "RateLimit-Limit"
	HeaderRemaining  = "RateLimit-Remaining"
	HeaderReset      = "RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
)

// RateLimit returns net/http middleware that checks every request against
// its client's bucket before passing it on. Every checked response carries
// RateLimit-Limit (the capacity), RateLimit-Remaining and RateLimit-Reset
// (seconds until the bucket is full again, rounded up). A request over the
// limit is answered 429 Too Many Requests with Retry-After (seconds, rounded
// up; absent when the request can never pass) and does not reach next. A
// failed check passes the request without the headers, or with
// Options.FailClosed is answered 503 Service Unavailable. The error is
// about invalid options.
func RateLimit(c Checker, o Options) (func(http.Handler) http.Handler, error) {
	l, err := newLimiter(c, o, ClientIP(0))
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if l.serve(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}, nil
}

// limiter checks requests for RateLimit and AuthRequest.
type limiter struct {
	c    Checker
	o    Options
	body func(w http.ResponseWriter, r *http.Request) // body of a 429
}

func newLimiter(c Checker, o Options, key KeyFunc) (*limiter, error) {
	if c == nil {
		return nil, errors.New("middleware: Checker is nil")
	}
	o, err := o.withDefaults(key)
	if err != nil {
		return nil, err
	}
	return &limiter{c: c, o: o, body: o.Rejected}, nil
}

// verdict is the outcome of checking one request.
type verdict struct {
	allow   bool
	checked bool            // d holds a decision: set the headers
	denyAll bool            // a rule with requests_per_unit 0
	badKey  bool            // decided by the bad-key policy
	d       bucket.Decision // when checked
	err     error           // the check failed
}

// serve checks r, writes the headers, and either answers the rejection (or
// an interrupted wait) and returns false, or returns true for the caller to
// let r through.
func (l *limiter) serve(w http.ResponseWriter, r *http.Request) bool {
	v := l.check(r)
	l.setHeaders(w.Header(), v)
	switch {
	case v.badKey && !v.allow:
		http.Error(w, "no usable client key", http.StatusForbidden)
		return false
	case v.err != nil && !v.allow:
		w.Header().Set(HeaderRetryAfter, "1")
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	case !v.allow:
		if !v.denyAll && v.d.RetryAfter != bucket.MaxRetry {
			w.Header().Set(HeaderRetryAfter, strconv.FormatInt(max(ceilSeconds(v.d.RetryAfter), 1), 10))
		}
		if l.body != nil {
			l.body(w, r)
		} else {
			http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		}
		return false
	case v.checked && v.d.Wait > 0:
		if err := l.o.Sleep(r.Context(), v.d.Wait); err != nil {
			http.Error(w, "wait interrupted", http.StatusServiceUnavailable)
			return false
		}
	}
	return true
}

// check decides r.
func (l *limiter) check(r *http.Request) verdict {
	key, err := l.o.Key(r)
	switch {
	case err != nil:
		return l.badKey(r, fmt.Errorf("%w: %w", ErrBadKey, err))
	case l.o.MaxKeyLen > 0 && len(key) > l.o.MaxKeyLen:
		return l.badKey(r, fmt.Errorf("%w: %d bytes, more than %d", ErrBadKey, len(key), l.o.MaxKeyLen))
	case !utf8.ValidString(key):
		return l.badKey(r, fmt.Errorf("%w: not UTF-8", ErrBadKey))
	}
	req := check.Request{Key: l.o.Name + keySep + key, Hits: l.o.Hits, Limit: l.o.Limit, Mode: l.o.Mode, Policy: l.o.Policy}
	shadow := false
	if l.o.Rules != nil {
		name := l.o.Rule
		if l.o.RuleOf != nil {
			name = l.o.RuleOf(r)
		}
		rule, ok := l.o.Rules.Rules().Lookup(name)
		switch {
		case !ok:
			return l.fail(r, fmt.Errorf("%w %q", ErrUnknownRule, name))
		case rule.Unlimited:
			return verdict{allow: true}
		case rule.DeniesAll():
			return verdict{checked: true, denyAll: true}
		}
		req = rule.Request(rule.Name+keySep+key, l.o.Hits)
		shadow = rule.Shadow
	}
	resps, err := l.c.Check(r.Context(), []check.Request{req})
	if err == nil && len(resps) != 1 {
		err = fmt.Errorf("middleware: checker answered %d responses to 1 request", len(resps))
	}
	if err == nil {
		err = resps[0].Err
		if errors.Is(err, check.ErrKeyTooLong) || errors.Is(err, check.ErrEmptyKey) {
			return l.badKey(r, fmt.Errorf("%w: %w", ErrBadKey, err))
		}
	}
	if err != nil {
		return l.fail(r, err)
	}
	d := resps[0].Decision
	return verdict{allow: d.Allowed || shadow, checked: true, d: d}
}

// badKey reports err and returns the verdict of the bad-key policy.
func (l *limiter) badKey(r *http.Request, err error) verdict {
	if l.o.OnBadKey != nil {
		l.o.OnBadKey(r, err)
	}
	return verdict{allow: l.o.AllowBadKeys, badKey: true, err: err}
}

// fail reports err and returns the verdict of a failed check.
func (l *limiter) fail(r *http.Request, err error) verdict {
	if l.o.OnError != nil {
		l.o.OnError(r, err)
	}
	return verdict{allow: !l.o.FailClosed, err: err}
}

// setHeaders sets the RateLimit-* headers of a checked request.
func (l *limiter) setHeaders(h http.Header, v verdict) {
	switch {
	case !v.checked:
		return
	case v.denyAll:
		h.Set(HeaderLimit, "0")
		h.Set(HeaderRemaining, "0")
		return
	}
	h.Set(HeaderLimit, strconv.FormatInt(v.d.Limit, 10))
	h.Set(HeaderRemaining, strconv.FormatInt(v.d.Remaining, 10))
	h.Set(HeaderReset, strconv.FormatInt(ceilSeconds(max(v.d.ResetAt.Sub(l.o.Clock.Now()), 0)), 10))
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
