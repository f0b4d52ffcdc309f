package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm uint8

// The algorithms. The numeric values are part of the wire format: never
// renumber them.
const (
	// TokenBucket holds up to Burst tokens and refills Limit tokens per Period,
	// continuously (fractions of a token are kept).
	TokenBucket Algorithm = 1
	// LeakyMeter is a leaky bucket used as a meter (policing): a level of up to
	// Burst drains at Limit per Period; a request that would overflow is rejected.
	LeakyMeter Algorithm = 2
	// LeakyQueue is a leaky bucket used as a queue (shaping): requests leave one
	// every Period/Limit; the caller is told how long to wait, and is rejected
	// when the wait would exceed MaxWait or more than Burst requests would queue.
	LeakyQueue Algorithm = 3
	// FixedWindow admits Limit hits in each window [k*Period, (k+1)*Period).
	FixedWindow Algorithm = 4
	// SlidingLog admits Limit hits in every rolling window of length Period,
	// exactly, by keeping a log of at most Limit timestamps.
	SlidingLog Algorithm = 5
	// SlidingCounter approximates a rolling window: the previous fixed window's
	// count weighted by its overlap with the rolling window, plus the current one.
	SlidingCounter Algorithm = 6
	// GCRA is the generic cell rate algorithm: the same admissions as
	// TokenBucket for the same Limit, Period and Burst, kept as one timestamp.
	GCRA Algorithm = 7
	// Concurrency is a semaphore of Limit permits; a permit that is not
	// released expires Period after it was acquired.
	Concurrency Algorithm = 8
	// SmoothBursty is Guava's SmoothBursty RateLimiter: Limit permits per
	// Period, up to maxBurstSeconds' worth of stored permits (default: one
	// second's worth, Guava's create(rate)) or Burst, and the wait of a request
	// paid by the next one.
	SmoothBursty Algorithm = 9
	// SmoothWarmingUp is Guava's SmoothWarmingUp RateLimiter: after idling, the
	// rate ramps up from Limit/(cold factor) per Period (default: a third, Guava's
	// create(rate, warmup)) over WarmUp.
	SmoothWarmingUp Algorithm = 10
)

// Algorithms lists every algorithm, in wire order.
var algorithms = [...]Algorithm{TokenBucket, LeakyMeter, LeakyQueue, FixedWindow, SlidingLog,
	SlidingCounter, GCRA, Concurrency, SmoothBursty, SmoothWarmingUp}

var algorithmNames = [...]string{
	TokenBucket:     "token_bucket",
	LeakyMeter:      "leaky_meter",
	LeakyQueue:      "leaky_queue",
	FixedWindow:     "fixed_window",
	SlidingLog:      "sliding_log",
	SlidingCounter:  "sliding_counter",
	GCRA:            "gcra",
	Concurrency:     "concurrency",
	SmoothBursty:    "smooth_bursty",
	SmoothWarmingUp: "smooth_warming_up",
}

// Algorithms returns every algorithm, in wire order, in a new slice.
func Algorithms() []Algorithm { a := algorithms; return a[:] }

// String returns the algorithm's name as used in configuration and on the
// public API, such as "token_bucket".
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// Valid reports whether a names a known algorithm.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= SmoothWarmingUp }

// ParseAlgorithm returns the algorithm named s (as returned by String).
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range algorithms {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, &LimitError{Field: "algorithm", Reason: fmt.Sprintf("unknown algorithm %q", s)}
}

