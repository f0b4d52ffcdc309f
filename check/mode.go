package check

import (
	"fmt"
	"strings"
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

// String returns the mode's name: "default", "local", "owner", "cached" or
// "leased"; "mode(N)" for a value outside the enumeration.
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Valid reports whether m is in the enumeration (ModeDefault included).
func (m Mode) Valid() bool { return int(m) < len(modeNames) }

// String returns the policy's name: "default", "fail-open", "fail-closed"
// or "local-share"; "policy(N)" for a value outside the enumeration.
func (p Policy) String() string {
	if p.Valid() {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// Valid reports whether p is in the enumeration (PolicyDefault included).
func (p Policy) Valid() bool { return int(p) < len(policyNames) }

// ParseMode returns the mode named s ("local", "owner", "cached",
// "leased"); "" and "default" are ModeDefault. An unknown name is an error
// that wraps ErrUnknownMode and lists the valid names.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeDefault, nil
	}
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want %s)", ErrUnknownMode, s, strings.Join(modeNames[1:], ", "))
}

// ParsePolicy returns the policy named s ("fail-open", "fail-closed",
// "local-share"); "" and "default" are PolicyDefault. An unknown name is an
// error that wraps ErrUnknownPolicy and lists the valid names.
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyDefault, nil
	}
	for p, name := range policyNames {
		if name == s {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want %s)", ErrUnknownPolicy, s, strings.Join(policyNames[1:], ", "))
}
