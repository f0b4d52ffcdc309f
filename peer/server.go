package peer

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// RegisterServer registers the transport's receiving side, the peerv1.Peer
// service, on s. The node facade registers it on a gRPC server of its own,
// on the peer port, whose credentials (MutualTLS.ServerCredentials, from
// certificates or SecretTLS) authenticate peers, and
// TransportConfig.Authorize (AuthorizeCertificate) ties each envelope's From
// to the client certificate.
func (t *Transport) RegisterServer(s grpc.ServiceRegistrar) {
	peerv1.RegisterPeerServer(s, &server{t: t})
}

// server implements peerv1.PeerServer for a Transport.
type server struct {
	peerv1.UnimplementedPeerServer
	t *Transport
}

// Deliver hands each acceptable envelope of req to the Handler, in order
// (see receive). Senders use Stream; Deliver serves senders that predate it
// or fall back to it.
func (s *server) Deliver(ctx context.Context, req *peerv1.DeliverRequest) (*peerv1.DeliverResponse, error) {
	if err := s.t.receive(ctx, req.GetEnvelopes()); err != nil {
		return nil, err
	}
	return &peerv1.DeliverResponse{}, nil
}

// Stream receives batches on one long-lived stream, each as Deliver would,
// in the order they were sent, until the sender closes the stream (then it
// answers) or a batch fails (then the stream fails with that batch's error).
func (s *server) Stream(st peerv1.Peer_StreamServer) error {
	// The header tells the sender at once that this node serves Stream.
	if err := st.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	ctx := st.Context()
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&peerv1.DeliverResponse{})
		}
		if err != nil {
			return err
		}
		if err := s.t.receive(ctx, req.GetEnvelopes()); err != nil {
			return err
		}
	}
}

// receive hands each acceptable envelope of one batch to the Handler, in
// order. It rejects, one by one and counted, envelopes that are nil, not
// addressed to this node, not from a current member, of another
// incarnation than the one the member advertises in gossip, larger than
// MaxEnvelopeBytes, or refused by Authorize (asked with ctx, the call's);
// the batch still succeeds, since the sender's peer is reachable (a member
// that just joined may not be known here yet; package sync retries). A batch
// of more than MaxRecvEnvelopes envelopes fails with InvalidArgument; before
// Start or after Close, batches fail with Unavailable.
func (t *Transport) receive(ctx context.Context, envs []*peerv1.Envelope) error {
	if len(envs) > t.cfg.MaxRecvEnvelopes {
		return status.Errorf(codes.InvalidArgument, "peer: %d envelopes in one batch, at most %d", len(envs), t.cfg.MaxRecvEnvelopes)
	}
	t.mu.RLock()
	h, members, closed := t.handler, t.members, t.closed
	t.mu.RUnlock()
	if h == nil || closed {
		return status.Error(codes.Unavailable, "peer: transport not running")
	}
	now := t.clock.Now()
	accepted := 0
	sized, _ := h.(sizedHandler)
	for _, env := range envs {
		size := proto.Size(env) // measured once: for MaxEnvelopeBytes and the driver's queue
		if reason := t.reject(ctx, members, env, size); reason != "" {
			t.metrics.rejected.WithLabelValues(reason).Inc()
			t.log.Debug("rejected an envelope", "reason", reason, "from", env.GetFrom(), "to", env.GetTo())
			continue
		}
		if sized != nil {
			sized.stepSized(env, int64(size))
		} else {
			h.Step(now, env)
		}
		accepted++
	}
	t.metrics.received.Add(float64(accepted))
	return nil
}

// reject returns why env, of encoded size bytes, must be rejected, or "" to
// accept it. members is the current member set.
func (t *Transport) reject(ctx context.Context, members map[string]uint64, env *peerv1.Envelope, size int) string {
	if env == nil {
		return rejectNil
	}
	if env.GetTo() != t.cfg.Self {
		return rejectWrongRecipient
	}
	inc, ok := members[env.GetFrom()]
	if !ok || env.GetFrom() == t.cfg.Self {
		return rejectUnknownSender
	}
	if size > t.cfg.MaxEnvelopeBytes {
		return rejectTooLarge
	}
	if t.cfg.Authorize != nil {
		if err := t.cfg.Authorize(ctx, env.GetFrom()); err != nil {
			return rejectUnauthorized
		}
	}
	if inc != 0 && env.GetIncarnation() != inc {
		// A restart is learnt from gossip: an incarnation the membership
		// does not vouch for would make the core take the sender for a
		// restarted process (and, if higher, ignore the real one).
		return rejectIncarnation
	}
	return ""
}
