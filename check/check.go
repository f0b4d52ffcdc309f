package check

import (
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/bucket"
)

// The errors of a check that could not be decided, reported in Response.Err
// (and by the public APIs as an item's error). Over the limit is not an
// error: it is a Decision.
var (
	// ErrUnknownMode: a mode outside the enumeration.
	ErrUnknownMode = errors.New("check: unknown mode")
	// ErrUnknownPolicy: a policy outside the enumeration.
	ErrUnknownPolicy = errors.New("check: unknown partition policy")
	// ErrEmptyKey: a request without a key.
	ErrEmptyKey = errors.New("check: empty key")
	// ErrKeyTooLong: a key longer than the node's maximum key length.
	ErrKeyTooLong = errors.New("check: key too long")
	// ErrNoMembers: the node knows no members yet (not even itself).
	ErrNoMembers = errors.New("check: no members")
	// ErrLeaving: the node is handing off and takes no new checks as owner.
	ErrLeaving = errors.New("check: node is leaving")
)

// Request is one item of a check.
type Request struct {
	// Key identifies the bucket cluster-wide; the ring hashes it to its owner.
	// The public API builds it from the limit's name and the client's unique
	// key.
	Key string
	// Hits is the number of permits asked for; zero peeks.
	Hits int64
	// Limit configures the bucket; its zero Algorithm is the token bucket. A
	// live bucket whose limit differs is reconfigured
	// (bucket.Bucket.Reconfigure).
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
	// live bucket. A request whose limit was not applied (a peek, a bucket
	// that could not admit it) is not reconfigured, and the Decision's Limit
	// is the one in force.
	Reconfigured bool
	// Err is set when the request could not be decided (invalid input, no
	// members). An error is never reported as allowed.
	Err error
}

// Status returns the outcome of r: StatusError when r.Err is set, else
// StatusUnderLimit or StatusOverLimit by the Decision.
func (r *Response) Status() Status {
	switch {
	case r.Err != nil:
		return StatusError
	case r.Allowed:
		return StatusUnderLimit
	}
	return StatusOverLimit
}

// Status is the outcome of one item of a check, as the public APIs report
// it. The zero value is not a success.
type Status uint8

// The statuses. The numeric values are part of the wire format.
const (
	// StatusUnspecified is never sent by a node; an answer that has it was
	// not filled in.
	StatusUnspecified Status = 0
	// StatusUnderLimit: the hits were admitted.
	StatusUnderLimit Status = 1
	// StatusOverLimit: the hits were rejected; the answer's retry-after says
	// when the same request would be admitted.
	StatusOverLimit Status = 2
	// StatusError: the item could not be decided; the answer says why.
	StatusError Status = 3
)

var statusNames = [...]string{StatusUnspecified: "unspecified", StatusUnderLimit: "under_limit", StatusOverLimit: "over_limit", StatusError: "error"}

// String returns the status's name as the JSON API spells it:
// "under_limit", "over_limit" or "error" ("unspecified" for the zero
// value); "status(N)" for a value outside the enumeration.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}
