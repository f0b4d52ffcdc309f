package bucket

import (
	"fmt"
	"time"
)

// This file reproduces Guava's SmoothRateLimiter (SmoothBursty and
// SmoothWarmingUp) on ringlimit's Bucket interface. Choices that Guava does not
// make for us:
//
//   - Units: Guava keeps time in whole microseconds (long) and the stable
//     interval in fractional microseconds (double). We keep time in whole
//     nanoseconds (int64 Unix nanoseconds) and the intervals in fractional
//     nanoseconds (float64), and truncate every wait to whole nanoseconds
//     exactly where Guava truncates to whole microseconds (its (long) casts).
//     Figures therefore agree with Guava's to within a microsecond.
//   - Take is tryAcquire(hits, MaxWait): admitted iff nextFreeTicket <= now +
//     MaxWait. Like Guava, a request larger than the stored permits is admitted
//     and its cost is paid by the NEXT request; so RetryAfter is never MaxRetry
//     (short of int64 saturation, in year 2262).
//   - Remaining is floor(storedPermits) when the next free ticket is not in the
//     future, else 0: the stored permits the next request draws on. For
//     SmoothBursty they are free; SmoothWarmingUp still charges their warm-up
//     cost to the request after. Decision.Limit is floor(maxPermits).
//   - ResetAt is when storedPermits reaches maxPermits if nothing more is taken.
//   - Time going backwards: every call uses max(now, latest instant seen).
//   - Refund first pulls the next free ticket back towards now by one stable
//     interval per permit (undoing fresh permits), then stores what is left,
//     capped at maxPermits.
//   - Idle is exact: a fresh SmoothBursty stores nothing (Guava's initial
//     state), so a SmoothBursty that idled and saved up permits is NOT idle: it
//     would admit a burst that a fresh one would not. A fresh SmoothWarmingUp is
//     cold (maxPermits stored), which is where idling leads, so it is evictable.

// smoothColdFactor is Guava's cold factor for SmoothWarmingUp: a cold limiter
// spaces permits three stable intervals apart.
const smoothColdFactor = 3.0

// smoothLimiter is Guava's SmoothRateLimiter: permits saved while idle
// (storedPermits, up to maxPermits) and a next free ticket; a request is
// granted at the ticket, which it pushes forward by its own cost, so a
// request's wait is paid by the next one. SmoothBursty stored permits are free
// (a burst of up to maxPermits); SmoothWarmingUp's cost more the more are
// stored, ramping from a third of the rate up to the rate over WarmUp. Bound:
// hits admitted in any window [a, T] <= (T-a+MaxWait)/stableInterval + the
// last one's hits + (SmoothBursty only) the permits stored at a.
type smoothLimiter struct {
	l Limit
	// Derived from l by setRate; all intervals in nanoseconds.
	coldFactor float64 // SmoothWarmingUp: cold interval / stable interval
	stable     float64 // interval between two permits at the stable rate
	maxPermits float64 // most permits stored
	threshold  float64 // SmoothWarmingUp: stored permits below which each costs stable
	slope      float64 // SmoothWarmingUp: extra cost per stored permit above threshold
	coolDown   float64 // idle time that stores one permit
	// State.
	stored float64 // stored permits, in [0, maxPermits]
	next   int64   // next free ticket, Unix nanoseconds; never before last
	last   int64   // latest instant seen, Unix nanoseconds
}

var _ Bucket = (*smoothLimiter)(nil)

func newSmoothBursty(l Limit, now int64) Bucket { return newSmooth(l, now, smoothColdFactor) }

func newSmoothWarmingUp(l Limit, now int64) Bucket { return newSmooth(l, now, smoothColdFactor) }

func decodeSmoothBursty(l Limit, r *reader) (Bucket, error) { return decodeSmooth(l, r) }

func decodeSmoothWarmingUp(l Limit, r *reader) (Bucket, error) { return decodeSmooth(l, r) }

// newSmooth is Guava's create: a limiter whose next free ticket is now, then
// setRate from the initial state (maxPermits == 0).
func newSmooth(l Limit, now int64, coldFactor float64) *smoothLimiter {
	s := &smoothLimiter{coldFactor: coldFactor, next: now, last: now}
	s.setRate(l)
	return s
}

func (s *smoothLimiter) warming() bool { return s.l.Algorithm == SmoothWarmingUp }

// setRate is Guava's doSetRate for both subclasses: it derives the intervals
// from l and scales the stored permits to the new maxPermits. The caller has
// resynced at the current time. Guava's special cases for an infinite rate
// cannot arise: Limit and Period are finite and positive.
func (s *smoothLimiter) setRate(l Limit) {
	oldMax := s.maxPermits
	s.l = l
	s.stable = float64(l.Period) / float64(l.Limit)
	if s.warming() {
		warmUp := float64(l.WarmUp)
		cold := s.stable * s.coldFactor
		s.threshold = 0.5 * warmUp / s.stable
		s.maxPermits = s.threshold + 2.0*warmUp/(s.stable+cold)
		s.slope = (cold - s.stable) / (s.maxPermits - s.threshold)
		s.coolDown = warmUp / s.maxPermits
		if oldMax == 0 {
			s.stored = s.maxPermits // the initial state is cold
		} else {
			s.stored = s.stored * s.maxPermits / oldMax
		}
	} else {
		if l.Burst > 0 {
			s.maxPermits = float64(l.Burst)
		} else { // maxBurstSeconds = 1: one second's worth of permits
			s.maxPermits = float64(l.Limit) * float64(time.Second) / float64(l.Period)
		}
		s.threshold, s.slope = 0, 0
		s.coolDown = s.stable
		if oldMax == 0 {
			s.stored = 0 // the initial state stores nothing
		} else {
			s.stored = s.stored * s.maxPermits / oldMax
		}
	}
	s.stored = min(max(s.stored, 0), s.maxPermits)
}

