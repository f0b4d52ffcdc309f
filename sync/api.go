package sync

import (
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Transport carries messages to other nodes. The Node owns the protocol (the
// messages are the protobuf types of package peerv1, so the simulator counts
// the same bytes the real network carries); the Transport only delivers.
// Implementations: the gRPC transport in package peer, and the simulated
// network in package sim.
type Transport interface {
	// Send queues env for the node named to and returns at once: it must not
	// block, nor call back into the Node. It takes ownership of env, but the
	// message in env's body may be shared: the Node keeps some messages (a
	// flush in flight, the answer to the last flush) to send them again, and
	// never modifies a message once sent. So neither the transport nor a
	// receiver that is handed the same message in memory (Step only reads
	// it) may modify it; encoding it, concurrently too, is fine.
	// Delivery may fail, be delayed or be lost; the Node retries what needs
	// retrying on Tick. A transport that learns that to is unreachable tells
	// the Node with Unreachable.
	Send(to string, env *peerv1.Envelope)
}
