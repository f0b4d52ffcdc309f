package sync

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/ring"
)

// Config configures a Node. Start from DefaultConfig and set Self.
type Config struct {
	// Self is this node's name: its memberlist name and its name on the ring.
	Self string
	// Incarnation identifies this process lifetime: greater than any
	// earlier life's of this node (the driver passes, say, the start time
	// in nanoseconds). Peers use it to tell a restarted node's sequence
	// numbers from the old ones, and take only a greater one for a new
	// life (a restarted node is sent again the hand-offs it missed).
	Incarnation uint64
	// Joining tells the node that it starts into a cluster that may have
	// run before it, a previous life of this node among its members (it
	// was restarted, or started with seeds), rather than starting a new
	// cluster. With Policy fail-closed, a key this node owns and starts
	// from no state (no hand-off, backup or kept state of it came) then
	// starts drained as of the node's start, refilling at its rate,
	// instead of full (lostkey.go): the state its previous life spent may
	// be held by no member. The cost: such a key admits at most its rate
	// over the time since the start, not its burst, until it has refilled
	// (capacity / rate after the start). False for the first nodes of a
	// new cluster. A node started by ringlimit.Start is Joining when it
	// is given seeds (Gossip.Seeds): every node of a cluster but the first
	// is, at a cold start too, so under fail-closed the keys they own
	// start drained for one refill after a cold start as well.
	Joining bool
	// Mode is the consistency mode of requests that ask for ModeDefault.
	Mode check.Mode
	// Policy is the partition policy of requests that ask for PolicyDefault.
	Policy check.Policy
	// Ring configures the consistent-hash ring.
	Ring ring.Config

	// TickInterval is how often the driver calls Tick. Deadlines below are
	// honoured to within one tick. Default 5ms: fine enough for the forward
	// window and the flush interval, cheap (200 calls a second).
	TickInterval time.Duration
	// FlushInterval is how often a non-owner flushes its pending hits to each
	// owner (cached mode), and the least time between two pushes of one key by
	// its owner. Default 100ms: the drift bound grows with it; see
	// docs/consistency.md.
	FlushInterval time.Duration
	// SyncFraction sets the drift bound of cached mode: a non-owner flushes
	// a key early, without waiting for FlushInterval, once the hits it
	// admitted and the owner has not yet applied reach SyncFraction x the
	// key's capacity / the number of members; the owner pushes early the same
	// way. Hits that some node cannot see are then at most about SyncFraction
	// x capacity, which bounds over-admission (docs/consistency.md). Default
	// 0.02: 2% of a burst, at most 50 x members early syncs to spend a full
	// bucket, and none in steady state where refill limits admissions.
	SyncFraction float64
	// MaxBatch is the most items in one flush, forward, push, lease or
	// hand-off message; a batch that fills is sent at once. Default 1000.
	MaxBatch int
	// ForwardWindow is how long owner-mode checks wait to be batched with
	// others bound for the same owner while a batch to it is in flight.
	// Default 1ms. Zero sends every check as soon as possible.
	ForwardWindow time.Duration
	// RequestTimeout is how long a forwarded check, flush, lease or hand-off
	// waits for its answer before it is retried or, for a check, decided by
	// the partition policy. Default 500ms.
	RequestTimeout time.Duration
	// UnreachableAfter is how long an owner stays marked unreachable after a
	// failed send or a timeout, during which its keys are decided by the
	// partition policy without waiting. Default 1s.
	UnreachableAfter time.Duration
	// MaxRetryItems bounds the flush items buffered per owner while it is
	// unreachable. Beyond it the oldest are dropped and counted in
	// Metrics.FlushItemsDropped. Default 100000.
	MaxRetryItems int
	// InterestTTL is how long an owner remembers that a node flushed a key:
	// within it, the node is pushed the key's state once when the key is
	// nearly spent (interest.go). Default 10s.
	InterestTTL time.Duration
	// LeaseTTL is how long a lease may be spent after it was granted.
	// Default 1s.
	LeaseTTL time.Duration
	// MaxKeys bounds the keys a node stores (owned and cached); beyond it the
	// least recently used are evicted. Default 1,000,000.
	MaxKeys int
	// MaxKeyBytes bounds the memory of the keys a node keeps, in bytes:
	// every stored key (owned, cached, local), every backup held for
	// another owner and every hand-off not yet acknowledged is charged its
	// allocations (budget.go); beyond it, as beyond MaxKeys, the least
	// recently used keys are evicted, and held backups beyond half of it
	// are not kept. Zero: no byte bound, MaxKeys alone. Default 256 MiB:
	// above what MaxKeys of short keys take (about 120 MB), so that it
	// binds only when keys are long (a million keys of 1 KiB would take
	// 1.2 GB).
	MaxKeyBytes int64
	// MaxKeyLen bounds the length of a key in bytes. Default 1024.
	MaxKeyLen int
	// SweepInterval is how long the store takes to visit each of its 64
	// shards once on Tick (one shard every SweepInterval/64), evicting idle
	// keys, expiring interest and leases, and sampling the hot keys. Default
	// 5s: at 1M keys about 200k entry visits a second, well under 1% of a core.
	SweepInterval time.Duration
	// HandoffWait is how long a node that has just gained a key's partition
	// from a live previous owner sends checks of keys it holds no state for
	// to that previous owner, while the hand-off is on its way (see
	// awaitFrom in await.go). Default 1s: gossip convergence plus one hand-off
	// round trip. Zero decides such keys at once on a fresh bucket, which can
	// let a restarted owner admit a spent key's full capacity again.
	HandoffWait time.Duration
	// FenceHold is how long an owner whose backup target for a key was
	// reported failed decides the key within what that target knew (its
	// last acknowledged mark) before a new target's acknowledgements count
	// (fence.go): the spread of failure detection between members. On the
	// minority side of a partition an owner may see its target fail before
	// it sees the others fail, and take a target on its own side, while the
	// majority takes the key over from the old target's backup. Default
	// 1s; zero trusts the new target at once.
	FenceHold time.Duration
	// OwnerLeaseTTL is how long an echo of this node's clock reading keeps
	// its ownership lease: it decides as a key's owner in owner and leased
	// mode only while a majority of its quorum baseline has echoed a
	// reading taken less than OwnerLeaseTTL ago, and a member that takes
	// over a failed member's partitions decides them only OwnerLeaseTTL
	// (plus a sixteenth, for clock rates) after the takeover is confirmed
	// (ownerlease.go, confirm.go). It bounds how long an owner cut off from
	// the majority goes on deciding, with no agreement between clocks: each
	// node measures it on its own. It must be at least 2 x RequestTimeout,
	// so that a renewal, started OwnerLeaseTTL/2 before the lapse and asked
	// again every RequestTimeout/2, has two rounds to come back. Default 2s:
	// a failover from a failed member costs it once more; renewals cost an
	// echo request per quiet peer about once a second while the node
	// decides as owner, none while traffic carries the echoes.
	OwnerLeaseTTL time.Duration
	// MaxRetries is how many times a hand-off (and, once leaving, a flush) is
	// sent again, each after RequestTimeout, before it is given up and counted
	// in Metrics.HandoffsDropped (or FlushItemsDropped). Default 4: a leave
	// finishes within 5 x RequestTimeout even when a peer is gone.
	MaxRetries int
	// FailedMemberTTL is how long a member that failed (crashed, or cut off
	// by a partition) still counts in this node's quorum baseline, the
	// members it expects to see (see quorum.go). While the live members are
	// no more than half the baseline, this node is on a minority side and
	// decides the keys of the members it lost by the partition policy,
	// degraded, instead of taking them over. Past this time a failed member
	// is forgotten, so that members that crashed for good do not keep the
	// survivors degraded. Default 2m: longer than a network blip or a
	// restart, short enough to bound that degradation. Zero turns the
	// quorum rule off: every departure counts as a leave, and a node cut off
	// takes over every key (the behaviour before the rule).
	FailedMemberTTL time.Duration
	// MaxClockOffset is the bound on how far this node's clock may differ
	// from cluster time (the median of the members' clocks, as measured
	// from the envelopes they exchange; clock.go). Beyond it the node
	// reports itself skewed (ClockStatus, Metrics.ClockSkewed; the node is
	// not ready) and keeps deciding on cluster time. It also sets the
	// least change of the measured median that moves this node's
	// correction (MaxClockOffset/16), and the difference beyond which the
	// states of a sender not yet measured are shifted to this node's time
	// on receipt. Default 500ms: far above what NTP keeps machines to
	// (milliseconds) and the measurement error on a loaded LAN, far below
	// a clock that is wrong. docs/consistency.md ("Clocks") states its
	// effect.
	MaxClockOffset time.Duration

	// Admitted, if not nil, is called each time a bucket of this node
	// admits a check of hits > 0, at the instant it takes the tokens: as
	// the key's owner (for its own clients or a forwarded check), from a
	// lease it holds, from its cached view, or by the partition policy.
	// at is the instant the driver passed to the input (Check, Tick,
	// Deliver, ...) that decided it. It is for the simulator and tests,
	// which check admissions against the bucket's envelope at the instant
	// they were decided rather than answered (an answer may wait for the
	// rest of its forward); nil in production. It runs inside the node's
	// input, so it must not block nor call the node.
	Admitted func(key string, hits int64, at time.Time)
}

