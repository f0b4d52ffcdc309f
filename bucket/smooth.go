package bucket

import (
	"fmt"
	"math"
	"time"
)

// This file computes Guava's SmoothRateLimiter (SmoothBursty and
// SmoothWarmingUp, Guava 31.1) on ringlimit's Bucket interface, in Guava's
// arithmetic: the same quantities in the same units, the same float64
// operations in the same order, and the same truncations, so that a sequence
// of calls gets the waits and decisions Guava gives (bucket's guava-tagged
// differential test drives Guava itself; docs/algorithms.md has its figures).
//
//   - Time is whole microseconds: Guava's stopwatch reads whole microseconds
//     (since the limiter's creation); the limiter reads its time argument as
//     whole Unix microseconds (truncated towards minus infinity). Intervals
//     are float64 microseconds, every cost is truncated to whole microseconds
//     where Guava casts to long, and a timeout (MaxWait) is truncated to whole
//     microseconds as Guava's TimeUnit.toMicros does.
//   - The rate is Limit/Period as float64 permits per second,
//     float64(Limit)*1e9/float64(Period): Limit 5, Period 1s is create(5.0);
//     Limit 1, Period 3s is create(1/3.0), the same double.
//   - Where Guava's long arithmetic would wrap (a debt past Long.MAX_VALUE
//     microseconds), the sum saturates; the next free ticket saturates at
//     maxMicros (the year 2262 in Unix nanoseconds), so that its encoding in
//     nanoseconds is exact. Neither happens before the year 2262.
//   - Take is tryAcquire(hits, MaxWait): admitted iff nextFreeTicket - timeout
//     <= now (Guava's canAcquire). Like Guava, a request larger than the
//     stored permits is admitted and its cost is paid by the NEXT request.
//     MaxWait is the per-call timeout: a Reconfigure that changes MaxWait only
//     is not a setRate (nothing is resynced or rescaled).
//   - Drain is acquire(hits) whose wait nobody observes (Guava's reserve).
//   - Remaining is floor(storedPermits) when the next free ticket is not in the
//     future, else 0: the stored permits the next request draws on. For
//     SmoothBursty they are free; SmoothWarmingUp still charges their warm-up
//     cost to the request after. Decision.Limit is floor(maxPermits).
//   - ResetAt is when storedPermits reaches maxPermits if nothing more is taken.
//   - Time going backwards: every call uses max(now, latest instant seen).
//   - Refund (not a Guava operation) first pulls the next free ticket back
//     towards now by one stable interval per permit (undoing fresh permits),
//     then stores what is left, capped at maxPermits.
//   - Idle is exact: a fresh SmoothBursty stores nothing (Guava's initial
//     state), so a SmoothBursty that idled and saved up permits is NOT idle: it
//     would admit a burst that a fresh one would not. A fresh SmoothWarmingUp is
//     cold (maxPermits stored), which is where idling leads, so it is evictable.

// Guava's defaults: create(rate) stores one second's worth of permits, and
// create(rate, warmup) spaces a cold limiter's permits three stable intervals
// apart.
const (
	// DefaultMaxBurstSeconds is SmoothBursty's maxBurstSeconds when
	// Limit.MaxBurstMillis and Limit.Burst are zero: Guava's create(rate).
	DefaultMaxBurstSeconds = 1.0
	// DefaultColdFactor is SmoothWarmingUp's cold factor when
	// Limit.ColdFactorMilli is zero: Guava's create(rate, warmup).
	DefaultColdFactor = 3.0
)

// maxMicros is the latest instant a smooth limiter keeps, in Unix
// microseconds: the latest whose nanoseconds fit in an int64.
const maxMicros = math.MaxInt64 / 1000

// minMicros is the earliest instant a smooth limiter keeps, in Unix
// microseconds: the earliest whose nanoseconds fit in an int64.
const minMicros = math.MinInt64 / 1000

