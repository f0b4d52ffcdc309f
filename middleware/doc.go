// Package middleware limits HTTP traffic with ringlimit: RateLimit wraps a
// net/http handler, and AuthRequest serves nginx's auth_request subrequests
// so that a fleet of nginx servers shares one limit per client instead of
// each enforcing its own limit_req zone.
//
// Both check every request's client key (an address, a header, or any
// function of the request) against a fixed limit or a named rule, through a
// Checker: an embedded node, or a client of a node cluster. The caller's
// side:
//
//	mw, err := middleware.RateLimit(node.Checker(), middleware.Options{
//		Name:  "http",
//		Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Minute, Burst: 20},
//		Key:   middleware.ClientIP(1), // behind one load balancer
//	})
//	if err != nil { ... }
//	http.ListenAndServe(":8080", mw(mux))
//
// See docs/middleware.md for the headers, the failure policy and the nginx
// configuration.
package middleware
