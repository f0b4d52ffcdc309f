package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// Unit is the time unit of a rule's rate, as in Lyft's configuration and in
// Envoy's RateLimitResponse.RateLimit.Unit.
type Unit uint8

// The units. Week, month and year are accepted as Lyft's service accepts
// every unit of Envoy's enumeration; a month is 30 days and a year 365 days,
// as Lyft counts them.
const (
	UnitSecond Unit = 1
	UnitMinute Unit = 2
	UnitHour   Unit = 3
	UnitDay    Unit = 4
	UnitWeek   Unit = 5
	UnitMonth  Unit = 6
	UnitYear   Unit = 7
)

var unitNames = [...]string{UnitSecond: "second", UnitMinute: "minute", UnitHour: "hour",
	UnitDay: "day", UnitWeek: "week", UnitMonth: "month", UnitYear: "year"}

const day = 24 * time.Hour

var unitDurations = [...]time.Duration{UnitSecond: time.Second, UnitMinute: time.Minute,
	UnitHour: time.Hour, UnitDay: day, UnitWeek: 7 * day, UnitMonth: 30 * day, UnitYear: 365 * day}

// String returns the unit's name in lower case, as written in a rules file.
func (u Unit) String() string {
	if u.Valid() {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// Valid reports whether u is one of the units.
func (u Unit) Valid() bool { return u >= UnitSecond && u <= UnitYear }

// Duration returns the length of one unit (zero for an invalid unit).
func (u Unit) Duration() time.Duration {
	if u.Valid() {
		return unitDurations[u]
	}
	return 0
}

// ParseUnit returns the unit named s, in any case ("second", "MINUTE").
func ParseUnit(s string) (Unit, bool) {
	for u, name := range unitNames {
		if name != "" && strings.EqualFold(name, s) {
			return Unit(u), true
		}
	}
	return 0, false
}

// Entry is one key/value pair of a descriptor, as Envoy sends it: ("remote_address",
// "10.0.0.1"), ("path", "/login").
type Entry struct {
	// Key is the descriptor key.
	Key string
	// Value is the descriptor value.
	Value string
}

// Step is one level of a rule's descriptor path, as written in the rules file.
type Step struct {
	// Key is the descriptor key; it must match the request entry's key exactly.
	Key string
	// Value is the value written in the rule: empty matches any value (a
	// per-value limit: each distinct value gets its own bucket); a value
	// holding '*' is a wildcard, each '*' standing for any run of bytes
	// ("foo*", "bar*b", "foo*bar*baz", as in Lyft's service); any other
	// value matches exactly.
	Value string
}

// Rule is one rate_limit block of a rules file: the limit that applies to
// descriptors matching its path. A Rule is immutable once its Set is built
// and safe for concurrent use.
type Rule struct {
	// Name is the rule's stable name, built from its domain and descriptor
	// path (see [RuleName]), such as "edge/remote_address" or
	// "messaging/message_type=marketing/to_number". A rule keeps its name as
	// long as its path is unchanged, whatever its limit.
	Name string
	// Domain is the rule's domain.
	Domain string
	// Path is the rule's descriptor path, outermost first.
	Path []Step
	// Label is the optional rate_limit.name of Lyft's format, used by
	// replaces and reported to Envoy as the limit's name.
	Label string
	// Replaces lists the labels of the rules this rule replaces when both
	// match descriptors of one request (Lyft's replaces).
	Replaces []string
	// RequestsPerUnit is the number of requests allowed per Unit*Multiplier.
	// Zero denies every request (Lyft's way to block a value).
	RequestsPerUnit int64
	// Unit is the time unit of the rate (zero when Unlimited).
	Unit Unit
	// Multiplier is the number of units in one period (at least 1).
	Multiplier uint32
	// Unlimited rules admit every request without consulting any bucket.
	Unlimited bool
	// Shadow rules are decided as usual but always reported as allowed, to
	// observe a limit before enforcing it (Lyft's shadow_mode).
	Shadow bool
	// Quota rules are Lyft's quota_mode: a quota descriptor over its limit
	// is reported OVER_LIMIT, but it makes the whole request OVER_LIMIT only
	// when every quota descriptor of the request is over its limit (and
	// any ordinary descriptor over its limit still does).
	Quota bool
	// Shared is Lyft's share_threshold along the rule's path: when
	// Shared[i] is true, the entries that match Path[i] (a wildcard) all
	// count in one bucket, as if their value were the wildcard itself,
	// instead of one bucket per value. Nil when no step shares.
	Shared []bool
	// CountDenied is set on a rule that denies all (RequestsPerUnit 0) when
	// count_rejected applies to it: the hits it refuses are counted in
	// windows of its period (see [Rule.DenyCheck]), so that a request of no
	// hits (a peek) is refused after them, as Lyft's service counts. Without
	// it a peek at such a rule is admitted: a limit of 0 keeps no counter.
	CountDenied bool
	// Limit configures the rule's buckets. It is the zero Limit when the rule
	// is Unlimited or denies all (RequestsPerUnit == 0).
	Limit bucket.Limit
	// Mode is the consistency mode of the rule's checks (ModeDefault: the
	// node's default).
	Mode check.Mode
	// Policy is the partition policy of the rule's checks (PolicyDefault:
	// the node's default).
	Policy check.Policy
	// File and Line locate the rule's rate_limit block, for messages.
	File string
	Line int
}

// DeniesAll reports whether the rule rejects every request
// (requests_per_unit: 0), without consulting any bucket.
func (r *Rule) DeniesAll() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Period returns the length of the rule's period: Unit times Multiplier.
func (r *Rule) Period() time.Duration {
	return r.Unit.Duration() * time.Duration(max(r.Multiplier, 1))
}

// Request returns the check request for hits against the bucket named key
// under r. It is meaningful only for rules that are neither Unlimited nor
// DeniesAll.
func (r *Rule) Request(key string, hits int64) check.Request {
	return check.Request{Key: key, Hits: hits, Limit: r.Limit, Mode: r.Mode, Policy: r.Policy}
}

// denySuffix ends the bucket key of the counter of a rule that denies all:
// a key of its own, since its limit of 1 is no limit, so that a reload to a
// positive limit starts a fresh bucket instead of scaling the counter.
// [DescriptorKey] escapes control bytes, so no descriptor's key ends so.
const denySuffix = "\x00denied"

// DenyCheck returns the check request that counts hits refused by a rule
// that denies all and has CountDenied, under the bucket key key: a fixed
// window of the rule's period and limit 1 that counts every hit, so that
// the decision's Remaining is 1 exactly when no hit was counted in the
// window yet (the request is then a peek that Lyft's service admits).
func (r *Rule) DenyCheck(key string, hits int64) check.Request {
	l := bucket.Limit{Algorithm: bucket.FixedWindow, Limit: 1, Period: r.Period(), CountRejected: true}
	return check.Request{Key: key + denySuffix, Hits: hits, Limit: l, Mode: r.Mode, Policy: r.Policy}
}

// equal reports whether a and b configure the same limit the same way (File
// and Line aside).
func (r *Rule) equal(o *Rule) bool {
	if r.Name != o.Name || r.Label != o.Label || r.RequestsPerUnit != o.RequestsPerUnit ||
		r.Unit != o.Unit || r.Multiplier != o.Multiplier || r.Unlimited != o.Unlimited ||
		r.Shadow != o.Shadow || r.Quota != o.Quota || r.CountDenied != o.CountDenied || r.Limit != o.Limit || r.Mode != o.Mode ||
		r.Policy != o.Policy || !slices.Equal(r.Shared, o.Shared) || len(r.Replaces) != len(o.Replaces) {
		return false
	}
	for i := range r.Replaces {
		if r.Replaces[i] != o.Replaces[i] {
			return false
		}
	}
	return true
}

// RuleName returns the stable name of the rule of domain at path: the domain
// and each step joined by '/', a step being its key, or key=value when the
// rule names a value. '%', '/', '=' and control bytes are escaped as %XX, so
// the name is unambiguous and never contains a NUL byte.
func RuleName(domain string, path []Step) string {
	var b strings.Builder
	escapeTo(&b, domain)
	for _, s := range path {
		b.WriteByte('/')
		escapeTo(&b, s.Key)
		if s.Value != "" {
			b.WriteByte('=')
			escapeTo(&b, s.Value)
		}
	}
	return b.String()
}

// DescriptorKey returns the cluster-wide bucket key of the descriptor entries
// of domain: each distinct (domain, entries) gets its own bucket, whichever
// rule matched it, so a bucket keeps its state across reloads that keep or
// change its rule's limit. The key starts with a NUL byte, so it never
// collides with a key of the public API (whose names are non-empty and
// NUL-free), and escapes its parts like [RuleName].
func DescriptorKey(domain string, entries []Entry) string {
	n := 5 + len(domain)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	var b strings.Builder
	b.Grow(n) // exact unless something needs escaping
	b.WriteString("\x00rls/")
	escapeTo(&b, domain)
	for _, e := range entries {
		b.WriteByte('/')
		escapeTo(&b, e.Key)
		b.WriteByte('=')
		escapeTo(&b, e.Value)
	}
	return b.String()
}

// BucketKey returns the cluster-wide bucket key of the descriptor entries of
// domain under r: [DescriptorKey], except that an entry matched by a step of
// r that shares (Lyft's share_threshold, see Rule.Shared) counts under the
// step's wildcard value, so every value it matches lands in one bucket.
// entries must be the entries r was matched for.
func (r *Rule) BucketKey(domain string, entries []Entry) string {
	if r.Shared == nil {
		return DescriptorKey(domain, entries)
	}
	shared := slices.Clone(entries)
	for i, s := range r.Shared {
		if s && i < len(shared) && i < len(r.Path) {
			shared[i].Value = r.Path[i].Value
		}
	}
	return DescriptorKey(domain, shared)
}

// escapeTo writes s to b with '%', '/', '=' and bytes below 0x20 or equal
// to 0x7f as %XX.
func escapeTo(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || c == '=' || c < 0x20 || c == 0x7f {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}