// smoothLimiter is Guava's SmoothRateLimiter: permits saved while idle
// (storedPermits, up to maxPermits) and a next free ticket; a request is
// granted at the ticket, which it pushes forward by its own cost, so a
// request's wait is paid by the next one. SmoothBursty stored permits are free
// (a burst of up to maxPermits); SmoothWarmingUp's cost more the more are
// stored, ramping from Limit/(cold factor) per Period up to the rate over WarmUp.
// Bound: hits admitted in any window [a, T] <= (T-a+MaxWait)/stableInterval +
// the last one's hits + (SmoothBursty only) the permits stored at a.
type smoothLimiter struct {
	l Limit
	// Derived from l by setRate, as Guava's fields; intervals in microseconds.
	stable     float64 // stableIntervalMicros
	maxPermits float64 // most permits stored
	threshold  float64 // SmoothWarmingUp: thresholdPermits
	slope      float64 // SmoothWarmingUp: extra cost per stored permit above threshold
	coolDown   float64 // coolDownIntervalMicros: idle time that stores one permit
	// State.
	stored float64 // storedPermits
	next   int64   // nextFreeTicketMicros, Unix microseconds; never before last
	last   int64   // latest instant seen, Unix microseconds
}

var _ Bucket = (*smoothLimiter)(nil)

func newSmoothBursty(l Limit, now int64) Bucket { return newSmooth(l, nsToMicros(now)) }

func newSmoothWarmingUp(l Limit, now int64) Bucket { return newSmooth(l, nsToMicros(now)) }

func decodeSmoothBursty(l Limit, r *reader) (Bucket, error) { return decodeSmooth(l, r) }

func decodeSmoothWarmingUp(l Limit, r *reader) (Bucket, error) { return decodeSmooth(l, r) }

// nsToMicros converts Unix nanoseconds to whole Unix microseconds, rounding
// towards minus infinity (the microsecond that the instant is in), not before
// minMicros.
func nsToMicros(ns int64) int64 {
	us := ns / 1000
	if ns%1000 < 0 {
		us--
	}
	return max(us, minMicros)
}

// microsToNs converts Unix microseconds in [minMicros, maxMicros] to
// nanoseconds.
func microsToNs(us int64) int64 { return us * 1000 }

// permitsPerSecond is the rate of l as Guava's double permitsPerSecond.
func permitsPerSecond(l Limit) float64 {
	return float64(l.Limit) * 1e9 / float64(l.Period)
}

// newSmooth is Guava's create at now (Unix microseconds): a limiter whose next
// free ticket is now, then setRate from the initial state (maxPermits == 0).
func newSmooth(l Limit, now int64) *smoothLimiter {
	s := &smoothLimiter{next: now, last: now}
	s.setRate(l)
	return s
}

func (s *smoothLimiter) warming() bool { return s.l.Algorithm == SmoothWarmingUp }

// setRate is Guava's doSetRate (SmoothRateLimiter's, then the subclass's): it
// derives the intervals from l and scales the stored permits to the new
// maxPermits. The caller has resynced at the current time. Guava's special
// case for an infinite rate cannot arise: Limit and Period are finite and
// positive. Products that feed a sum are converted explicitly so that the
// compiler does not fuse them (Java does not).
func (s *smoothLimiter) setRate(l Limit) {
	oldMax := s.maxPermits
	s.l = l
	pps := permitsPerSecond(l)
	s.stable = 1e6 / pps
	if s.warming() {
		warmUp := float64(int64(l.WarmUp / time.Microsecond)) // Guava's warmupPeriodMicros
		cold := s.stable * l.coldFactor()
		s.threshold = 0.5 * warmUp / s.stable
		s.maxPermits = s.threshold + 2.0*warmUp/(s.stable+cold)
		s.slope = (cold - s.stable) / (s.maxPermits - s.threshold)
		s.coolDown = warmUp / s.maxPermits
		if oldMax == 0 {
			s.stored = s.maxPermits // the initial state is cold
		} else {
			s.stored = s.stored * s.maxPermits / oldMax
		}
		return
	}
	if l.Burst > 0 { // ringlimit's own option: a whole number of permits
		s.maxPermits = float64(l.Burst)
	} else {
		s.maxPermits = l.maxBurstSeconds() * pps
	}
	s.threshold, s.slope = 0, 0
	s.coolDown = s.stable
	if oldMax == 0 {
		s.stored = 0 // the initial state stores nothing
	} else {
		s.stored = s.stored * s.maxPermits / oldMax
	}
}

// clock returns the instant of a call at now, in Unix microseconds: now, or
// the latest instant seen when the clock went backwards. It records it.
func (s *smoothLimiter) clock(now time.Time) int64 {
	s.last = later(nsToMicros(nanos(now)), s.last)
	return s.last
}

