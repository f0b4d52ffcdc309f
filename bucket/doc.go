// Package bucket implements ringlimit's rate-limiting algorithms as pure state
// and decision functions.
//
// Every algorithm is a value that implements [Bucket]. A bucket never reads the
// wall clock, starts no goroutine, does no I/O and carries no lock: the time of
// every call is an argument, and the caller (the keyed store in package sync,
// the simulator, or an embedding program) serialises access to one bucket.
//
// The caller's loop:
//
//	b, err := bucket.New(bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 100, Period: time.Second}, now)
//	if err != nil { ... } // a *LimitError: the limit is invalid
//	d, err := b.Take(now, 1)
//	if err != nil { ... } // hits < 0
//	if !d.Allowed { retry after d.RetryAfter }
//	if d.Wait > 0 { proceed after d.Wait (shaping algorithms) }
//
// Time going backwards is treated as no time elapsed: a bucket never refills,
// never panics and never moves its own notion of time back.
//
// Hits admitted on another node are applied with [Bucket.Drain]: they are
// always counted, even past the limit, so later requests pay for earlier
// over-admission. States travel between nodes in a compact binary form
// ([Bucket.AppendBinary] and [Decode]) and can be merged ([Bucket.Merge])
// keeping the most consumed view.
package bucket