// DefaultConfig returns the defaults documented on each field. Self is empty
// and must be set.
func DefaultConfig() Config {
	return Config{
		Mode:             check.ModeCached,
		Policy:           check.PolicyLocalShare,
		Ring:             ring.DefaultConfig(),
		TickInterval:     5 * time.Millisecond,
		FlushInterval:    100 * time.Millisecond,
		SyncFraction:     0.02,
		MaxBatch:         1000,
		ForwardWindow:    time.Millisecond,
		RequestTimeout:   500 * time.Millisecond,
		UnreachableAfter: time.Second,
		MaxRetryItems:    100_000,
		InterestTTL:      10 * time.Second,
		LeaseTTL:         time.Second,
		MaxKeys:          1_000_000,
		MaxKeyBytes:      256 << 20,
		MaxKeyLen:        1024,
		SweepInterval:    5 * time.Second,
		HandoffWait:      time.Second,
		FenceHold:        time.Second,
		OwnerLeaseTTL:    2 * time.Second,
		MaxRetries:       4,
		FailedMemberTTL:  2 * time.Minute,
		MaxClockOffset:   500 * time.Millisecond,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("sync: config: Self must be set")
	case c.Mode == check.ModeDefault || !c.Mode.Valid():
		return fmt.Errorf("sync: config: Mode: %w %d", check.ErrUnknownMode, c.Mode)
	case c.Policy == check.PolicyDefault || !c.Policy.Valid():
		return fmt.Errorf("sync: config: Policy: %w %d", check.ErrUnknownPolicy, c.Policy)
	case c.TickInterval <= 0:
		return errors.New("sync: config: TickInterval must be positive")
	case c.FlushInterval <= 0:
		return errors.New("sync: config: FlushInterval must be positive")
	case !(c.SyncFraction > 0 && c.SyncFraction <= 1):
		return errors.New("sync: config: SyncFraction must be in (0, 1]")
	case c.MaxBatch <= 0:
		return errors.New("sync: config: MaxBatch must be positive")
	case c.ForwardWindow < 0:
		return errors.New("sync: config: ForwardWindow must not be negative")
	case c.RequestTimeout <= 0:
		return errors.New("sync: config: RequestTimeout must be positive")
	case c.UnreachableAfter <= 0:
		return errors.New("sync: config: UnreachableAfter must be positive")
	case c.MaxRetryItems <= 0:
		return errors.New("sync: config: MaxRetryItems must be positive")
	case c.InterestTTL <= 0:
		return errors.New("sync: config: InterestTTL must be positive")
	case c.LeaseTTL <= 0:
		return errors.New("sync: config: LeaseTTL must be positive")
	case c.MaxKeys <= 0:
		return errors.New("sync: config: MaxKeys must be positive")
	case c.MaxKeyBytes < 0:
		return errors.New("sync: config: MaxKeyBytes must not be negative")
	case c.MaxKeyLen <= 0:
		return errors.New("sync: config: MaxKeyLen must be positive")
	case c.HandoffWait < 0:
		return errors.New("sync: config: HandoffWait must not be negative")
	case c.FenceHold < 0:
		return errors.New("sync: config: FenceHold must not be negative")
	case c.OwnerLeaseTTL <= 0:
		return errors.New("sync: config: OwnerLeaseTTL must be positive")
	case c.OwnerLeaseTTL < 2*c.RequestTimeout:
		return fmt.Errorf("sync: config: OwnerLeaseTTL (%v) must be at least 2 x RequestTimeout (%v): a renewal needs two rounds", c.OwnerLeaseTTL, c.RequestTimeout)
	case c.SweepInterval <= 0:
		return errors.New("sync: config: SweepInterval must be positive")
	case c.MaxRetries < 0:
		return errors.New("sync: config: MaxRetries must not be negative")
	case c.FailedMemberTTL < 0:
		return errors.New("sync: config: FailedMemberTTL must not be negative")
	case c.MaxClockOffset <= 0:
		return errors.New("sync: config: MaxClockOffset must be positive")
	}
	return c.Ring.Validate()
}