// resync is Guava's resync: the time since a next free ticket in the past is
// turned into stored permits, and the ticket moves to now.
func (s *smoothLimiter) resync(now int64) {
	if now > s.next {
		fresh := float64(now-s.next) / s.coolDown
		s.stored = min(s.maxPermits, s.stored+fresh)
		s.next = now
	}
}

// permitsToTime is Guava's: the cost of the next permit when permits are
// stored above the threshold (SmoothWarmingUp).
func (s *smoothLimiter) permitsToTime(permits float64) float64 {
	return s.stable + float64(permits*s.slope)
}

// storedPermitsToWaitTime is Guava's: the microseconds that spending take of
// stored permits costs. Free for SmoothBursty; for SmoothWarmingUp the integral
// of permitsToTime, a trapezoid above the threshold and the stable interval
// per permit below it, each part truncated as Guava truncates.
func (s *smoothLimiter) storedPermitsToWaitTime(stored, take float64) int64 {
	if !s.warming() {
		return 0
	}
	var us int64
	if above := stored - s.threshold; above > 0 {
		aboveTake := min(above, take)
		length := s.permitsToTime(above) + s.permitsToTime(above-aboveTake)
		us = toInt64(aboveTake * length / 2.0)
		take -= aboveTake
	}
	return addSat(us, toInt64(s.stable*take))
}

// reserve is Guava's reserveEarliestAvailable: it grants hits at the next free
// ticket, which it returns, and pushes the ticket by their cost.
func (s *smoothLimiter) reserve(hits, now int64) int64 {
	s.resync(now)
	granted := s.next
	h := float64(hits)
	spend := min(h, s.stored)
	fresh := h - spend
	wait := addSat(s.storedPermitsToWaitTime(s.stored, spend), toInt64(fresh*s.stable))
	s.next = min(addSat(s.next, wait), maxMicros)
	s.stored -= spend
	return granted
}

// tryAcquire is Guava's tryAcquire(hits, timeout) at now, both in
// microseconds; hits == 0 peeks.
func (s *smoothLimiter) tryAcquire(now, hits, timeout int64) Decision {
	if s.next-timeout > now { // Guava's canAcquire; timeout >= 0, no overflow
		d := s.decision(now, false)
		d.RetryAfter = time.Duration(mulSat(s.next-timeout-now, 1000))
		return d
	}
	granted := s.next
	if hits > 0 {
		granted = s.reserve(hits, now)
	} else {
		s.resync(now)
	}
	d := s.decision(now, true)
	d.Wait = time.Duration(mulSat(granted-now, 1000)) // 0 when not in the future
	return d
}

// decision fills what every Decision reports about the state at now.
func (s *smoothLimiter) decision(now int64, allowed bool) Decision {
	d := Decision{Allowed: allowed, Limit: toInt64(s.maxPermits)}
	if s.next <= now {
		// Guava's rescaling on setRate may leave storedPermits an ulp above
		// maxPermits until the next resync; Remaining never exceeds Limit.
		d.Remaining = min(toInt64(s.stored), d.Limit)
	}
	full := toInt64((s.maxPermits - s.stored) * s.coolDown)
	d.ResetAt = unix(microsToNs(min(addSat(later(s.next, now), full), maxMicros)))
	return d
}

// Take implements Bucket: Guava's tryAcquire(hits, MaxWait). An admitted
// request's Wait is the time until its ticket; a larger request is admitted
// all the same and the next one pays for it.
func (s *smoothLimiter) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	return s.tryAcquire(s.clock(now), hits, int64(s.l.MaxWait/time.Microsecond)), nil
}

// Drain implements Bucket: Guava's acquire(hits), whose wait nobody
// observes.
func (s *smoothLimiter) Drain(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	t := s.clock(now)
	s.resync(t)
	if hits > 0 {
		s.reserve(hits, t)
	}
	return nil
}

// Refund implements Bucket: it pulls the next free ticket back by one stable
// interval per hit, not before now, then stores the hits left over, up to
// maxPermits.
func (s *smoothLimiter) Refund(now time.Time, hits int64) error {
	if hits < 0 {
		return ErrNegativeHits
	}
	t := s.clock(now)
	s.resync(t)
	h := float64(hits)
	if s.next > t && h > 0 {
		debt := float64(s.next - t)
		if back := h * s.stable; back < debt {
			s.next -= toInt64(back)
			h = 0
		} else {
			s.next = t
			h -= debt / s.stable
		}
	}
	if h > 0 {
		s.stored = min(s.maxPermits, s.stored+h)
	}
	return nil
}

