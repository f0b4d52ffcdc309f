package bucket

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// ltValid is a valid limit of every algorithm that the table below spoils one
// field at a time.
func ltValid(a Algorithm) Limit {
	l := Limit{Algorithm: a, Limit: 10, Period: time.Second}
	if a == SmoothWarmingUp {
		l.WarmUp = time.Second
	}
	return l
}

// ltInvalid lists limits that Validate rejects, each with the field its
// *LimitError must name.
var ltInvalid = []struct {
	name  string
	field string
	spoil func(*Limit)
}{
	{"zero limit", "limit", func(l *Limit) { l.Limit = 0 }},
	{"negative limit", "limit", func(l *Limit) { l.Limit = -1 }},
	{"most negative limit", "limit", func(l *Limit) { l.Limit = math.MinInt64 }},
	{"limit above MaxLimit", "limit", func(l *Limit) { l.Limit = MaxLimit + 1 }},
	{"limit MaxInt64", "limit", func(l *Limit) { l.Limit = math.MaxInt64 }},
	{"zero period", "period", func(l *Limit) { l.Period = 0 }},
	{"negative period", "period", func(l *Limit) { l.Period = -time.Nanosecond }},
	{"most negative period", "period", func(l *Limit) { l.Period = math.MinInt64 }},
	{"negative burst", "burst", func(l *Limit) { l.Burst = -1 }},
	{"burst above MaxLimit", "burst", func(l *Limit) { l.Burst = MaxLimit + 1 }},
	{"negative max_wait", "max_wait", func(l *Limit) { l.MaxWait = -1 }},
	{"negative min_gap", "min_gap", func(l *Limit) { l.MinGap = -1 }},
	{"negative warm_up", "warm_up", func(l *Limit) { l.WarmUp = -1 }},
	{"unknown algorithm 12", "algorithm", func(l *Limit) { l.Algorithm = 12 }},
	{"unknown algorithm 11", "algorithm", func(l *Limit) { l.Algorithm = 11 }},
	{"unknown algorithm 255", "algorithm", func(l *Limit) { l.Algorithm = 255 }},
	{"unknown algorithm before a bad limit", "algorithm", func(l *Limit) { l.Algorithm, l.Limit = 200, 0 }},
}

// Every invalid limit is a *LimitError naming the field, wrapping
// ErrInvalidLimit, for every algorithm; New returns it and no bucket.
func TestLimitValidateInvalid(t *testing.T) {
	for _, a := range Algorithms() {
		for _, tt := range ltInvalid {
			l := ltValid(a)
			tt.spoil(&l)
			ltCheckInvalid(t, a.String()+"/"+tt.name, l, tt.field)
		}
	}
	// Algorithm-specific rules.
	for _, tt := range []struct {
		name  string
		l     Limit
		field string
	}{
		{"sliding_log limit above MaxLogLimit", Limit{Algorithm: SlidingLog, Limit: MaxLogLimit + 1, Period: time.Second}, "limit"},
		{"sliding_log limit MaxLimit", Limit{Algorithm: SlidingLog, Limit: MaxLimit, Period: time.Second}, "limit"},
		{"smooth_warming_up without warm_up", Limit{Algorithm: SmoothWarmingUp, Limit: 10, Period: time.Second}, "warm_up"},
		{"smooth_warming_up warm_up under 1µs", Limit{Algorithm: SmoothWarmingUp, Limit: 10, Period: time.Second, WarmUp: 999}, "warm_up"},
		{"max_burst_seconds on token_bucket", Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second, MaxBurstMillis: 2000}, "max_burst_seconds"},
		{"max_burst_seconds with burst", Limit{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxBurstMillis: 2000, Burst: 3}, "max_burst_seconds"},
		{"max_burst_seconds storing over MaxLimit", Limit{Algorithm: SmoothBursty, Limit: MaxLimit, Period: time.Second, MaxBurstMillis: 2000}, "max_burst_seconds"},
		{"cold_factor on smooth_bursty", Limit{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, ColdFactorMilli: 3000}, "cold_factor"},
		{"cold_factor below 1", Limit{Algorithm: SmoothWarmingUp, Limit: 10, Period: time.Second, WarmUp: time.Second, ColdFactorMilli: 999}, "cold_factor"},
		{"zero value", Limit{}, "limit"}, // the zero Algorithm is TokenBucket: the limit is what is missing
	} {
		ltCheckInvalid(t, tt.name, tt.l, tt.field)
	}
}

