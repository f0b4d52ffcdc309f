package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// Client calls ringlimit nodes. It is safe for concurrent use. Create one
// with New or Dial and Close it when done.
type Client struct {
	conn    *grpc.ClientConn // nil with owner routing
	rpc     ringlimitv1.RateLimiterClient
	route   *router // with owner routing (WithOwnerRouting), else nil
	opts    options
	targets string      // for error messages
	closed  atomic.Bool // Close was called
}

// roundRobin is the gRPC service config that spreads calls over every
// address (the default, pick_first, would send them all to one).
const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// New returns a client of the nodes at addrs, without connecting: the first
// call connects. Each address is a node's gRPC address, "host:port"; a host
// name is resolved when dialled. With several addresses the calls are
// spread round-robin over those that are up. A single address may instead
// be a gRPC target with a scheme, such as "dns:///ringlimit.default.svc:7101",
// whose every resolved address is then used round-robin (a headless
// Kubernetes Service). Without WithTLS the client speaks plaintext.
//
// With WithOwnerRouting the client instead holds one connection per address
// and sends each call to the node that owns its keys (see WithOwnerRouting);
// it then needs a list of addresses, and refuses a target with a scheme.
func New(addrs []string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	var clean []string
	for _, a := range addrs {
		if a = strings.TrimSpace(a); a != "" {
			clean = append(clean, a)
		}
	}
	if len(clean) == 0 {
		return nil, ErrNoAddress
	}
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if o.ownerRouting {
		for _, a := range clean {
			if strings.Contains(a, ":///") {
				return nil, fmt.Errorf("client: address %q: owner routing needs node addresses, not a target with a scheme", a)
			}
		}
		r, err := newRouter(clean, o.partitions, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.dial...))
		if err != nil {
			return nil, err
		}
		return &Client{route: r, opts: o, targets: strings.Join(clean, ",")}, nil
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(roundRobin),
	}
	var target string
	switch {
	case len(clean) == 1 && strings.Contains(clean[0], ":///"):
		target = clean[0]
	default:
		for _, a := range clean {
			if strings.Contains(a, ":///") {
				return nil, fmt.Errorf("client: address %q: a target with a scheme must be the only address", a)
			}
		}
		// A resolver of this client's own (no global registration) that
		// hands gRPC the fixed list of addresses. Each address is its own
		// TLS server name (the host part), as if dialled alone.
		r := manual.NewBuilderWithScheme("ringlimit")
		state := resolver.State{}
		for _, a := range clean {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: a})
		}
		r.InitialState(state)
		target = r.Scheme() + ":///nodes"
		dopts = append(dopts, grpc.WithResolvers(r))
	}
	dopts = append(dopts, o.dial...)
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{
		conn:    conn,
		rpc:     ringlimitv1.NewRateLimiterClient(conn),
		opts:    o,
		targets: strings.Join(clean, ","),
	}, nil
}

// Dial is New followed by connecting: it returns once a connection to one
// of the nodes is ready, or fails when ctx ends first (the nodes are down,
// the address is wrong, TLS does not match).
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	c, err := New(addrs, opts...)
	if err != nil {
		return nil, err
	}
	if c.route != nil {
		if err := c.route.waitReady(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("client: connecting to %s: %w", c.targets, err)
		}
		return c, nil
	}
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return c, nil
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			_ = c.Close()
			return nil, fmt.Errorf("client: connecting to %s (state %s): %w", c.targets, s, ctx.Err())
		}
	}
}

// Close closes the connections. Calls in flight fail; later calls return
// ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.route != nil {
		return c.route.close()
	}
	return c.conn.Close()
}

// Check decides items in one call and returns their results in order. The
// error is for the call as a whole (see the package comment); an item the
// node could not decide is a Result with Status StatusError.
func (c *Client) Check(ctx context.Context, items ...Item) ([]Result, error) {
	if len(items) == 0 {
		return nil, ErrNoItems
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	req := &ringlimitv1.CheckRequest{Items: make([]*ringlimitv1.CheckItem, len(items))}
	for i := range items {
		if items[i].Peek && items[i].Hits != 0 {
			return nil, fmt.Errorf("%w: item %d has Hits %d", ErrPeekWithHits, i, items[i].Hits)
		}
		req.Items[i] = items[i].proto()
	}
	callCtx := ctx
	if c.opts.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	rpc, node := c.rpc, -1
	if c.route != nil {
		node = c.route.pick(items)
		rpc = c.route.nodes[node].rpc
	}
	resp, err := rpc.Check(callCtx, req)
	if err != nil {
		return nil, c.callError(callCtx, err)
	}
	if len(resp.GetItems()) != len(items) {
		return nil, fmt.Errorf("%w: %d results for %d items", ErrBadResponse, len(resp.GetItems()), len(items))
	}
	if c.route != nil {
		c.route.learn(node, items, resp)
	}
	out := make([]Result, len(items))
	for i, pr := range resp.GetItems() {
		out[i] = resultOf(pr, i, resp.GetNode())
	}
	return out, nil
}

// callError wraps a failed call's error, and the context's error when the
// context ended, so that both status.Code and errors.Is work on it. A
// DeadlineExceeded status always wraps context.DeadlineExceeded: the server
// side of the deadline often answers a moment before the local timer fires.
func (c *Client) callError(ctx context.Context, err error) error {
	if c.closed.Load() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	cerr := ctx.Err()
	if cerr == nil && status.Code(err) == codes.DeadlineExceeded {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("client: check via %s: %w (%w)", c.targets, err, cerr)
	}
	return fmt.Errorf("client: check via %s: %w", c.targets, err)
}

// Allow takes one hit (or the registered Item's Hits) from the bucket of
// (name, key) under the limit registered for name with WithLimit, and
// reports whether it was admitted. It returns ErrNoLimit for a name with no
// registered limit, an *ItemError when the node rejected the item as
// invalid, and the call's error when the node could not be asked; the
// boolean is then false and the caller picks its own policy.
func (c *Client) Allow(ctx context.Context, name, key string) (bool, error) {
	it, ok := c.opts.limits[name]
	if !ok {
		return false, fmt.Errorf("%w: %q", ErrNoLimit, name)
	}
	it.Key = key
	res, err := c.Check(ctx, it)
	if err != nil {
		return false, err
	}
	return res[0].Allowed(), res[0].Err
}
