package sim

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// The bytes metric needs the wire size of every envelope a node sends. The
// generic proto.Size walks each message through protobuf's reflection
// tables (and marks every fresh message with its type on the way), which
// made it some 5% of a coordinated run. wireSize computes the same number
// directly from the generated structs of the peer protocol.
//
// It is exact for messages without unknown fields, which is every message
// a Node builds (unknown fields come only from decoding a newer peer's
// bytes, which the simulator never does). TestWireSize checks it against
// proto.Size over randomly filled messages that set every field of every
// message type, so a field added to peer.proto without a line here fails
// that test; a body type added to the oneof falls back to proto.Size.
//
// It sizes every message in full, where proto.Size with UseCachedSize
// reused the sizes of sub-messages already sized: the same numbers, since
// a Node never modifies a message once sent (see rlsync.Transport).
//
// The rules, those of proto3 with implicit presence: a scalar field is
// written (tag, value) unless it holds its zero value (a float32 of any
// bits but +0's, a non-empty string or bytes, a true bool); a message
// field, a oneof member and every element of a repeated message field are
// written when the pointer is set, even to an empty (or nil) message, as
// tag, length, body. Every field number of the protocol is below 16, so
// its tag takes one byte, except the Envelope oneof members 16 to 18,
// whose tags take two.

// wireSize returns the encoded size of env in bytes: proto.Size(env).
func wireSize(env *peerv1.Envelope) int {
	n := sizeString(env.From) + sizeString(env.To) + sizeUint(env.Incarnation)
	switch b := env.Body.(type) {
	case nil:
	case *peerv1.Envelope_Flush:
		n += sizeField(1, sizeFlush(b.Flush))
	case *peerv1.Envelope_FlushAck:
		n += sizeField(1, sizeFlushAck(b.FlushAck))
	case *peerv1.Envelope_Push:
		n += sizeField(1, sizePush(b.Push))
	case *peerv1.Envelope_Forward:
		n += sizeField(1, sizeForward(b.Forward))
	case *peerv1.Envelope_ForwardReply:
		n += sizeField(1, sizeForwardReply(b.ForwardReply))
	case *peerv1.Envelope_Handoff:
		n += sizeField(1, sizeHandoff(b.Handoff))
	case *peerv1.Envelope_HandoffAck:
		n += sizeField(2, sizeHandoffAck(b.HandoffAck))
	case *peerv1.Envelope_Backup:
		n += sizeField(2, sizeBackup(b.Backup))
	case *peerv1.Envelope_BackupAck:
		n += sizeField(2, sizeBackupAck(b.BackupAck))
	default: // a body added to peer.proto and not yet here
		return proto.Size(env)
	}
	return n
}

// sizeUint returns the size of a varint field numbered below 16.
func sizeUint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// sizeInt returns the size of an int64 (or enum) field numbered below 16:
// a negative value takes ten bytes.
func sizeInt(v int64) int { return sizeUint(uint64(v)) }

// sizeBool returns the size of a bool field numbered below 16.
func sizeBool(v bool) int {
	if v {
		return 2
	}
	return 0
}

// sizeFloat returns the size of a float field numbered below 16: present
// unless +0 (-0 and NaN are written).
func sizeFloat(v float32) int {
	if math.Float32bits(v) == 0 {
		return 0
	}
	return 5
}