// TestGuavaOptionConversions: Guava's options as numbers, to thousandths.
func TestGuavaOptionConversions(t *testing.T) {
	for _, tt := range []struct {
		seconds float64
		want    uint32
		err     string
	}{
		{0, 0, ""}, {1, 1000, ""}, {2.5, 2500, ""}, {0.1, 100, ""}, {0.001, 1, ""}, {1.0 / 3, 0, "multiple of 0.001"},
		{0.0005, 0, "multiple of 0.001"}, {-1, 0, "between"}, {math.NaN(), 0, "between"}, {math.Inf(1), 0, "between"},
		{4294967.295, math.MaxUint32, ""}, {4294967.296, 0, "between"},
	} {
		got, err := MaxBurstMillis(tt.seconds)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("MaxBurstMillis(%v) = %d, %v; want %d, error %q", tt.seconds, got, err, tt.want, tt.err)
		}
		if err == nil && float64(got)/1000 != tt.seconds {
			t.Errorf("MaxBurstMillis(%v) = %d: back as %v", tt.seconds, got, float64(got)/1000)
		}
	}
	for _, tt := range []struct {
		factor float64
		want   uint16
		err    string
	}{
		{0, 0, ""}, {1, 1000, ""}, {3, 3000, ""}, {2.5, 2500, ""}, {65.535, math.MaxUint16, ""},
		{0.5, 0, "at least 1"}, {65.536, 0, "between"}, {1.0001, 0, "multiple of 0.001"},
	} {
		got, err := ColdFactorMilli(tt.factor)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ColdFactorMilli(%v) = %d, %v; want %d, error %q", tt.factor, got, err, tt.want, tt.err)
		}
	}
}

func ltCheckInvalid(t *testing.T, name string, l Limit, field string) {
	t.Helper()
	err := l.Validate()
	var le *LimitError
	switch {
	case err == nil:
		t.Errorf("%s: Validate(%+v) = nil, want an error on %s", name, l, field)
		return
	case !errors.As(err, &le):
		t.Errorf("%s: Validate = %v (%T), want a *LimitError", name, err, err)
		return
	case le.Field != field:
		t.Errorf("%s: Validate names field %q (%v), want %q", name, le.Field, err, field)
	case !errors.Is(err, ErrInvalidLimit):
		t.Errorf("%s: Validate = %v, does not wrap ErrInvalidLimit", name, err)
	case le.Reason == "" || err.Error() == "":
		t.Errorf("%s: empty reason", name)
	}
	b, nerr := New(l, ltT0)
	if b != nil || !errors.Is(nerr, ErrInvalidLimit) || !errors.As(nerr, &le) || le.Field != field {
		t.Errorf("%s: New = %v, %v; want nil and the *LimitError on %s", name, b, nerr, field)
	}
}

var ltT0 = time.Unix(1_700_000_000, 0)

// The largest accepted values are accepted by Validate and New.
func TestLimitValidateBoundaries(t *testing.T) {
	for _, a := range Algorithms() {
		for _, l := range []Limit{
			{Algorithm: a, Limit: 1, Period: 1},
			{Algorithm: a, Limit: MaxLimit, Period: 1, Burst: MaxLimit},
			{Algorithm: a, Limit: 1, Period: MaxPeriod, MaxWait: MaxPeriod, MinGap: MaxPeriod},
			{Algorithm: a, Limit: MaxLimit, Period: MaxPeriod, Burst: 1},
		} {
			if a == SlidingLog {
				l.Limit = min(l.Limit, MaxLogLimit)
			}
			if a == SmoothWarmingUp {
				l.WarmUp = MaxPeriod
			}
			if err := l.Validate(); err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", l, err)
				continue
			}
			b, err := New(l, ltT0)
			if err != nil || b == nil || b.Config() != l {
				t.Errorf("New(%+v) = %v, %v", l, b, err)
			}
		}
	}
}

