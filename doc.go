// Package ringlimit runs a node of a cluster-coordinated rate limiter
// in-process: the same node that the cmd/node binary runs, for programs that
// embed it (a sidecar in the same process) and for tests that start several
// nodes in one process.
//
// A Node serves the public API (gRPC ringlimit.v1.RateLimiter/Check and its
// HTTP/JSON twin POST /v1/check, with /healthz, /readyz, /v1/cluster and
// /metrics), finds the other nodes by gossip (package peer over
// hashicorp/memberlist), carries the coordination messages between them over
// gRPC (package peer), and drives the coordination core (package sync)
// through peer.Driver, which applies every input in one order. The core
// decides; package api decodes and validates the public API's calls; this
// package starts, wires, reports and stops.
//
//	cfg := ringlimit.DefaultConfig()
//	cfg.Name = "node-a"
//	cfg.Gossip.Seeds = []string{"10.0.0.2:7946"}
//	cfg.Peer.Secret = secret // the cluster's: the peers authenticate with it
//	n, err := ringlimit.Start(ctx, cfg)
//	if err != nil { ... }
//	defer n.Shutdown(context.Background()) // drain, hand off, leave
//
//	resp, err := n.Check(ctx, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{{
//		Name: "api", UniqueKey: "user:42", Hits: proto.Int64(1), Limit: 100,
//		Period: durationpb.New(time.Minute),
//	}}})
//
// A bucket is identified cluster-wide by (name, unique_key), joined by a NUL
// byte (Key), and its algorithm: a bucket of another algorithm than the
// token bucket has a key of its own. Names may not contain NUL. Nothing here is process-global:
// every node has its own Prometheus registry, logger and clock, so several
// nodes run side by side in one process.
package ringlimit
