package sync

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The protocol between nodes (proto/ringlimit/peer/v1/peer.proto) is one-way
// messages, like raft's. Per (sender, owner) pair:
//
//	Flush{seq, items}    -> owner drains hits, counts demand, merges views,
//	                        refunds returned lease tokens, grants leases
//	FlushAck{seq, items} <- the authoritative state of every key, in order
//	Push{items}          <- fresh states of changed keys the receiver asked
//	                        about, at most once per FlushInterval
//	Forward{id, items}   -> owner-mode checks, batched
//	ForwardReply{id}     <- their decisions (a cached-mode check's with the
//	                        key's state and share, cached.go's keepView)
//	Handoff{seq, items}  -> states of keys whose owner changed; with
//	                        leaving, the sender's leave (leave.go)
//	HandoffAck{seq}      <- merged
//	Backup{seq, items,   -> an owner's changed states, to the member that
//	  ask_members}          takes its keys over if it fails (backup.go);
//	                        under a join hold, to the old target too,
//	                        naming the joiners (fence.go)
//	BackupAck{seq,       <- kept; which of ask_members are on the
//	  known_members}        receiver's ring
//	ClockProbe{}         <> nothing but the envelope's clock fields, to a
//	                        peer sent nothing else for a second (clock.go)
//	ClockProbe{echo,     -> after taking over a failed member's partitions,
//	  taking_over}          or to renew the ownership lease: answered at
//	                        once with a ClockProbe{} echoing the request's
//	                        reading, which confirms the takeover (confirm.go)
//	                        and renews the lease (ownerlease.go); the
//	                        members named are echoed nothing more
//
// Every envelope may carry the sender's clock, correction and measure of
// the receiver (clock.go): bucket states in it are on the sender's cluster
// time, which the receiver shifts to its own when they differ. It may also
// echo the latest reading of the receiver's clock the sender received
// (clock_echo_ns): the receiver's ownership lease (ownerlease.go).
//
// One flush per pair is in flight at a time (stop-and-wait); it is sent
// again with the same seq after RequestTimeout, and the owner applies each
// (incarnation, seq) once.

// ErrNotOwner is reported by a forwarded check whose receiver does not own
// the key (the rings of the two nodes disagree for a moment).
var ErrNotOwner = errors.New("sync: receiver does not own the key")

// errWireLimit is returned for a limit that cannot come from bucket.Limit.
var errWireLimit = errors.New("sync: malformed limit")

// limitToWire converts l to its message.
func limitToWire(l bucket.Limit) *peerv1.Limit {
	return &peerv1.Limit{
		Algorithm:     uint32(l.Algorithm),
		Limit:         l.Limit,
		PeriodNs:      int64(l.Period),
		Burst:         l.Burst,
		MaxWaitNs:     int64(l.MaxWait),
		MinGapNs:      int64(l.MinGap),
		CountRejected: l.CountRejected,
		WarmUpNs:      int64(l.WarmUp),

		MaxBurstMillis:  l.MaxBurstMillis,
		ColdFactorMilli: uint32(l.ColdFactorMilli),
	}
}

// limitFromWire converts m back to a valid limit, or returns an error.
func limitFromWire(m *peerv1.Limit) (bucket.Limit, error) {
	if m == nil || m.Algorithm > math.MaxUint8 || m.ColdFactorMilli > math.MaxUint16 {
		return bucket.Limit{}, errWireLimit
	}
	l := bucket.Limit{
		Algorithm:     bucket.Algorithm(m.Algorithm),
		Limit:         m.Limit,
		Period:        time.Duration(m.PeriodNs),
		Burst:         m.Burst,
		MaxWait:       time.Duration(m.MaxWaitNs),
		MinGap:        time.Duration(m.MinGapNs),
		CountRejected: m.CountRejected,
		WarmUp:        time.Duration(m.WarmUpNs),

		MaxBurstMillis:  m.MaxBurstMillis,
		ColdFactorMilli: uint16(m.ColdFactorMilli),
	}
	if err := l.Validate(); err != nil {
		return bucket.Limit{}, err
	}
	return l, nil
}

// decisionIntoWire writes an answer's message into m, a new (zero) message.
func decisionIntoWire(m *peerv1.Decision, d bucket.Decision, err error) {
	m.Allowed = d.Allowed
	m.Limit = d.Limit
	m.Remaining = d.Remaining
	m.RetryAfterNs = int64(d.RetryAfter)
	m.WaitNs = int64(d.Wait)
	if !d.ResetAt.IsZero() {
		m.ResetAtNs = d.ResetAt.UnixNano()
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNotOwner):
		m.Error = peerv1.ErrorCode_ERROR_CODE_NOT_OWNER
	case errors.Is(err, check.ErrLeaving):
		m.Error = peerv1.ErrorCode_ERROR_CODE_LEAVING
	default:
		m.Error = peerv1.ErrorCode_ERROR_CODE_INVALID
		m.ErrorMessage = err.Error()
	}
	if err != nil {
		m.Allowed = false
	}
}

// remoteError is an error reported by the owner of a forwarded check.
type remoteError struct{ msg string }

func (e *remoteError) Error() string { return "sync: owner: " + e.msg }

// decisionFromWire converts a forwarded check's answer back. The error is
// ErrNotOwner or ErrLeaving when the receiver could not decide as owner (the
// caller applies the partition policy), or the owner's error otherwise.
func decisionFromWire(m *peerv1.Decision) (bucket.Decision, error) {
	if m == nil {
		return bucket.Decision{}, fmt.Errorf("%w: missing decision", errWireLimit)
	}
	d := bucket.Decision{
		Allowed:    m.Allowed,
		Limit:      m.Limit,
		Remaining:  max(0, m.Remaining),
		RetryAfter: time.Duration(max(0, m.RetryAfterNs)),
		Wait:       time.Duration(max(0, m.WaitNs)),
	}
	if m.ResetAtNs != 0 {
		d.ResetAt = time.Unix(0, m.ResetAtNs)
	}
	switch m.Error {
	case peerv1.ErrorCode_ERROR_CODE_NONE:
		return d, nil
	case peerv1.ErrorCode_ERROR_CODE_NOT_OWNER:
		return bucket.Decision{}, ErrNotOwner
	case peerv1.ErrorCode_ERROR_CODE_LEAVING:
		return bucket.Decision{}, check.ErrLeaving
	}
	return bucket.Decision{}, &remoteError{m.ErrorMessage}
}