func TestLimitCapacity(t *testing.T) {
	for _, tt := range []struct {
		l    Limit
		want int64
	}{
		{Limit{Limit: 10}, 10},
		{Limit{Limit: 10, Burst: 3}, 3},
		{Limit{Limit: 10, Burst: 30}, 30},
	} {
		if got := tt.l.Capacity(); got != tt.want {
			t.Errorf("%+v.Capacity() = %d, want %d", tt.l, got, tt.want)
		}
	}
}

// String and ParseAlgorithm are inverses for every algorithm; numbering is
// the wire order.
func TestAlgorithmNames(t *testing.T) {
	want := []string{"token_bucket", "leaky_meter", "leaky_queue", "fixed_window", "sliding_log",
		"sliding_counter", "gcra", "concurrency", "smooth_bursty", "smooth_warming_up"}
	algs := Algorithms()
	if len(algs) != len(want) {
		t.Fatalf("Algorithms() has %d entries, want %d", len(algs), len(want))
	}
	for i, a := range algs {
		if int(a) != i+1 || !a.Valid() {
			t.Errorf("Algorithms()[%d] = %d (valid %v), want %d", i, a, a.Valid(), i+1)
		}
		if a.String() != want[i] {
			t.Errorf("Algorithm(%d).String() = %q, want %q", a, a.String(), want[i])
		}
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	for _, a := range []Algorithm{0, 11, 255} {
		if a.Valid() || a.String() != "algorithm("+strconv.Itoa(int(a))+")" {
			t.Errorf("Algorithm(%d): valid %v, String %q", a, a.Valid(), a.String())
		}
	}
	for _, s := range []string{"", "token-bucket", "TokenBucket", "Token_Bucket", "gcra ", "algorithm(1)", "unknown"} {
		a, err := ParseAlgorithm(s)
		var le *LimitError
		if a != 0 || !errors.As(err, &le) || le.Field != "algorithm" || !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want 0 and a *LimitError on algorithm", s, a, err)
		}
	}
	// Algorithms returns a copy: a caller that writes to it cannot change the
	// list (nor ParseAlgorithm) for everyone else in the process.
	Algorithms()[0] = 0
	if Algorithms()[0] != TokenBucket {
		t.Errorf("writing to Algorithms() changed the package's list")
		algorithms[0] = TokenBucket
	}
}

// Take, Drain and Refund with negative hits return ErrNegativeHits for every
// algorithm, and change nothing.
func TestNegativeHits(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b, err := New(ltValid(a), ltT0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Take(ltT0, 2); err != nil {
				t.Fatal(err)
			}
			before, _ := b.AppendBinary(nil)
			later := ltT0.Add(time.Minute) // a failed call must not even advance the clock
			for _, hits := range []int64{-1, -2, math.MinInt64} {
				if d, err := b.Take(later, hits); err != ErrNegativeHits || d != (Decision{}) {
					t.Errorf("Take(%d) = %+v, %v; want a zero Decision and ErrNegativeHits", hits, d, err)
				}
				if err := b.Drain(later, hits); err != ErrNegativeHits {
					t.Errorf("Drain(%d) = %v, want ErrNegativeHits", hits, err)
				}
				if err := b.Refund(later, hits); err != ErrNegativeHits {
					t.Errorf("Refund(%d) = %v, want ErrNegativeHits", hits, err)
				}
				if s, ok := b.(Semaphore); ok {
					for _, lease := range []string{"", "x"} {
						if _, err := s.Acquire(later, lease, hits); err != ErrNegativeHits {
							t.Errorf("Acquire(%q, %d) = %v, want ErrNegativeHits", lease, hits, err)
						}
					}
				}
			}
			if after, _ := b.AppendBinary(nil); !bytes.Equal(after, before) {
				t.Errorf("failed calls changed the state:\n%x\n%x", before, after)
			}
		})
	}
}

