package ringlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/envoy"
	"github.com/ringlimit/ringlimit/middleware"
	"github.com/ringlimit/ringlimit/rules"
)

// The rules file (Config.Rules.Path) feeds three consumers: Envoy's rate
// limit service on the gRPC port, nginx's auth_request endpoint on the HTTP
// port, and the rule field of public checks (package api). The node holds
// one rules.Store; a poller of its own reads the
// files every Config.Rules.PollInterval (the Store starts no goroutine),
// and ReloadRules reads them on
// demand (SIGHUP), both through reloadRules, which counts and logs each
// outcome.

// ErrNoRules is returned by ReloadRules when the node has no rules file.
var ErrNoRules = errors.New("ringlimit: no rules file configured (Config.Rules.Path, --rules)")

// ruleSet is the rules of a node: a Store loaded from Config.Rules.Path, or
// none.
type ruleSet struct {
	store *rules.Store // nil without RulesPath
	none  rules.Set    // the empty set Rules returns without a rules file
	nginx http.Handler // /v1/nginx/auth
	log   *slog.Logger
	m     *rulesMetrics

	mu sync.Mutex   // serialises reloads, so that each one's event is its own
	ev *rules.Event // set by the store's OnReload during a reload; guarded by mu

	// polled, when set (by tests, before the first tick), is called by the
	// poller after each poll, so that a test knows when one is over.
	polled func()
}

// Rules returns the rules in force: empty without a rules file. A Set is
// immutable and safe for concurrent use. Rules implements envoy.RuleSource
// and middleware.RuleSource.
func (s *ruleSet) Rules() *rules.Set {
	if s.store == nil {
		return &s.none // not allocated per call: a Set is immutable
	}
	return s.store.Rules()
}

// validateRules checks the rules settings of c.
func (c Config) validateRules() error {
	switch {
	case c.Rules.PollInterval < 0:
		return configErr("Rules.PollInterval", "must not be negative, got %v", c.Rules.PollInterval)
	case c.Rules.Path == "" && c.Rules.NginxRule != "":
		return configErr("Rules.NginxRule", "needs Rules.Path (--rules)")
	case c.Rules.Path == "":
		return nil
	case !validHeaderName(c.Rules.NginxKeyHeader):
		return configErr("Rules.NginxKeyHeader", "%q is not a header name", c.Rules.NginxKeyHeader)
	case c.Rules.NginxRule == "" && !validHeaderName(c.Rules.NginxRuleHeader):
		return configErr("Rules.NginxRuleHeader", "%q is not a header name (or set Rules.NginxRule)", c.Rules.NginxRuleHeader)
	}
	return nil
}

// validHeaderName reports whether s is an HTTP header field name (an RFC
// 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// buildRules loads the rules file, registers the rules metrics and, with a
// poll interval, starts the poller, which teardown stops (it ends when
// stopTick closes) and waits for. A load error is the
// rules' ErrorList: one "file:line:column: problem" per line.
func (n *Node) buildRules() error {
	cfg := n.cfg
	s := &ruleSet{log: n.log}
	if cfg.Rules.Path != "" {
		sc := rules.StoreConfig{Path: cfg.Rules.Path, OnReload: s.onReload}
		st, err := rules.NewStore(sc)
		if err != nil {
			return fmt.Errorf("ringlimit: rules %s:\n%w", cfg.Rules.Path, err)
		}
		s.store = st
	}
	m, err := newRulesMetrics(cfg.Registry, func() float64 { return float64(s.Rules().Len()) })
	if err != nil {
		return fmt.Errorf("ringlimit: registering metrics: %w", err)
	}
	s.m = m
	n.rules = s
	if s.nginx, err = n.nginxAuth(); err != nil {
		return err
	}
	if s.store == nil {
		return nil
	}
	n.log.Info("rules loaded", "path", cfg.Rules.Path, "rules", s.Rules().Len(), "domains", s.Rules().Domains())
	if cfg.Rules.PollInterval > 0 {
		newTicker := cfg.Rules.Ticker
		if newTicker == nil {
			newTicker = func(d time.Duration) (<-chan time.Time, func()) {
				t := time.NewTicker(d)
				return t.C, t.Stop
			}
		}
		tick, stopTicker := newTicker(cfg.Rules.PollInterval)
		stop := n.stopTick
		n.wg.Go(func() {
			defer stopTicker()
			for {
				select {
				case <-stop:
					return
				case <-tick:
					s.reload(false)
					if s.polled != nil {
						s.polled()
					}
				}
			}
		})
	}
	return nil
}

// onReload is the store's OnReload: it records the event of the reload in
// progress (reload holds mu).
func (s *ruleSet) onReload(ev rules.Event) { s.ev = &ev }

// reload reads the rules files again (force) or if they changed (a poll),
// puts valid rules in force, and logs and counts the outcome: a reload that
// changed the rules or failed anew, and every forced one. A poll that finds
// the same invalid content again says nothing more.
func (s *ruleSet) reload(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ev = nil
	var err error
	if force {
		err = s.store.Reload()
	} else {
		_, err = s.store.Poll()
	}
	ev := s.ev
	s.ev = nil
	switch {
	case err != nil && (ev != nil || force):
		s.m.reloads[reloadFailed].Inc()
		var list rules.ErrorList
		if !errors.As(err, &list) {
			s.log.Error("rules reload rejected; the rules in force stay", "err", err, "rules", s.Rules().Len())
			break
		}
		s.log.Error("rules reload rejected; the rules in force stay", "problems", len(list), "rules", s.Rules().Len())
		for _, p := range list {
			s.log.Error("rules problem", "at", fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column), "problem", p.Msg)
		}
	case err != nil:
	case ev != nil:
		s.m.reloads[reloadOK].Inc()
		c := ev.Changes
		s.log.Info("rules reloaded", "rules", ev.New.Len(), "added", c.Added, "removed", c.Removed, "changed", c.Changed)
	case force:
		s.m.reloads[reloadOK].Inc()
		s.log.Info("rules reloaded, unchanged", "rules", s.Rules().Len())
	}
	return err
}