// Limit configures one bucket. The zero value is not valid: Limit and
// Period are required. The zero Algorithm is TokenBucket, as an unset
// algorithm is on the wire: New, NewIn, Reconfigure and Validate read it so,
// and WithDefaults spells it out. Unused options must be zero.
type Limit struct {
	// Algorithm selects the algorithm; zero is TokenBucket.
	Algorithm Algorithm
	// CountRejected makes SlidingLog record rejected attempts too, so a client
	// that keeps hammering stays blocked until it pauses, and makes
	// FixedWindow count rejected hits as Lyft's ratelimit service does (a
	// request is admitted when the window's count, its own hits included,
	// stays within Limit). Other algorithms ignore it.
	CountRejected bool // placed here, beside Algorithm, to keep Limit at 56 bytes
	// ColdFactorMilli is Guava's cold factor (SmoothWarmingUp only) in
	// thousandths: 3000 is 3, a cold limiter spacing permits three stable
	// intervals apart. Zero means DefaultColdFactor (Guava's create(rate,
	// warmup)); else at least 1000 (1). ColdFactorMilli converts a number.
	ColdFactorMilli uint16 // in Limit's padding, as MaxBurstMillis
	// MaxBurstMillis is Guava's maxBurstSeconds (SmoothBursty only) in
	// milliseconds: 2500 is maxBurstSeconds 2.5, the most stored permits
	// being 2.5 times the rate per second. Zero means DefaultMaxBurstSeconds
	// (Guava's create(rate)), unless Burst is set; the two are exclusive.
	// MaxBurstMillis converts a number of seconds.
	MaxBurstMillis uint32
	// Limit is the number of permits per Period (for Concurrency: the number of
	// permits held at once). It must be positive.
	Limit int64
	// Period is the time over which Limit permits are granted (for Concurrency:
	// the lease timeout after which an unreleased permit expires). It must be
	// positive.
	Period time.Duration
	// Burst is the capacity: the permits that can be taken at once after idling
	// (TokenBucket, GCRA, LeakyMeter), the longest queue (LeakyQueue), or the
	// most stored permits (SmoothBursty, a ringlimit option: Guava's own is
	// MaxBurstMillis). Zero means Limit (SmoothBursty: MaxBurstMillis' worth
	// of permits). Other algorithms ignore it.
	Burst int64
	// MaxWait is the longest a caller is willing to wait (LeakyQueue,
	// SmoothBursty, SmoothWarmingUp): a request whose wait would be longer is
	// rejected. Zero means the request must not wait at all (Guava's
	// tryAcquire()). For the smooth limiters it is tryAcquire's timeout,
	// counted in whole microseconds, and may change from call to call: that is
	// not a change of rate.
	MaxWait time.Duration
	// MinGap is the shortest time allowed between two admitted hits (SlidingLog).
	MinGap time.Duration
	// WarmUp is the warm-up period of SmoothWarmingUp, which counts it in whole
	// microseconds as Guava does. It must be at least a microsecond for
	// SmoothWarmingUp.
	WarmUp time.Duration
}

// Guava's two options are kept in thousandths so that they fit in Limit's
// padding: a Limit is part of every key's state. Guava reads a decimal
// (2.5, 0.1) as the nearest double, and float64(n)/1000 is that double for
// n thousandths, so a value written with at most three decimals computes
// exactly as in Guava.

// MaxBurstMillis converts Guava's maxBurstSeconds to Limit.MaxBurstMillis:
// it must be a multiple of 0.001 between 0.001 and 4294967.295 (about 49
// days), or 0 for the default. The error is a *LimitError naming
// max_burst_seconds.
func MaxBurstMillis(seconds float64) (uint32, error) {
	m, err := toMilli("max_burst_seconds", seconds, math.MaxUint32)
	return uint32(m), err
}

// ColdFactorMilli converts Guava's cold factor to Limit.ColdFactorMilli: it
// must be a multiple of 0.001 between 1 and 65.535, or 0 for the default.
// The error is a *LimitError naming cold_factor.
func ColdFactorMilli(factor float64) (uint16, error) {
	if factor != 0 && factor < 1 {
		return 0, invalid("cold_factor", "must be at least 1, got %v", factor)
	}
	m, err := toMilli("cold_factor", factor, math.MaxUint16)
	return uint16(m), err
}

// SetGuavaOptions sets MaxBurstMillis and ColdFactorMilli from Guava's
// maxBurstSeconds and cold factor as numbers (0 for the default), as
// MaxBurstMillis and ColdFactorMilli convert them. The error is a
// *LimitError naming the option.
func (l *Limit) SetGuavaOptions(maxBurstSeconds, coldFactor float64) error {
	var err error
	if l.MaxBurstMillis, err = MaxBurstMillis(maxBurstSeconds); err != nil {
		return err
	}
	l.ColdFactorMilli, err = ColdFactorMilli(coldFactor)
	return err
}

// toMilli returns x in thousandths, at most hi, or a *LimitError naming
// field when x is not a multiple of 0.001 in range.
func toMilli(field string, x float64, hi uint64) (uint64, error) {
	if x == 0 {
		return 0, nil
	}
	if !(x > 0) || x > float64(hi)/1000 {
		return 0, invalid(field, "must be between 0.001 and %v, got %v", float64(hi)/1000, x)
	}
	m := math.Round(x * 1000)
	if m/1000 != x {
		return 0, invalid(field, "must be a multiple of 0.001, got %v", x)
	}
	return uint64(m), nil
}

// maxBurstSeconds returns Guava's maxBurstSeconds: MaxBurstMillis, or the
// default when zero.
func (l Limit) maxBurstSeconds() float64 {
	if l.MaxBurstMillis > 0 {
		return float64(l.MaxBurstMillis) / 1000
	}
	return DefaultMaxBurstSeconds
}

// coldFactor returns Guava's cold factor: ColdFactorMilli, or the default
// when zero.
func (l Limit) coldFactor() float64 {
	if l.ColdFactorMilli > 0 {
		return float64(l.ColdFactorMilli) / 1000
	}
	return DefaultColdFactor
}

