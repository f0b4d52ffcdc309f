package client

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// Item is one rate-limit check. The bucket is identified cluster-wide by
// (Name, Key): Name is the limit ("api"), Key the client ("user:42"). Limit
// and Period are required; every other zero field means the node's default.
// Or Rule names a rule of the node's rules file, which supplies the limit:
// Name and the limit fields are then left zero, and the bucket is
// (Rule, Key). Item is the Go form of ringlimitv1.CheckItem.
type Item struct {
	// Rule names a rule of the node's rules file ("edge/remote_address",
	// see docs/rules.md) instead of spelling out the limit. With Rule set,
	// Name, Limit, Period, Burst, Algorithm, MaxWait, MinGap, CountRejected,
	// WarmUp, MaxBurstSeconds and ColdFactor must be zero (the node answers
	// an item that sets them with
	// an error naming the field); Mode and Policy, when set, override the
	// rule's. An unknown rule is an item error.
	Rule string
	// Name is the limit's name; it must not contain a NUL byte.
	Name string
	// Key identifies the client within the limit (the wire's unique_key).
	Key string
	// Hits is the number of permits asked for, >= 0. Zero asks for one, as
	// an item without hits does on the wire; set Peek to ask for none.
	Hits int64
	// Peek asks for no permit: the answer says what is left without taking
	// anything. Hits must then be zero (Check returns ErrPeekWithHits).
	Peek bool
	// Limit is the number of permits per Period (Concurrency: the permits
	// held at once); > 0.
	Limit int64
	// Period is the time over which Limit permits are granted (Concurrency:
	// the lease timeout of a permit); > 0.
	Period time.Duration
	// Burst is the capacity after idling (TokenBucket, GCRA, LeakyMeter), the
	// longest queue (LeakyQueue) or the most stored permits (SmoothBursty).
	// Zero means Limit.
	Burst int64
	// Algorithm selects the algorithm; zero is the token bucket.
	Algorithm bucket.Algorithm
	// Mode is the consistency mode; zero (check.ModeDefault) is the node's
	// default.
	Mode check.Mode
	// Policy is the partition policy; zero (check.PolicyDefault) is the
	// node's default.
	Policy check.Policy
	// MaxWait is the longest the caller will wait (LeakyQueue, the smooth
	// limiters); a longer wait is a rejection. Zero: must not wait. For the
	// smooth limiters it is Guava's tryAcquire timeout (in whole
	// microseconds) and may differ from call to call.
	MaxWait time.Duration
	// MinGap is the least time between two admitted hits (SlidingLog).
	MinGap time.Duration
	// CountRejected makes SlidingLog and FixedWindow count rejected attempts
	// too (FixedWindow: as Lyft's ratelimit service counts).
	CountRejected bool
	// WarmUp is the warm-up period of SmoothWarmingUp (required there).
	WarmUp time.Duration
	// MaxBurstSeconds is Guava's maxBurstSeconds (SmoothBursty): the most
	// stored permits are MaxBurstSeconds times the rate per second. Zero
	// means 1, Guava's create(rate); exclusive with Burst.
	MaxBurstSeconds float64
	// ColdFactor is Guava's cold factor (SmoothWarmingUp): a cold limiter
	// spaces permits ColdFactor stable intervals apart. Zero means 3, Guava's
	// create(rate, warmup).
	ColdFactor float64
	// Lease names the permit holder of a Concurrency item; with Release the
	// item returns Hits permits of that holder instead of acquiring.
	Lease   string
	Release bool
}

// Result answers one Item. Over the limit is a Status, not an error.
type Result struct {
	// Status is check.StatusUnderLimit, check.StatusOverLimit or
	// check.StatusError.
	Status check.Status
	// Err is an *ItemError when Status is check.StatusError, nil otherwise.
	Err error
	// Limit is the capacity that Remaining counts against.
	Limit int64
	// Remaining is how many more hits would be admitted now.
	Remaining int64
	// ResetAt is when the bucket is full again if nothing more is taken;
	// zero when the node did not say.
	ResetAt time.Time
	// RetryAfter is, when over the limit, how long until the same request
	// would be admitted.
	RetryAfter time.Duration
	// Wait is, for the shaping algorithms, how long an admitted caller must
	// wait before it proceeds.
	Wait time.Duration
	// Owner is the name of the node that owns the key.
	Owner string
	// Node is the name of the node that answered the call.
	Node string
	// Mode is the mode the item was decided in.
	Mode check.Mode
	// Degraded reports that the owner could not be reached and the partition
	// policy decided.
	Degraded bool
}

