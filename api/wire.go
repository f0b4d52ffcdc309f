package api

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// The gRPC Check path reads a CheckRequest's wire bytes straight into the
// items it validates and writes the CheckResponse's wire bytes straight
// from the core's answers: no CheckItem, CheckResult, Duration or
// Timestamp message is allocated, and no reflection runs. On a 100-check
// call that was most of the node's allocations (docs/bench.md, "Per-call
// CPU by path"). It is kept because it pays in whole runs: in
// BenchmarkNodePath (3 real nodes, whole-process CPU per call) a 100-check
// call costs 27% less in owner mode (883 -> 645 µs) and 14% less in cached
// mode (538 -> 461 µs); the servers' CPU per 100-check call in make compare
// fell 5% and 11%. Single checks showed no difference beyond noise.
//
// decodeItems takes only the requests it decodes exactly as proto.Unmarshal
// and fromProto would (FuzzDecodeItems holds it to that): each field at
// most once, with its declared wire type, strings valid UTF-8. Anything
// else, a malformed request included, goes the general way (checkProto),
// which also words the errors.

// Field numbers of ringlimit.v1.CheckRequest and CheckItem.
const (
	fieldRequestItems = 1

	fieldItemName            = 1
	fieldItemUniqueKey       = 2
	fieldItemHits            = 3
	fieldItemLimit           = 4
	fieldItemPeriod          = 5
	fieldItemBurst           = 6
	fieldItemAlgorithm       = 7
	fieldItemMode            = 8
	fieldItemPolicy          = 9
	fieldItemMaxWait         = 10
	fieldItemMinGap          = 11
	fieldItemCountRejected   = 12
	fieldItemWarmUp          = 13
	fieldItemLease           = 14
	fieldItemRelease         = 15
	fieldItemRule            = 16
	fieldItemMaxBurstSeconds = 17
	fieldItemColdFactor      = 18
)

// itemWireTypes is the wire type of each field of CheckItem, by number.
var itemWireTypes = [...]protowire.Type{
	fieldItemName: protowire.BytesType, fieldItemUniqueKey: protowire.BytesType,
	fieldItemHits: protowire.VarintType, fieldItemLimit: protowire.VarintType,
	fieldItemPeriod: protowire.BytesType, fieldItemBurst: protowire.VarintType,
	fieldItemAlgorithm: protowire.VarintType, fieldItemMode: protowire.VarintType,
	fieldItemPolicy: protowire.VarintType, fieldItemMaxWait: protowire.BytesType,
	fieldItemMinGap: protowire.BytesType, fieldItemCountRejected: protowire.VarintType,
	fieldItemWarmUp: protowire.BytesType, fieldItemLease: protowire.BytesType,
	fieldItemRelease: protowire.VarintType, fieldItemRule: protowire.BytesType,
	fieldItemMaxBurstSeconds: protowire.Fixed64Type, fieldItemColdFactor: protowire.Fixed64Type,
}

// decodeItems decodes the CheckRequest b into its items, as
// fromProto(proto.Unmarshal(b)) would, or reports false when b is not one
// it takes (see above); maxItems bounds the items it decodes (beyond, it
// reports false: checkProto refuses the call). Strings share one copy of b
// (the core keeps none of them but the lease ids, which are copied). The
// items are appended to dst (empty), whose array is reused if large enough.
//
// It reads b once (it used to count the items in a first pass), decodes
// each item in place in the array (an item is about 200 bytes: no copy of
// it is made), and reads the one-byte tags and lengths of a usual request
// without a call into protowire (readTag, readVarint). With the key built
// once per item (item.request), the API's share of a 100-check call fell
// from 4,262 to 3,296 instructions an item (BenchmarkCheckCall under
// cachegrind, docs/bench.md "Session 15").
func decodeItems(dst []item, b []byte, maxItems int) ([]item, bool) {
	s := string(b) // every string of the request, sliced from one copy
	items := dst[:0]
	for off := 0; off < len(b); {
		num, typ, l := readTag(b[off:])
		if l < 0 || typ == protowire.StartGroupType {
			return nil, false
		}
		off += l
		if num != fieldRequestItems {
			if l = protowire.ConsumeFieldValue(num, typ, b[off:]); l < 0 {
				return nil, false
			}
			off += l
			continue
		}
		if typ != protowire.BytesType || len(items) == maxItems {
			return nil, false
		}
		n, l := readVarint(b[off:])
		if l < 0 || n > uint64(len(b)-off-l) {
			return nil, false
		}
		off += l
		items = append(items, item{hits: 1}) // unset counts 1; only an explicit 0 peeks
		if !decodeItem(&items[len(items)-1], b, s, off, off+int(n)) {
			return nil, false
		}
		off += int(n)
	}
	if len(items) == 0 {
		return nil, false
	}
	return items, true
}