// Reconfigure with an invalid limit returns its *LimitError, and with
// another algorithm ErrMismatch; neither changes the state.
func TestReconfigureErrors(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			b, err := New(ltValid(a), ltT0)
			if err != nil {
				t.Fatal(err)
			}
			b.Take(ltT0, 1)
			before, _ := b.AppendBinary(nil)
			later := ltT0.Add(time.Minute)
			for _, tt := range ltInvalid {
				l := ltValid(a)
				tt.spoil(&l)
				err := b.Reconfigure(later, l)
				var le *LimitError
				if tt.field == "algorithm" && errors.Is(err, ErrMismatch) {
					continue // an unknown algorithm is also another one: either error will do
				}
				if !errors.As(err, &le) || le.Field != tt.field || !errors.Is(err, ErrInvalidLimit) {
					t.Errorf("%s: Reconfigure = %v, want a *LimitError on %s", tt.name, err, tt.field)
				}
			}
			for _, o := range Algorithms() {
				if o == a {
					continue
				}
				if err := b.Reconfigure(later, ltValid(o)); !errors.Is(err, ErrMismatch) {
					t.Errorf("Reconfigure to %v = %v, want ErrMismatch", o, err)
				}
			}
			if after, _ := b.AppendBinary(nil); !bytes.Equal(after, before) {
				t.Errorf("failed Reconfigure changed the state:\n%x\n%x", before, after)
			}
		})
	}
}

// TestLimitSize: Guava's options live in Limit's padding; a Limit is part of
// every key's state (sync pins its entries' size classes).
func TestLimitSize(t *testing.T) {
	if got := unsafe.Sizeof(Limit{}); got != 56 {
		t.Errorf("Limit is %d bytes, want 56", got)
	}
}

// TestZeroAlgorithmIsTokenBucket: Limit{Limit: 3, Period: time.Minute}, with
// no Algorithm, is a token bucket, as an unset algorithm is on the wire: New
// and NewIn build one whose Config names TokenBucket and whose decisions
// are those of an explicit TokenBucket; a token bucket takes a zero
// Algorithm in Reconfigure; and a stored state never names algorithm 0.
// Before, New rejected it as "unknown algorithm 0".
func TestZeroAlgorithmIsTokenBucket(t *testing.T) {
	zero := Limit{Limit: 3, Period: time.Minute}
	explicit := zero
	explicit.Algorithm = TokenBucket
	if err := zero.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := zero.WithDefaults(); got != explicit {
		t.Errorf("WithDefaults = %+v, want %+v", got, explicit)
	}
	var sp Space
	for name, newBucket := range map[string]func(Limit) (Bucket, error){
		"New":   func(l Limit) (Bucket, error) { return New(l, ltT0) },
		"NewIn": func(l Limit) (Bucket, error) { return NewIn(&sp, l, ltT0) },
	} {
		b, err := newBucket(zero)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := New(explicit, ltT0)
		if b.Config() != explicit {
			t.Errorf("%s: Config = %+v, want %+v", name, b.Config(), explicit)
		}
		for i, step := range []struct {
			at   time.Duration
			hits int64
		}{{0, 1}, {0, 2}, {0, 1}, {20 * time.Second, 1}, {20 * time.Second, 1}, {time.Minute, 3}} {
			got, err1 := b.Take(ltT0.Add(step.at), step.hits)
			w, err2 := want.Take(ltT0.Add(step.at), step.hits)
			if got != w || err1 != nil || err2 != nil {
				t.Errorf("%s: step %d (+%v, %d hits): %+v, %v; want %+v, %v", name, i, step.at, step.hits, got, err1, w, err2)
			}
		}
		if err := b.Reconfigure(ltT0.Add(time.Minute), Limit{Limit: 6, Period: time.Minute}); err != nil {
			t.Errorf("%s: Reconfigure with a zero Algorithm: %v", name, err)
		}
	}
	state := appendLimit(nil, zero)
	if _, err := Decode(state); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Decode of a state naming algorithm 0: %v; want ErrCorrupt", err)
	}
}
