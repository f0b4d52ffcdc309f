// Package client talks to ringlimit nodes over gRPC (the
// ringlimit.v1.RateLimiter service), for Go programs that run ringlimit as
// a separate process: standalone nodes, or a sidecar on 127.0.0.1.
//
// A Client holds one gRPC connection per node address and spreads calls
// over the addresses round-robin. It is safe for concurrent use; create one
// per program and Close it at exit.
//
// With WithOwnerRouting it sends each call to the node that owns its keys
// instead, so the node decides it without asking another: a node that does
// not own a key forwards its check to the owner (owner mode) or decides it
// from a cached view (cached and leased modes). The client learns the
// owners from the answers, which name each key's owner, one ring partition
// at a time (OwnerTable); until it knows a key's owner, and whenever that
// owner is not connected, the call goes round-robin. A wrong guess (after a
// membership change) costs a forward, never a wrong answer. On a 3-node
// loopback cluster this sends 99 % of single checks to their owner and
// halves the nodes' CPU per check (docs/bench.md):
//
//	c, err := client.New(addrs, client.WithOwnerRouting())
//
//	c, err := client.New([]string{"127.0.0.1:7101"},
//		client.WithTimeout(500*time.Millisecond),
//		client.WithLimit(client.Item{Name: "api", Limit: 100, Period: time.Minute}))
//	if err != nil { ... }
//	defer c.Close()
//
//	ok, err := c.Allow(ctx, "api", "user:42") // one hit against the "api" limit
//	if err != nil { ... }                     // the node could not be asked: apply your policy
//	if !ok { ... }                            // over the limit: answer 429
//
// Check decides a batch of items in one call and returns one Result per
// item, with the remaining permits, the reset time and, when over the limit,
// how long to wait:
//
//	res, err := c.Check(ctx,
//		client.Item{Name: "api", Key: "user:42", Hits: 1, Limit: 100, Period: time.Minute},
//		client.Item{Name: "upload_bytes", Key: "user:42", Hits: 4096, Limit: 1 << 30, Period: time.Hour,
//			Algorithm: bucket.SlidingCounter})
//
// Being over the limit is a Result (Status OverLimit), not an error. An item
// the node could not decide has Status StatusError and an *ItemError in
// Result.Err. The error of Check is for the call as a whole: the node was
// unreachable, the context ended, or the request was refused; it wraps the
// gRPC status (status.Code works on it) and, when the context ended, the
// context's error (errors.Is(err, context.DeadlineExceeded) holds whenever
// the deadline passed).
//
// The client holds no state of its own about limits: every decision is the
// node's. What Allow does when the node cannot be reached is the caller's
// choice (fail open or closed); the node's own partition policy applies only
// once the call has reached a node.
package client