// readTag is protowire.ConsumeTag, refusing also the field numbers beyond
// protowire.MaxValidNumber (which proto.Unmarshal refuses). It reads
// itself a tag of one byte (a field number under 16), which every field of
// CheckRequest, CheckItem and Duration has.
func readTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if b[0] < 1<<3 {
			return 0, 0, -1 // field number 0: invalid
		}
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// readVarint is protowire.ConsumeVarint, reading itself a varint of one
// byte (a value under 128).
func readVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// decodeItem decodes the CheckItem buf[off:end] into it, which holds the
// defaults (hits 1); s is string(buf), which its strings are sliced from.
func decodeItem(it *item, buf []byte, s string, off, end int) bool {
	var seen uint32
	var period, maxWait, minGap, warmUp wireDur
	for off < end {
		b := buf[off:end]
		num, typ, l := readTag(b)
		if l < 0 {
			return false
		}
		b, off = b[l:], off+l
		if num <= 0 || int(num) >= len(itemWireTypes) {
			// Unknown to this version: skipped, as proto.Unmarshal keeps
			// it aside. Groups go the general way.
			if typ == protowire.StartGroupType {
				return false
			}
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return false
			}
			off += l
			continue
		}
		if typ != itemWireTypes[num] || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		switch typ {
		case protowire.VarintType:
			v, l := readVarint(b)
			if l < 0 {
				return false
			}
			off += l
			switch num {
			case fieldItemHits:
				it.hits = int64(v)
			case fieldItemLimit:
				it.limit = int64(v)
			case fieldItemBurst:
				it.burst = int64(v)
			case fieldItemAlgorithm:
				it.algorithm = int64(int32(v))
			case fieldItemMode:
				it.mode = int64(int32(v))
			case fieldItemPolicy:
				it.policy = int64(int32(v))
			case fieldItemCountRejected:
				it.countRejected = v != 0
			case fieldItemRelease:
				it.release = v != 0
			}
		case protowire.Fixed64Type:
			v, l := protowire.ConsumeFixed64(b)
			if l < 0 {
				return false
			}
			off += l
			if num == fieldItemMaxBurstSeconds {
				it.maxBurstSeconds = math.Float64frombits(v)
			} else {
				it.coldFactor = math.Float64frombits(v)
			}
		case protowire.BytesType:
			n, l := readVarint(b)
			if l < 0 || n > uint64(len(b)-l) {
				return false
			}
			start := off + l
			off = start + int(n)
			str := s[start:off]
			switch num {
			case fieldItemName, fieldItemUniqueKey, fieldItemLease, fieldItemRule:
				if !utf8.ValidString(str) {
					return false
				}
				switch num {
				case fieldItemName:
					it.name = str
				case fieldItemUniqueKey:
					it.uniqueKey = str
				case fieldItemLease:
					// A concurrency bucket keeps its holders' lease ids:
					// a copy, lest one pin the whole request.
					it.lease = strings.Clone(str)
				default:
					it.rule = str
				}
			default: // a Duration
				d, ok := decodeDuration(buf[start:off])
				if !ok {
					return false
				}
				switch num {
				case fieldItemPeriod:
					period = d
				case fieldItemMaxWait:
					maxWait = d
				case fieldItemMinGap:
					minGap = d
				default:
					warmUp = d
				}
			}
		}
	}
	// In fromProto's order, so that the first invalid one is reported.
	it.period, it.err = period.duration("period", it.err)
	it.maxWait, it.err = maxWait.duration("max_wait", it.err)
	it.minGap, it.err = minGap.duration("min_gap", it.err)
	it.warmUp, it.err = warmUp.duration("warm_up", it.err)
	return true
}

// wireDur is a decoded google.protobuf.Duration, or none (!set).
type wireDur struct {
	secs  int64
	nanos int32
	set   bool
}

// maxDurationSecs is the range of a valid google.protobuf.Duration's
// seconds, 10,000 years either way (durationpb's CheckValid).
const maxDurationSecs = 315_576_000_000

// duration is protoDuration of d (nil when not set), with no allocation
// when d is valid.
func (d wireDur) duration(field string, prev error) (time.Duration, error) {
	switch {
	case !d.set:
		return 0, prev
	case d.secs < -maxDurationSecs || d.secs > maxDurationSecs,
		d.nanos <= -1e9 || d.nanos >= 1e9,
		d.secs > 0 && d.nanos < 0 || d.secs < 0 && d.nanos > 0:
		return protoDuration(field, &durationpb.Duration{Seconds: d.secs, Nanos: d.nanos}, prev)
	}
	v := durationpb.Duration{Seconds: d.secs, Nanos: d.nanos}
	return v.AsDuration(), prev
}

