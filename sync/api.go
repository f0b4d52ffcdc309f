package sync

import (
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// Mode is the consistency mode of a check, chosen per request with a node
// default. See docs/consistency.md.
type Mode uint8

// The consistency modes. The numeric values are part of the wire format.
const (
	// ModeDefault asks for the node's default mode.
	ModeDefault Mode = 0
	// ModeLocal decides on the receiving node alone, without coordination:
	// N nodes admit up to N times the limit.
	ModeLocal Mode = 1
	// ModeOwner forwards the check to the key's owner and waits for its answer
	// (forwards are batched per owner): exact, but fails when the owner cannot
	// be reached (then the partition policy decides).
	ModeOwner Mode = 2
	// ModeCached decides from the cached owner state plus this node's pending
	// hits, which are flushed to the owner every flush interval: never waits on
	// the network, bounded drift.
	ModeCached Mode = 3
	// ModeLeased spends a share of the owner's tokens granted to this node as a
	// lease: never over the limit, even in a partition; may under-admit.
	ModeLeased Mode = 4
)

// Policy is what a node does with a check whose owner cannot be reached.
type Policy uint8

// The partition policies. The numeric values are part of the wire format.
const (
	// PolicyDefault asks for the node's default policy.
	PolicyDefault Policy = 0
	// PolicyFailOpen admits.
	PolicyFailOpen Policy = 1
	// PolicyFailClosed rejects.
	PolicyFailClosed Policy = 2
	// PolicyLocalShare decides on a local bucket whose limit is the limit
	// divided by the number of members this node can see.
	PolicyLocalShare Policy = 3
)

var modeNames = [...]string{ModeDefault: "default", ModeLocal: "local", ModeOwner: "owner", ModeCached: "cached", ModeLeased: "leased"}

var policyNames = [...]string{PolicyDefault: "default", PolicyFailOpen: "fail-open", PolicyFailClosed: "fail-closed", PolicyLocalShare: "local-share"}

// String returns the mode's name: "local", "owner", "cached" or "leased".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// String returns the policy's name: "fail-open", "fail-closed" or
// "local-share".
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParseMode returns the mode named s; "" is ModeDefault.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeDefault, nil
	}
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want local, owner, cached or leased)", ErrUnknownMode, s)
}

// ParsePolicy returns the policy named s; "" is PolicyDefault.
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyDefault, nil
	}
	for p, name := range policyNames {
		if name == s {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want fail-open, fail-closed or local-share)", ErrUnknownPolicy, s)
}

// Errors reported in Response.Err or returned by NewNode.
var (
	// ErrUnknownMode: a mode outside the enumeration.
	ErrUnknownMode = errors.New("sync: unknown mode")
	// ErrUnknownPolicy: a policy outside the enumeration.
	ErrUnknownPolicy = errors.New("sync: unknown partition policy")
	// ErrEmptyKey: a request without a key.
	ErrEmptyKey = errors.New("sync: empty key")
	// ErrKeyTooLong: a key longer than Config.MaxKeyLen.
	ErrKeyTooLong = errors.New("sync: key too long")
	// ErrNoMembers: the node knows no members yet (not even itself).
	ErrNoMembers = errors.New("sync: no members")
	// ErrLeaving: the node is handing off and takes no new checks as owner.
	ErrLeaving = errors.New("sync: node is leaving")
)

// Request is one item of a check.
type Request struct {
	// Key identifies the bucket cluster-wide; the ring hashes it to its owner.
	// The public API builds it from the limit's name and the client's unique
	// key.
	Key string
	// Hits is the number of permits asked for; zero peeks.
	Hits int64
	// Limit configures the bucket. A live bucket whose limit differs is
	// reconfigured (bucket.Bucket.Reconfigure).
	Limit bucket.Limit
	// Mode overrides the node's default consistency mode when not ModeDefault.
	Mode Mode
	// Policy overrides the node's default partition policy when not
	// PolicyDefault.
	Policy Policy
	// Lease, with Limit.Algorithm == bucket.Concurrency, names the permit
	// holder; Release returns its permits instead of acquiring.
	Lease   string
	Release bool
}

// Response is the answer to one Request.
type Response struct {
	// Decision is the bucket's answer. It is meaningful only when Err is nil.
	bucket.Decision
	// Owner is the name of the node that owns the key.
	Owner string
	// Mode is the mode the request was decided in.
	Mode Mode
	// Degraded reports that the answer was decided without the owner, by the
	// partition policy.
	Degraded bool
	// Reconfigured reports that the request changed the limit of the key's
	// live bucket (store.go's reconfigure). A request whose limit was not
	// applied (a peek, a bucket that could not admit it) is not
	// reconfigured, and the Decision's Limit is the one in force.
	Reconfigured bool
	// Err is set when the request could not be decided (invalid input, no
	// members). An error is never reported as allowed.
	Err error
}

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
