package peer

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons an envelope is dropped on the sending side (label "reason" of
// ringlimit_peer_envelopes_dropped_total).
const (
	dropQueueFull   = "queue_full"   // the peer's send queue was full
	dropQueueBytes  = "queue_bytes"  // over MaxQueueBytes (the peer's share, or all queues')
	dropUnknownPeer = "unknown_peer" // no such member, or no address for it
	dropSelf        = "self"         // addressed to this node
	dropRPCError    = "rpc_error"    // its Deliver RPC failed
	dropPeerGone    = "peer_gone"    // still queued when the peer left
	dropClosed      = "closed"       // sent after Close
)

// Reasons an envelope is rejected on the receiving side (label "reason" of
// ringlimit_peer_envelopes_rejected_total).
const (
	rejectUnknownSender  = "unknown_sender"  // From is not a current member
	rejectIncarnation    = "incarnation"     // not the incarnation From advertises in gossip
	rejectWrongRecipient = "wrong_recipient" // To is not this node
	rejectTooLarge       = "too_large"       // over MaxEnvelopeBytes
	rejectUnauthorized   = "unauthorized"    // Authorize refused it
	rejectNil            = "nil"             // a nil envelope
)

// transportMetrics are a Transport's Prometheus metrics:
//
//	ringlimit_peer_envelopes_sent_total                 envelopes in Deliver RPCs that succeeded
//	ringlimit_peer_envelopes_received_total             envelopes accepted and handed to the Handler
//	ringlimit_peer_envelopes_dropped_total{reason}      outgoing envelopes dropped (queue_full, rpc_error, ...)
//	ringlimit_peer_envelopes_rejected_total{reason}     incoming envelopes rejected (unknown_sender, ...)
//	ringlimit_peer_deliver_duration_seconds{peer}       Deliver RPC latency, failures included
//	ringlimit_peer_deliver_errors_total{peer}           failed Deliver RPCs
//	ringlimit_peer_deliver_batch_envelopes              envelopes per Deliver RPC sent
//
// The peer label takes member names only, and a peer's series are deleted
// when it leaves, so its cardinality is bounded by the cluster's size.
type transportMetrics struct {
	sent        prometheus.Counter
	received    prometheus.Counter
	dropped     *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	rpcDuration *prometheus.HistogramVec
	rpcErrors   *prometheus.CounterVec
	batchSize   prometheus.Histogram
}

func newTransportMetrics() *transportMetrics {
	return &transportMetrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_envelopes_sent_total",
			Help: "Envelopes carried by Deliver RPCs to peers that succeeded.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_peer_envelopes_received_total",
			Help: "Envelopes received from peers and handed to the coordination core.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_peer_envelopes_dropped_total",
			Help: "Outgoing envelopes dropped, by reason (queue_full, queue_bytes, unknown_peer, self, rpc_error, peer_gone, closed).",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_peer_envelopes_rejected_total",
			Help: "Incoming envelopes rejected, by reason (unknown_sender, wrong_recipient, too_large, unauthorized, nil).",
		}, []string{"reason"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ringlimit_peer_deliver_duration_seconds",
			Help: "Latency of Deliver RPCs to each peer, failed calls included.",
			// 50µs to ~1.6s: loopback calls take tens of microseconds, the
			// default RPC deadline is one second.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"peer"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_peer_deliver_errors_total",
			Help: "Deliver RPCs to each peer that failed (their envelopes are dropped).",
		}, []string{"peer"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringlimit_peer_deliver_batch_envelopes",
			Help:    "Envelopes per Deliver RPC sent.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 to 4096
		}),
	}
}

// register registers every metric with r; nil registers none.
func (m *transportMetrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.sent, m.received, m.dropped, m.rejected, m.rpcDuration, m.rpcErrors, m.batchSize} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("peer: registering metrics: %w", err)
	}
	return nil
}

// forgetPeer deletes the series of a peer that left.
func (m *transportMetrics) forgetPeer(name string) {
	m.rpcDuration.DeleteLabelValues(name)
	m.rpcErrors.DeleteLabelValues(name)
}