// sizeString returns the size of a string field numbered below 16.
func sizeString(s string) int {
	if len(s) == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

// sizeBytes returns the size of a bytes field numbered below 16.
func sizeBytes(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(len(b))
}

// sizeField returns the size of a present length-delimited field whose tag
// takes tag bytes and whose body takes n.
func sizeField(tag, n int) int { return tag + protowire.SizeBytes(n) }

// The size functions named after a message return the size of its body
// (without the tag and length that precede it in its parent), 0 for nil.

func sizeLimit(m *peerv1.Limit) int {
	if m == nil {
		return 0
	}
	return sizeUint(uint64(m.Algorithm)) + sizeInt(m.Limit) + sizeInt(m.PeriodNs) + sizeInt(m.Burst) +
		sizeInt(m.MaxWaitNs) + sizeInt(m.MinGapNs) + sizeBool(m.CountRejected) + sizeInt(m.WarmUpNs)
}

func sizeFlush(m *peerv1.Flush) int {
	if m == nil {
		return 0
	}
	n := sizeUint(m.Seq)
	// The items of one flush mostly share one Limit: size it once.
	var lim *peerv1.Limit
	limSize := 0
	for _, it := range m.Items {
		if it == nil {
			n += sizeField(1, 0)
			continue
		}
		k := sizeString(it.Key) + sizeInt(it.Hits) + sizeInt(it.Demand) + sizeFloat(it.Rate) +
			sizeBytes(it.View) + sizeInt(it.LeaseWant) + sizeInt(it.LeaseReturn)
		if it.Limit != nil {
			if it.Limit != lim {
				lim, limSize = it.Limit, sizeField(1, sizeLimit(it.Limit))
			}
			k += limSize
		}
		n += sizeField(1, k)
	}
	return n
}

func sizeKeyStates(items []*peerv1.KeyState) int {
	n := 0
	for _, m := range items {
		k := 0
		if m != nil {
			k = sizeString(m.Key) + sizeBytes(m.State) + sizeFloat(m.Demand) + sizeBool(m.NotOwner) +
				sizeInt(m.LeaseGranted) + sizeFloat(m.Share)
		}
		n += sizeField(1, k)
	}
	return n
}

func sizeFlushAck(m *peerv1.FlushAck) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.Seq) + sizeUint(m.FlushIncarnation) + sizeKeyStates(m.Items)
}

func sizePush(m *peerv1.Push) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.AppliedSeq) + sizeUint(m.AppliedIncarnation) + sizeKeyStates(m.Items)
}

func sizeForward(m *peerv1.Forward) int {
	if m == nil {
		return 0
	}
	n := sizeUint(m.Id)
	var lim *peerv1.Limit
	limSize := 0
	for _, it := range m.Items {
		if it == nil {
			n += sizeField(1, 0)
			continue
		}
		k := sizeString(it.Key) + sizeInt(it.Hits) + sizeString(it.Lease) + sizeBool(it.Release) +
			sizeBool(it.Relayed)
		if it.Limit != nil {
			if it.Limit != lim {
				lim, limSize = it.Limit, sizeField(1, sizeLimit(it.Limit))
			}
			k += limSize
		}
		n += sizeField(1, k)
	}
	return n
}

func sizeForwardReply(m *peerv1.ForwardReply) int {
	if m == nil {
		return 0
	}
	n := sizeUint(m.Id) + sizeUint(m.ForwardIncarnation)
	for _, d := range m.Items {
		k := 0
		if d != nil {
			k = sizeBool(d.Allowed) + sizeInt(d.Limit) + sizeInt(d.Remaining) + sizeInt(d.ResetAtNs) +
				sizeInt(d.RetryAfterNs) + sizeInt(d.WaitNs) + sizeInt(int64(d.Error)) + sizeString(d.ErrorMessage)
			if d.Reconfigured {
				k += 3 // field 40: a two-byte tag and the value
			}
		}
		n += sizeField(1, k)
	}
	return n
}

func sizeHandoff(m *peerv1.Handoff) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.Seq) + sizeKeyStates(m.Items) + sizeBool(m.Leaving)
}

func sizeHandoffAck(m *peerv1.HandoffAck) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.Seq) + sizeUint(m.HandoffIncarnation)
}

func sizeBackup(m *peerv1.Backup) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.Seq) + sizeKeyStates(m.Items)
}

func sizeBackupAck(m *peerv1.BackupAck) int {
	if m == nil {
		return 0
	}
	return sizeUint(m.Seq) + sizeUint(m.BackupIncarnation)
}