// Allowed reports whether the hits were admitted (Status
// check.StatusUnderLimit).
func (r Result) Allowed() bool { return r.Status == check.StatusUnderLimit }

// proto returns the wire form of it.
func (it *Item) proto() *ringlimitv1.CheckItem {
	return &ringlimitv1.CheckItem{
		Name:          it.Name,
		UniqueKey:     it.Key,
		Hits:          proto.Int64(it.hits()),
		Limit:         it.Limit,
		Period:        protoDuration(it.Period),
		Burst:         it.Burst,
		Algorithm:     ringlimitv1.Algorithm(it.Algorithm), // equal values: check's TestValuesMatchTheWire
		Mode:          ringlimitv1.Mode(it.Mode),
		Policy:        ringlimitv1.Policy(it.Policy),
		MaxWait:       protoDuration(it.MaxWait),
		MinGap:        protoDuration(it.MinGap),
		CountRejected: it.CountRejected,
		WarmUp:        protoDuration(it.WarmUp),
		Lease:         it.Lease,
		Release:       it.Release,
		Rule:          it.Rule,

		MaxBurstSeconds: it.MaxBurstSeconds,
		ColdFactor:      it.ColdFactor,
	}
}

// hits returns the permits the item asks for: Hits, one when Hits is zero,
// none with Peek. It is always sent explicitly, so that a node older than
// the "unset counts 1" default still takes one.
func (it *Item) hits() int64 {
	switch {
	case it.Peek:
		return 0
	case it.Hits == 0:
		return 1
	}
	return it.Hits
}

// protoDuration returns nil (unset) for zero, so that the node applies its
// default.
func protoDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// resultOf converts the answer to the item at index i, answered by node.
func resultOf(pr *ringlimitv1.CheckResult, i int, node string) Result {
	r := Result{
		Status:     wireStatus(pr.GetStatus()),
		Limit:      pr.GetLimit(),
		Remaining:  pr.GetRemaining(),
		RetryAfter: pr.GetRetryAfter().AsDuration(), // nil is zero
		Wait:       pr.GetWait().AsDuration(),
		Owner:      pr.GetOwner(),
		Node:       node,
		Mode:       wireMode(pr.GetMode()),
		Degraded:   pr.GetDegraded(),
	}
	if ts := pr.GetResetTime(); ts != nil {
		r.ResetAt = ts.AsTime()
	}
	switch r.Status {
	case check.StatusUnderLimit, check.StatusOverLimit:
	case check.StatusError:
		r.Err = &ItemError{Index: i, Message: pr.GetError()}
	default: // unknown to this client, or never filled in: never a success
		r.Err = &ItemError{Index: i, Message: "unknown status " + statusName(pr.GetStatus()) + " in the answer"}
		r.Status = check.StatusError
	}
	return r
}

// wireStatus converts a status of the wire; one outside check's
// enumeration is StatusUnspecified, which resultOf turns into an error.
func wireStatus(s ringlimitv1.Status) check.Status {
	if s >= 0 && int32(s) <= int32(check.StatusError) {
		return check.Status(s)
	}
	return check.StatusUnspecified
}

// statusName names a status of the wire as check does, and one outside
// check's enumeration by its number.
func statusName(s ringlimitv1.Status) string {
	if s >= 0 && int32(s) <= int32(check.StatusError) {
		return check.Status(s).String()
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// wireMode converts a mode of the wire; one outside check's enumeration
// (a newer node's) is reported as ModeDefault: not said.
func wireMode(m ringlimitv1.Mode) check.Mode {
	if m >= 0 && int32(m) <= int32(check.ModeLeased) {
		return check.Mode(m)
	}
	return check.ModeDefault
}