// Maximums that keep every computation inside int64 and float64 range.
const (
	// MaxLimit is the largest Limit and Burst accepted (1e18).
	MaxLimit = 1_000_000_000_000_000_000
	// MaxPeriod is the longest Period, MaxWait, MinGap and WarmUp accepted
	// (about 292 years, math.MaxInt64 nanoseconds).
	MaxPeriod = time.Duration(1<<63 - 1)
	// MaxLogLimit bounds the Limit of SlidingLog, whose memory is one
	// timestamp per permit.
	MaxLogLimit = 1 << 20
)

// ErrInvalidLimit is wrapped by every *LimitError.
var ErrInvalidLimit = errors.New("bucket: invalid limit")

// ErrNegativeHits is returned when a call asks for fewer than zero hits.
var ErrNegativeHits = errors.New("bucket: hits must not be negative")

// ErrMismatch is returned when a state is merged with, or reconfigured to,
// another algorithm. States of one algorithm under different limits do merge;
// docs/algorithms.md says how each algorithm reconciles the two limits.
var ErrMismatch = errors.New("bucket: states do not match")

// ErrCorrupt is wrapped by every error of Decode.
var ErrCorrupt = errors.New("bucket: corrupt state")

// LimitError reports an invalid field of a Limit. It wraps ErrInvalidLimit.
type LimitError struct {
	// Field is the name of the offending field, in the public API's spelling
	// ("limit", "period", "burst", ...).
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("bucket: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidLimit.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

func invalid(field, format string, args ...any) error {
	return &LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// WithDefaults returns l with a zero Algorithm set to TokenBucket.
func (l Limit) WithDefaults() Limit {
	if l.Algorithm == 0 {
		l.Algorithm = TokenBucket
	}
	return l
}

// Validate reports whether l can configure a bucket. The error is a
// *LimitError naming the field. A zero Algorithm is valid: TokenBucket.
func (l Limit) Validate() error {
	if l.Algorithm != 0 && !l.Algorithm.Valid() {
		return invalid("algorithm", "unknown algorithm %d", uint8(l.Algorithm))
	}
	if l.Limit <= 0 {
		return invalid("limit", "must be positive, got %d", l.Limit)
	}
	if l.Limit > MaxLimit {
		return invalid("limit", "must be at most %d, got %d", int64(MaxLimit), l.Limit)
	}
	if l.Period <= 0 {
		return invalid("period", "must be positive, got %v", l.Period)
	}
	if l.Burst < 0 || l.Burst > MaxLimit {
		return invalid("burst", "must be between 0 and %d, got %d", int64(MaxLimit), l.Burst)
	}
	if l.MaxWait < 0 {
		return invalid("max_wait", "must not be negative, got %v", l.MaxWait)
	}
	if l.MinGap < 0 {
		return invalid("min_gap", "must not be negative, got %v", l.MinGap)
	}
	if l.WarmUp < 0 {
		return invalid("warm_up", "must not be negative, got %v", l.WarmUp)
	}
	switch l.Algorithm {
	case SlidingLog:
		if l.Limit > MaxLogLimit {
			return invalid("limit", "sliding_log keeps one timestamp per permit: at most %d, got %d", MaxLogLimit, l.Limit)
		}
	case SmoothWarmingUp:
		if l.WarmUp < time.Microsecond {
			return invalid("warm_up", "smooth_warming_up needs a warm-up period of at least 1µs (Guava counts it in whole microseconds), got %v", l.WarmUp)
		}
	}
	return l.validateGuava()
}

// validateGuava checks MaxBurstMillis and ColdFactorMilli.
func (l Limit) validateGuava() error {
	if l.MaxBurstMillis != 0 {
		switch {
		case l.Algorithm != SmoothBursty:
			return invalid("max_burst_seconds", "applies to smooth_bursty only, not %v", l.Algorithm)
		case l.Burst != 0:
			return invalid("max_burst_seconds", "set burst or max_burst_seconds, not both")
		case !(l.maxBurstSeconds()*permitsPerSecond(l) <= MaxLimit):
			return invalid("max_burst_seconds", "stores more than %d permits: %v seconds at %v per second",
				int64(MaxLimit), l.maxBurstSeconds(), permitsPerSecond(l))
		}
	}
	if l.ColdFactorMilli != 0 {
		switch {
		case l.Algorithm != SmoothWarmingUp:
			return invalid("cold_factor", "applies to smooth_warming_up only, not %v", l.Algorithm)
		case l.ColdFactorMilli < 1000:
			return invalid("cold_factor", "must be at least 1, got %v", l.coldFactor())
		}
	}
	return nil
}

// Capacity returns the burst in force: Burst, or Limit when Burst is zero.
// SmoothBursty's default (one second's worth) is computed by that algorithm.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}