// decodeDuration decodes a google.protobuf.Duration: seconds (1, int64)
// and nanos (2, int32), each at most once.
func decodeDuration(b []byte) (wireDur, bool) {
	d := wireDur{set: true}
	var seen uint8
	for len(b) > 0 {
		num, typ, l := readTag(b)
		if l < 0 {
			return d, false
		}
		b = b[l:]
		if num != 1 && num != 2 {
			if typ == protowire.StartGroupType {
				return d, false
			}
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return d, false
			}
			b = b[l:]
			continue
		}
		if typ != protowire.VarintType || seen&(1<<num) != 0 {
			return d, false
		}
		seen |= 1 << num
		v, l := protowire.ConsumeVarint(b)
		if l < 0 {
			return d, false
		}
		b = b[l:]
		if num == 1 {
			d.secs = int64(v)
		} else {
			d.nanos = int32(v)
		}
	}
	return d, true
}

// Field numbers of ringlimit.v1.CheckResponse and CheckResult.
const (
	fieldResponseItems = 1
	fieldResponseNode  = 2

	fieldResultStatus       = 1
	fieldResultError        = 2
	fieldResultLimit        = 3
	fieldResultRemaining    = 4
	fieldResultResetTime    = 5
	fieldResultRetryAfter   = 6
	fieldResultWait         = 7
	fieldResultOwner        = 8
	fieldResultMode         = 9
	fieldResultDegraded     = 10
	fieldResultReconfigured = 11
)

// appendResponse appends the CheckResponse of out, answered by node, in
// wire form: what proto.Marshal of a CheckResponse of toProto's results
// would give, field by field (TestAppendResponse).
func appendResponse(buf []byte, node string, out []check.Response) []byte {
	var scratch [256]byte
	for i := range out {
		r := appendResult(scratch[:0], &out[i])
		buf = protowire.AppendTag(buf, fieldResponseItems, protowire.BytesType)
		buf = protowire.AppendBytes(buf, r)
	}
	if node != "" {
		buf = protowire.AppendTag(buf, fieldResponseNode, protowire.BytesType)
		buf = protowire.AppendString(buf, node)
	}
	return buf
}

// appendResult appends the CheckResult of r (see toProto) in wire form.
func appendResult(b []byte, r *check.Response) []byte {
	if r.Err != nil {
		b = appendVarintField(b, fieldResultStatus, uint64(ringlimitv1.Status_STATUS_ERROR))
		b = appendStringField(b, fieldResultError, errorMessage(r.Err))
		b = appendStringField(b, fieldResultOwner, r.Owner)
		return appendVarintField(b, fieldResultMode, uint64(int64(ringlimitv1.Mode(r.Mode))))
	}
	st := ringlimitv1.Status_STATUS_OVER_LIMIT
	if r.Allowed {
		st = ringlimitv1.Status_STATUS_UNDER_LIMIT
	}
	b = appendVarintField(b, fieldResultStatus, uint64(st))
	b = appendVarintField(b, fieldResultLimit, uint64(r.Limit))
	b = appendVarintField(b, fieldResultRemaining, uint64(r.Remaining))
	if !r.ResetAt.IsZero() {
		b = appendTimeField(b, fieldResultResetTime, r.ResetAt.Unix(), int32(r.ResetAt.Nanosecond()))
	}
	if r.RetryAfter > 0 {
		b = appendTimeField(b, fieldResultRetryAfter, int64(r.RetryAfter/time.Second), int32(r.RetryAfter%time.Second))
	}
	if r.Wait > 0 {
		b = appendTimeField(b, fieldResultWait, int64(r.Wait/time.Second), int32(r.Wait%time.Second))
	}
	b = appendStringField(b, fieldResultOwner, r.Owner)
	b = appendVarintField(b, fieldResultMode, uint64(int64(ringlimitv1.Mode(r.Mode))))
	b = appendBoolField(b, fieldResultDegraded, r.Degraded)
	return appendBoolField(b, fieldResultReconfigured, r.Reconfigured)
}

// appendVarintField appends field num of varint v, unless v is 0 (proto3
// leaves zero values out). A negative int32 or int64 is v's 64-bit two's
// complement, as protobuf encodes it.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarintField(b, num, 1)
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendTimeField appends field num, a Timestamp or a Duration (the same
// wire form: seconds 1, nanos 2), present even when both are 0.
func appendTimeField(b []byte, num protowire.Number, secs int64, nanos int32) []byte {
	n := 0
	if secs != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(int64(nanos)))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendVarintField(b, 1, uint64(secs))
	return appendVarintField(b, 2, uint64(int64(nanos)))
}
