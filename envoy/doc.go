// Package envoy serves Envoy's global rate limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from
// ringlimit's rules and checker, so that Envoy can use a ringlimit cluster as
// its rate limit service in place of Lyft's ratelimit service and Redis.
//
// A request's domain and each descriptor are matched to a rule (package
// rules); each limited descriptor becomes one check of the bucket
// rule.BucketKey(domain, entries), and all of a request's checks go to the
// Checker in one batch. The wiring:
//
//	st, _ := rules.NewStore(rules.DefaultStoreConfig("/etc/ringlimit/rules"))
//	srv, err := envoy.New(node.Checker(), st, envoy.DefaultConfig()) // or a client.Checker
//	if err != nil { ... }
//	srv.Register(grpcServer)
//
// See docs/envoy.md for the Envoy side of the configuration and for how
// errors reach Envoy.
package envoy
