package sync

import (
	rlcheck "github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Mode is check.Mode. The vocabulary of a check lives in package check;
// these aliases keep the core's unqualified names compiling while other
// branches still use them. The rewrite tool (see the commit "sync, sim: the
// vocabulary of a check from package check") replaces every use with
// check's name and deletes them. (The import is renamed here because sync's
// tests declare a func check; the tool renames that helper.)
type Mode = rlcheck.Mode

// Policy is check.Policy.
type Policy = rlcheck.Policy

// Request is check.Request.
type Request = rlcheck.Request

// Response is check.Response.
type Response = rlcheck.Response

// The modes and policies of package check.
const (
	ModeDefault      = rlcheck.ModeDefault
	ModeLocal        = rlcheck.ModeLocal
	ModeOwner        = rlcheck.ModeOwner
	ModeCached       = rlcheck.ModeCached
	ModeLeased       = rlcheck.ModeLeased
	PolicyDefault    = rlcheck.PolicyDefault
	PolicyFailOpen   = rlcheck.PolicyFailOpen
	PolicyFailClosed = rlcheck.PolicyFailClosed
	PolicyLocalShare = rlcheck.PolicyLocalShare
)

// modeNames and policyNames have one entry per mode and policy; only their
// lengths are read.
var (
	modeNames   [rlcheck.ModeLeased + 1]struct{}
	policyNames [rlcheck.PolicyLocalShare + 1]struct{}
)

// The errors of package check.
var (
	ErrUnknownMode   = rlcheck.ErrUnknownMode
	ErrUnknownPolicy = rlcheck.ErrUnknownPolicy
	ErrEmptyKey      = rlcheck.ErrEmptyKey
	ErrKeyTooLong    = rlcheck.ErrKeyTooLong
	ErrNoMembers     = rlcheck.ErrNoMembers
	ErrLeaving       = rlcheck.ErrLeaving
)

// ParseMode is check.ParseMode.
func ParseMode(s string) (Mode, error) { return rlcheck.ParseMode(s) }

// ParsePolicy is check.ParsePolicy.
func ParsePolicy(s string) (Policy, error) { return rlcheck.ParsePolicy(s) }

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
