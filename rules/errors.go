package rules

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of the package.
var (
	// ErrInvalid is wrapped by every *ParseError: the rules are invalid.
	ErrInvalid = errors.New("rules: invalid rules")
	// ErrUnknownDomain: Override was asked for a domain the set lacks.
	ErrUnknownDomain = errors.New("rules: unknown domain")
	// ErrInvalidOverride: Override was given an invalid limit.
	ErrInvalidOverride = errors.New("rules: invalid limit override")
)

// ParseError reports one problem of a rules file, at a line. It wraps
// ErrInvalid.
type ParseError struct {
	// File is the file's name as given to Parse or found by Load.
	File string
	// Line and Column locate the problem, both counted from 1; zero when
	// unknown.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

// Error returns "file:line:column: msg", leaving out what is unknown.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *ParseError) Unwrap() error { return ErrInvalid }

// ErrorList is every problem found in the rules, in file and line order. It
// is the error of Parse and Load when the rules are invalid; errors.As finds
// its *ParseError items and errors.Is finds ErrInvalid.
type ErrorList []*ParseError

// Error returns the problems one per line.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the items, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}
