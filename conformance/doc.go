// Package conformance holds the conformance test of ringlimit's Envoy rate
// limit service against Lyft's reference implementation
// (github.com/envoyproxy/ratelimit), run in-process over Debian's
// redis-server. It is a module of its own so that ringlimit's go.mod does
// not depend on Lyft's service. Run it with `make conformance`; the
// results and every remaining difference are in docs/envoy.md.
package conformance
