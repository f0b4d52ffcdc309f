package peer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Clock tells the time. The transport reads it for the instants it passes to
// its Handler and to time its RPCs; tests replace it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// SystemClock is the Clock of the real node: time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// TransportConfig configures a Transport. Start from DefaultTransportConfig
// and set Self.
type TransportConfig struct {
	// Self is this node's name (its memberlist name). Required. Envelopes
	// arriving for another name are rejected.
	Self string
	// Clock tells the time. Nil is SystemClock.
	Clock Clock
	// Logger receives the transport's logs. Nil discards them.
	Logger *slog.Logger
	// Registerer, when set, registers the transport's metrics (see
	// metrics.go). Several transports in one process need distinct
	// registries or prometheus.WrapRegistererWith a "node" label. Nil
	// registers nothing.
	Registerer prometheus.Registerer

	// QueueLen is the capacity, in envelopes, of each peer's send queue. Send
	// drops (and counts) an envelope whose queue is full. Default 4096: about
	// four seconds of a busy node's flushes, far more than one RPC's worth.
	QueueLen int
	// MaxQueueBytes bounds the envelopes waiting in all the peers' send
	// queues, by their encoded size in bytes; one peer's queue takes at most
	// half of it, so that a stuck peer leaves the others room. Send drops
	// (and counts, reason queue_bytes) an envelope that would exceed either,
	// as it drops one whose queue is full. A queued envelope takes 3 to 7
	// times its encoded size in heap (TestSendQueueBytesBounded), so the
	// default, 4 MiB, bounds the queues' heap to about 28 MiB (issue 16:
	// under a flood of new keys, 4096 envelopes of up to 1000 items a peer
	// were unbounded in bytes). 4 MiB is also about 15 s of the flushes of a
	// flood of 6000 new keys a second, and 4 of the batches a sender sends
	// in one call.
	MaxQueueBytes int64
	// MaxBatch is the most envelopes one Deliver RPC carries; a peer's sender
	// coalesces whatever is queued, up to this, into one call. Default 256.
	MaxBatch int
	// MaxBatchBytes is the most bytes (protobuf-encoded envelopes) one
	// Deliver RPC carries, one envelope at least. Default 1 MiB, well under
	// the receiving gRPC server's MaxRecvMsgSize (4 MiB by default).
	MaxBatchBytes int
	// RPCTimeout is the deadline of every Deliver RPC, connection included.
	// A call that misses it drops its batch and reports the peer Unreachable.
	// Default 1s: a LAN round trip is under a millisecond; a second means the
	// peer is stuck, and the sync core has its own, shorter, timeouts.
	RPCTimeout time.Duration

	// MaxRecvEnvelopes is the most envelopes the server accepts in one
	// Deliver; a larger request fails with InvalidArgument. Default 4096.
	MaxRecvEnvelopes int
	// MaxEnvelopeBytes is the largest envelope (protobuf-encoded) the server
	// accepts; larger ones are rejected one by one. Default 1 MiB. The whole
	// request is also bounded by the gRPC server's MaxRecvMsgSize (4 MiB by
	// default), which the node facade configures.
	MaxEnvelopeBytes int

	// Credentials secure the connections to peers. Nil dials in plain text
	// (insecure.NewCredentials). With credentials, each connection's
	// authority, hence its TLS server name, is the peer's node name, so the
	// credentials can check that the server's certificate names the member
	// dialled: MutualTLS.ClientCredentials does, and the peer port's server
	// then uses MutualTLS.ServerCredentials and Authorize
	// AuthorizeCertificate.
	Credentials credentials.TransportCredentials
	// DialOptions are added to every peer connection's options, after the
	// credentials and the reconnection backoff (100ms doubling to 1s rather
	// than gRPC's 120s, so a peer that comes back is soon reached again),
	// which they may override: keepalive parameters, interceptors, ...
	DialOptions []grpc.DialOption
	// Authorize, when set, is asked for every envelope received whether the
	// caller behind ctx may speak as from (e.g. the mTLS client certificate
	// names from); an error rejects the envelope. Nil accepts any current
	// member. It must not block. AuthorizeCertificate is the mutual-TLS
	// check.
	Authorize func(ctx context.Context, from string) error
}

// DefaultTransportConfig returns the default configuration; set Self.
func DefaultTransportConfig() TransportConfig {
	return TransportConfig{
		QueueLen:         4096,
		MaxQueueBytes:    4 << 20,
		MaxBatch:         256,
		MaxBatchBytes:    1 << 20,
		RPCTimeout:       time.Second,
		MaxRecvEnvelopes: 4096,
		MaxEnvelopeBytes: 1 << 20,
	}
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c TransportConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Self == "":
		return bad("Self is empty")
	case c.QueueLen < 1:
		return bad("QueueLen %d < 1", c.QueueLen)
	case c.MaxQueueBytes < 1:
		return bad("MaxQueueBytes %d < 1", c.MaxQueueBytes)
	case c.MaxBatch < 1:
		return bad("MaxBatch %d < 1", c.MaxBatch)
	case c.MaxBatchBytes < 1:
		return bad("MaxBatchBytes %d < 1", c.MaxBatchBytes)
	case c.RPCTimeout <= 0:
		return bad("RPCTimeout %v <= 0", c.RPCTimeout)
	case c.MaxRecvEnvelopes < 1:
		return bad("MaxRecvEnvelopes %d < 1", c.MaxRecvEnvelopes)
	case c.MaxEnvelopeBytes < 1:
		return bad("MaxEnvelopeBytes %d < 1", c.MaxEnvelopeBytes)
	}
	return nil
}