// Reconfigure implements Bucket: Guava's setRate. It resyncs under the old
// limit, then scales the stored permits to the new maxPermits. A limit that
// differs in MaxWait only is a new timeout for the calls to come, not a new
// rate: nothing is resynced or rescaled.
func (s *smoothLimiter) Reconfigure(now time.Time, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Algorithm != s.l.Algorithm {
		return fmt.Errorf("%w: cannot reconfigure %v as %v", ErrMismatch, s.l.Algorithm, l.Algorithm)
	}
	if l.withMaxWait(s.l.MaxWait) == s.l {
		s.l = l // the clock is read by the call that uses the timeout
		return nil
	}
	s.resync(s.clock(now))
	s.setRate(l)
	return nil
}

// withMaxWait returns l with MaxWait set to w.
func (l Limit) withMaxWait(w time.Duration) Limit {
	l.MaxWait = w
	return l
}

// Merge implements Bucket: both states resynced at now, it keeps the later
// next free ticket and the fewer stored permits (other's scaled to this
// limit's maxPermits).
func (s *smoothLimiter) Merge(now time.Time, other Bucket) error {
	o, ok := other.(*smoothLimiter)
	if !ok || o.l.Algorithm != s.l.Algorithm {
		return fmt.Errorf("%w: cannot merge into %v", ErrMismatch, s.l.Algorithm)
	}
	t := later(s.clock(now), o.last)
	s.last = t
	c := *o
	c.resync(t)
	s.resync(t)
	stored := c.stored
	if c.maxPermits != s.maxPermits {
		stored = min(s.maxPermits, stored*s.maxPermits/c.maxPermits)
	}
	s.stored = min(s.stored, stored)
	s.next = later(s.next, c.next)
	return nil
}

// Config implements Bucket.
func (s *smoothLimiter) Config() Limit { return s.l }

// Idle implements Bucket: the ticket is not in the future and the stored
// permits are a fresh limiter's: none for SmoothBursty (so one that saved
// permits is not idle), maxPermits for SmoothWarmingUp.
func (s *smoothLimiter) Idle(now time.Time) bool {
	c := *s
	t := later(nsToMicros(nanos(now)), c.last)
	c.resync(t)
	if c.next > t {
		return false
	}
	if c.warming() {
		return c.stored == c.maxPermits
	}
	return c.stored == 0
}

// Clone implements Bucket.
func (s *smoothLimiter) Clone() Bucket {
	c := *s
	return &c
}

// AppendBinary implements Bucket: the limit, then next free ticket and latest
// instant seen (varints, Unix nanoseconds that are whole microseconds: the
// layout of the nanosecond limiter that came before) and stored permits
// (float).
func (s *smoothLimiter) AppendBinary(b []byte) ([]byte, error) {
	b = appendLimit(b, s.l)
	b = appendVarint(b, microsToNs(s.next))
	b = appendVarint(b, microsToNs(s.last))
	b = appendFloat(b, s.stored)
	return b, nil
}

// smoothStoredSlack is how far above maxPermits a decoded storedPermits may
// be: Guava's rescaling on setRate (stored*max/oldMax) may round one ulp above
// maxPermits, and Guava keeps that until the next resync.
const smoothStoredSlack = 1 + 0x1p-40

// decodeSmooth reads what AppendBinary wrote after the limit. Instants are
// truncated to the microsecond, so that a state written by the nanosecond
// limiter of earlier releases decodes to the microsecond it was in.
func decodeSmooth(l Limit, r *reader) (Bucket, error) {
	next := nsToMicros(r.varint("next free ticket"))
	last := nsToMicros(r.varint("last instant"))
	stored := r.float("stored permits")
	if r.err != nil {
		return nil, r.err
	}
	if next < last {
		return nil, fmt.Errorf("%w: next free ticket %d µs before last instant %d µs", ErrCorrupt, next, last)
	}
	s := newSmooth(l, last)
	if !(stored >= 0 && stored <= s.maxPermits*smoothStoredSlack) {
		return nil, fmt.Errorf("%w: stored permits %v outside [0, %v]", ErrCorrupt, stored, s.maxPermits)
	}
	s.next, s.stored = next, stored
	return s, nil
}
