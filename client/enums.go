package client

import (
	"errors"
	"fmt"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// Algorithm selects the rate-limiting algorithm of an Item. The values are
// those of ringlimitv1.Algorithm (and of bucket.Algorithm); the names those of
// the node's JSON API and flags. The zero value, AlgorithmDefault, is the
// token bucket.
type Algorithm int32

// The algorithms; see docs/algorithms.md.
const (
	// AlgorithmDefault leaves the choice to the node: the token bucket.
	AlgorithmDefault Algorithm = iota
	// TokenBucket: Burst tokens, refilled at Limit per Period.
	TokenBucket
	// LeakyMeter is the leaky bucket as a meter (policing).
	LeakyMeter
	// LeakyQueue is the leaky bucket as a queue (shaping): admitted callers
	// are told to wait (Result.Wait), at most Item.MaxWait.
	LeakyQueue
	// FixedWindow admits Limit hits per fixed window of length Period.
	FixedWindow
	// SlidingLog admits Limit hits in every rolling window of length Period,
	// exactly.
	SlidingLog
	// SlidingCounter approximates a rolling window from two fixed windows.
	SlidingCounter
	// GCRA is the generic cell rate algorithm: token-bucket admissions.
	GCRA
	// Concurrency is a semaphore of Limit permits, acquired with Hits and
	// returned with Release; an unreleased permit expires after Period.
	Concurrency
	// SmoothBursty is Guava's SmoothBursty.
	SmoothBursty
	// SmoothWarmingUp is Guava's SmoothWarmingUp (needs Item.WarmUp).
	SmoothWarmingUp
)

var algorithmNames = [...]string{
	AlgorithmDefault: "default",
	TokenBucket:      "token_bucket",
	LeakyMeter:       "leaky_meter",
	LeakyQueue:       "leaky_queue",
	FixedWindow:      "fixed_window",
	SlidingLog:       "sliding_log",
	SlidingCounter:   "sliding_counter",
	GCRA:             "gcra",
	Concurrency:      "concurrency",
	SmoothBursty:     "smooth_bursty",
	SmoothWarmingUp:  "smooth_warming_up",
}

// String returns the algorithm's name, as the node's JSON API spells it
// ("token_bucket"), or "default".
func (a Algorithm) String() string { return enumName(algorithmNames[:], int32(a), "algorithm") }

// Mode is the consistency mode of an Item (docs/consistency.md). The zero
// value, ModeDefault, uses the node's default mode.
type Mode int32

// The consistency modes.
const (
	// ModeDefault uses the node's default mode (its --mode flag).
	ModeDefault Mode = iota
	// ModeLocal decides on the node that receives the call alone: N nodes
	// admit up to N times the limit.
	ModeLocal
	// ModeOwner forwards to the key's owner and returns its answer: exact,
	// but unavailable when the owner cannot be reached.
	ModeOwner
	// ModeCached decides from the cached owner state plus local pending hits:
	// bounded drift.
	ModeCached
	// ModeLeased spends a share of the owner's tokens leased to the node:
	// never over the limit.
	ModeLeased
)

var modeNames = [...]string{ModeDefault: "default", ModeLocal: "local", ModeOwner: "owner", ModeCached: "cached", ModeLeased: "leased"}

// String returns the mode's name: "default", "local", "owner", "cached" or
// "leased".
func (m Mode) String() string { return enumName(modeNames[:], int32(m), "mode") }

// Policy is what a node does with an Item whose owner it cannot reach. The
// zero value, PolicyDefault, uses the node's default policy.
type Policy int32

// The partition policies.
const (
	// PolicyDefault uses the node's default policy (its --policy flag).
	PolicyDefault Policy = iota
	// FailOpen admits.
	FailOpen
	// FailClosed rejects.
	FailClosed
	// LocalShare decides on a local bucket with limit / live members.
	LocalShare
)

var policyNames = [...]string{PolicyDefault: "default", FailOpen: "fail-open", FailClosed: "fail-closed", LocalShare: "local-share"}

// String returns the policy's name: "default", "fail-open", "fail-closed" or
// "local-share".
func (p Policy) String() string { return enumName(policyNames[:], int32(p), "policy") }

// Status is the outcome of one Item. The zero value is not a success.
type Status int32

// The statuses.
const (
	// StatusUnspecified is never sent by a node; a Result that has it was
	// not filled in.
	StatusUnspecified Status = iota
	// UnderLimit: the hits were admitted.
	UnderLimit
	// OverLimit: the hits were rejected; see Result.RetryAfter.
	OverLimit
	// StatusError: the item could not be decided; see Result.Err.
	StatusError
)

var statusNames = [...]string{StatusUnspecified: "unspecified", UnderLimit: "under_limit", OverLimit: "over_limit", StatusError: "error"}

// String returns the status's name as the node's JSON API spells it:
// "under_limit", "over_limit" or "error" ("unspecified" for the zero value).
func (s Status) String() string { return enumName(statusNames[:], int32(s), "status") }

// ErrUnknownName is wrapped by the errors of ParseAlgorithm, ParseMode and
// ParsePolicy.
var ErrUnknownName = errors.New("client: unknown name")

// ParseAlgorithm returns the algorithm named s ("token_bucket", "gcra", ...);
// "" and "default" are AlgorithmDefault.
func ParseAlgorithm(s string) (Algorithm, error) {
	v, err := parseEnum(algorithmNames[:], s, "algorithm")
	return Algorithm(v), err
}

// ParseMode returns the mode named s ("local", "owner", "cached",
// "leased"); "" and "default" are ModeDefault.
func ParseMode(s string) (Mode, error) {
	v, err := parseEnum(modeNames[:], s, "mode")
	return Mode(v), err
}

// ParsePolicy returns the policy named s ("fail-open", "fail-closed",
// "local-share"); "" and "default" are PolicyDefault.
func ParsePolicy(s string) (Policy, error) {
	v, err := parseEnum(policyNames[:], s, "policy")
	return Policy(v), err
}

func enumName(names []string, v int32, kind string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

func parseEnum(names []string, s, kind string) (int32, error) {
	if s == "" {
		return 0, nil
	}
	for i, n := range names {
		if n == s {
			return int32(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %s %q (want one of %q)", ErrUnknownName, kind, s, names[1:])
}

// The wire enumerations, converted without a table: the values are equal
// (pinned by TestEnumsMatchTheWire).
func (a Algorithm) proto() ringlimitv1.Algorithm { return ringlimitv1.Algorithm(a) }
func (m Mode) proto() ringlimitv1.Mode           { return ringlimitv1.Mode(m) }
func (p Policy) proto() ringlimitv1.Policy       { return ringlimitv1.Policy(p) }