// clock returns the instant of a call at now: now, or the latest instant seen
// when the clock went backwards. It records it.
func (s *smoothLimiter) clock(now time.Time) int64 {
	s.last = later(nanos(now), s.last)
	return s.last
}

// resync is Guava's resync: the time since a next free ticket in the past is
// turned into stored permits, and the ticket moves to now.
func (s *smoothLimiter) resync(now int64) {
	if now <= s.next {
		return
	}
	idle := float64(elapsed(s.next, now))
	if idle >= (s.maxPermits-s.stored)*s.coolDown {
		s.stored = s.maxPermits // also where ResetAt says, despite rounding
	} else {
		s.stored = min(s.maxPermits, s.stored+idle/s.coolDown)
	}
	s.next = now
}

// permitsToTime is the cost of the next permit when permits are stored above
// the threshold (SmoothWarmingUp).
func (s *smoothLimiter) permitsToTime(permits float64) float64 {
	return s.stable + permits*s.slope
}

// storedPermitsToWaitTime is Guava's: the nanoseconds that spending take of
// stored permits costs. Free for SmoothBursty; for SmoothWarmingUp the integral
// of permitsToTime, a trapezoid above the threshold and the stable interval
// per permit below it, each part truncated as Guava truncates.
func (s *smoothLimiter) storedPermitsToWaitTime(stored, take float64) int64 {
	if !s.warming() {
		return 0
	}
	var ns int64
	if above := stored - s.threshold; above > 0 {
		aboveTake := min(above, take)
		length := s.permitsToTime(above) + s.permitsToTime(above-aboveTake)
		ns = toInt64(aboveTake * length / 2.0)
		take -= aboveTake
	}
	return addSat(ns, toInt64(s.stable*take))
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
	s.next = addSat(s.next, wait)
	s.stored -= spend
	return granted
}

// tryAcquire is Guava's tryAcquire(hits, timeout) at now; hits == 0 peeks.
func (s *smoothLimiter) tryAcquire(now, hits, timeout int64) Decision {
	s.resync(now)
	deadline := addSat(now, timeout)
	if s.next > deadline { // Guava's canAcquire: next - timeout <= now
		d := s.decision(now, false)
		d.RetryAfter = time.Duration(elapsed(deadline, s.next))
		return d
	}
	granted := s.next
	if hits > 0 {
		granted = s.reserve(hits, now)
	}
	d := s.decision(now, true)
	d.Wait = time.Duration(elapsed(now, granted))
	return d
}

// decision fills what every Decision reports about the state at now.
func (s *smoothLimiter) decision(now int64, allowed bool) Decision {
	d := Decision{Allowed: allowed, Limit: toInt64(s.maxPermits)}
	if s.next <= now {
		d.Remaining = toInt64(s.stored)
	}
	full := toDuration((s.maxPermits - s.stored) * s.coolDown)
	d.ResetAt = unix(addSat(later(s.next, now), int64(full)))
	return d
}

// Take implements Bucket: Guava's tryAcquire(hits, MaxWait). An admitted
// request's Wait is the time until its ticket; a larger request is admitted
// all the same and the next one pays for it.
func (s *smoothLimiter) Take(now time.Time, hits int64) (Decision, error) {
	if hits < 0 {
		return Decision{}, ErrNegativeHits
	}
	return s.tryAcquire(s.clock(now), hits, int64(s.l.MaxWait)), nil
}

// Drain implements Bucket: a reservation whose wait nobody observes. A debt
// beyond the year 2262 saturates.
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
		debt := float64(elapsed(t, s.next))
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
// limit, then scales the stored permits to the new maxPermits.
func (s *smoothLimiter) Reconfigure(now time.Time, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Algorithm != s.l.Algorithm {
		return fmt.Errorf("%w: cannot reconfigure %v as %v", ErrMismatch, s.l.Algorithm, l.Algorithm)
	}
	s.resync(s.clock(now))
	s.setRate(l)
	return nil
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
	t := later(nanos(now), c.last)
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

// AppendBinary implements Bucket: the limit, then next free ticket, latest
// instant seen (varints) and stored permits (float).
func (s *smoothLimiter) AppendBinary(b []byte) ([]byte, error) {
	b = appendLimit(b, s.l)
	b = appendVarint(b, s.next)
	b = appendVarint(b, s.last)
	b = appendFloat(b, s.stored)
	return b, nil
}

// decodeSmooth reads what AppendBinary wrote after the limit.
func decodeSmooth(l Limit, r *reader) (Bucket, error) {
	next := r.varint("next free ticket")
	last := r.varint("last instant")
	stored := r.float("stored permits")
	if r.err != nil {
		return nil, r.err
	}
	s := newSmooth(l, last, smoothColdFactor)
	if next < last {
		return nil, fmt.Errorf("%w: next free ticket %d before last instant %d", ErrCorrupt, next, last)
	}
	if !(stored >= 0 && stored <= s.maxPermits) {
		return nil, fmt.Errorf("%w: stored permits %v outside [0, %v]", ErrCorrupt, stored, s.maxPermits)
	}
	s.next, s.stored = next, stored
	return s, nil
}
