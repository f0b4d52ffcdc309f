package client

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DefaultTimeout bounds each call whose context has no earlier deadline: a
// little longer than a node's own default check timeout (2s), so that a
// node that is slow to decide answers with its own error first.
const DefaultTimeout = 3 * time.Second

// Option configures a Client; pass options to New or Dial.
type Option func(*options)

type options struct {
	creds   credentials.TransportCredentials // nil: plaintext
	timeout time.Duration                    // <= 0: none
	limits  map[string]Item                  // Allow's limits by name
	dial    []grpc.DialOption                // appended last
	// ownerRouting sends each call to its keys' owner (WithOwnerRouting),
	// with an OwnerTable of partitions partitions (0: the default).
	ownerRouting bool
	partitions   int
}

func defaultOptions() options {
	return options{timeout: DefaultTimeout, limits: map[string]Item{}}
}

// WithTLS makes the client speak TLS with cfg: RootCAs to verify the nodes'
// certificates (nil: the system's roots), Certificates for mutual TLS,
// ServerName when the nodes' certificates do not name the dialled host. A
// nil cfg is the zero tls.Config. Without WithTLS or
// WithTransportCredentials the client speaks plaintext, which suits a
// sidecar on 127.0.0.1.
func WithTLS(cfg *tls.Config) Option {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithTransportCredentials sets the gRPC transport credentials (TLS, ALTS,
// ...), replacing WithTLS.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = creds }
}

// WithTimeout bounds every call whose context has no earlier deadline.
// Zero or negative leaves calls bounded by their context only. Default
// DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithLimit registers the limit Allow applies to it.Name (or, for an item
// that names a rule and no Name, to it.Rule): Allow(ctx, name, key) checks
// it with Key set to key and, when it.Hits is zero, one hit. A later
// WithLimit of the same name replaces an earlier one.
func WithLimit(it Item) Option {
	name := it.Name
	if name == "" {
		name = it.Rule
	}
	return func(o *options) { o.limits[name] = it }
}

// WithDialOptions appends gRPC dial options (interceptors, keepalive,
// a custom dialer, ...) after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithOwnerRouting makes the client send each call straight to the node
// that owns its items' keys, so that the node decides them itself instead of
// forwarding them to their owner (owner mode) or deciding them from a cached
// view (cached and leased modes): each check then costs the cluster one
// network hop instead of three, and is decided exactly in every mode. A
// call of several items goes to the owner of most of them.
//
// The client learns the owners from the answers (every answer names the
// owner of each item's key, and the node that answered) in an OwnerTable of
// WithPartitionCount partitions, and holds one connection per address
// instead of a round-robin balancer. A call whose owner is not known yet,
// is at no address given to New, or is not connected, goes round-robin over
// the connected addresses. A guess that is wrong (the membership changed,
// the partition count differs) costs a forward, never a wrong answer: a
// node forwards what it does not own. Items that name a Rule are not
// routed by their key.
//
// Owner routing needs New to be given the nodes' addresses, not a target
// with a scheme.
func WithOwnerRouting() Option {
	return func(o *options) { o.ownerRouting = true }
}

// WithPartitionCount sets the number of ring partitions of the cluster, for
// WithOwnerRouting: ring.partition_count in a node's GET /v1/cluster.
// Zero or less means DefaultPartitionCount, the nodes' default.
func WithPartitionCount(n int) Option {
	return func(o *options) { o.partitions = n }
}