// ReloadRules reads the rules files again and puts them in force if they are
// valid; on error (an ErrorList naming each problem's file and line, or a
// file error) the rules in force stay. The state of every bucket is kept:
// buckets are keyed by what they count, not by rule. cmd/node calls it on
// SIGHUP. It returns ErrNoRules without a rules file.
func (n *Node) ReloadRules() error {
	if n.rules.store == nil {
		return ErrNoRules
	}
	return n.rules.reload(true)
}

// Rules returns the rules in force (empty without a rules file). The Set is
// immutable; a reload replaces it.
func (n *Node) Rules() *rules.Set { return n.rules.Rules() }

// registerEnvoy registers Envoy's RateLimitService v3 on s: the rules
// server, or without a rules file one that fails every call with
// FailedPrecondition saying so.
func (n *Node) registerEnvoy(s *grpc.Server) error {
	if n.rules.store == nil {
		api.RegisterEnvoy(s, noRulesEnvoy{})
		return nil
	}
	ec := envoy.DefaultConfig()
	ec.Headers = n.cfg.Rules.EnvoyHeaders
	ec.Clock = n.clock
	ec.MaxKeyLen = n.cfg.syncConfig().MaxKeyLen
	ec.AllowBadKeys = n.cfg.Rules.EnvoyAllowBadKeys
	ec.OnBadKey = func(err error) { n.bad.note(frontEnvoy, n.cfg.Rules.EnvoyAllowBadKeys, err) }
	srv, err := envoy.New(n.Checker(), n.rules, ec)
	if err != nil {
		return fmt.Errorf("ringlimit: envoy: %w", err)
	}
	api.RegisterEnvoy(s, srv)
	return nil
}

// noRulesEnvoy answers Envoy on a node without rules.
type noRulesEnvoy struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (noRulesEnvoy) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "ringlimit: this node has no rules file (--rules), so it has no domains to limit")
}

// nginxAuth returns the handler of /v1/nginx/auth: middleware.AuthRequest
// over the node's rules, configured by the Nginx* fields of Config; without
// a rules file, a handler that answers 404 saying so (nginx turns it into a
// 500 for @ratelimit_error, which fails open or closed as configured).
func (n *Node) nginxAuth() (http.Handler, error) {
	if n.rules.store == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			api.WriteError(w, http.StatusNotFound, "no rules file configured (--rules): /v1/nginx/auth checks rules")
		}), nil
	}
	c := n.cfg
	o := middleware.Options{
		Rules:      n.rules,
		Rule:       c.Rules.NginxRule,
		Key:        middleware.FromHeader(c.Rules.NginxKeyHeader),
		FailClosed: c.Rules.NginxFailClosed,
		Clock:      n.clock,
		MaxKeyLen:  c.API.MaxKeyLen,
		// A key the node cannot take (the rule's name and it together over
		// MaxKeyLen) is a bad key too: the checker refuses it.
		AllowBadKeys: c.Rules.NginxAllowBadKeys,
		OnBadKey: func(_ *http.Request, err error) {
			n.bad.note(frontNginx, c.Rules.NginxAllowBadKeys, err)
		},
		OnError: func(r *http.Request, err error) {
			n.log.Debug("nginx auth: check failed", "uri", r.Header.Get("X-Original-URI"), "err", err)
		},
	}
	if c.Rules.NginxRule == "" {
		o.RuleOf = middleware.RuleFromHeader(c.Rules.NginxRuleHeader)
	}
	h, err := middleware.AuthRequest(n.Checker(), o)
	if err != nil {
		return nil, fmt.Errorf("ringlimit: nginx auth: %w", err)
	}
	return h, nil
}

// Checker is a Node in the batch form of the coordination core, the form
// that packages envoy and middleware take (their Checker interfaces):
//
//	mw, err := middleware.RateLimit(node.Checker(), opts)
//
// It is safe for concurrent use.
type Checker struct{ n *Node }

// The node serves both front ends.
var (
	_ envoy.CheckerInto  = Checker{}
	_ middleware.Checker = Checker{}
)

// Checker returns the node as a Checker.
func (n *Node) Checker() Checker { return Checker{n} }

// Check decides reqs and returns one Response per Request, in order. A
// request the core rejects (an empty or too long key, an invalid limit) is
// answered with its error. The error is for the batch: a gRPC status error,
// Unavailable while shutting down, DeadlineExceeded or Canceled when ctx
// ends (or Config.API.CheckTimeout passes) before the core answered.
func (c Checker) Check(ctx context.Context, reqs []check.Request) ([]check.Response, error) {
	out := make([]check.Response, len(reqs))
	if err := c.CheckInto(ctx, reqs, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckInto is Check writing the answers into out (len(out) == len(reqs)),
// which saves the caller an allocation per call (envoy.CheckerInto). On an
// error out's content is unspecified. It keeps neither reqs nor out.
func (c Checker) CheckInto(ctx context.Context, reqs []check.Request, out []check.Response) error {
	n := c.n
	if err := n.decide(ctx, reqs, out); err != nil {
		return err
	}
	for i := range out {
		n.metrics.Decision(int64(reqs[i].Limit.Algorithm), int64(reqs[i].Mode), &out[i])
	}
	return nil
}
