package bucket

import (
	"errors"
	"time"
)

// stub stands in for an algorithm under construction. TEMPORARY: removed when
// every algorithm has landed.
type stub struct{ l Limit }

var errStub = errors.New("bucket: algorithm under construction")

func (s *stub) Take(time.Time, int64) (Decision, error) { return Decision{}, errStub }
func (s *stub) Drain(time.Time, int64) error            { return errStub }
func (s *stub) Refund(time.Time, int64) error           { return errStub }
func (s *stub) Reconfigure(time.Time, Limit) error      { return errStub }
func (s *stub) Merge(time.Time, Bucket) error           { return errStub }
func (s *stub) Config() Limit                           { return s.l }
func (s *stub) Idle(time.Time) bool                     { return true }
func (s *stub) Clone() Bucket                           { c := *s; return &c }
func (s *stub) AppendBinary(b []byte) ([]byte, error)   { return appendLimit(b, s.l), nil }
