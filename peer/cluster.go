package peer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Cluster is this node's view of the cluster's membership, kept by
// hashicorp/memberlist's gossip and failure detection. It calls its onChange
// callback with the full, sorted list of live members (itself included)
// whenever that list changes: on join, graceful leave, failure, and metadata
// update.
//
// The callback runs on one goroutine owned by the Cluster, never concurrently
// with itself; memberlist's notifications are coalesced into it, so a burst
// of changes may produce one call with the final list. The callback may take
// a little time (it only delays the next notification) but must not call
// Close or Leave.
//
// A Cluster is safe for concurrent use.
type Cluster struct {
	cfg      ClusterConfig
	onChange func([]Member)
	log      *slog.Logger
	d        *delegate
	ready    atomic.Bool // in a cluster: joined, joined by another, or alone by design
	gone     atomic.Bool // left or closed
	self     atomic.Pointer[Member]
	// failed holds the failed members of the list last given to onChange.
	failed atomic.Pointer[[]string]
	wg     sync.WaitGroup
	// joined is closed when ready is first set (markReady); refused is
	// closed when the Cluster gives up joining for good (refuse), err
	// then saying why.
	joined, refused       chan struct{}
	joinedOnce, refuseOne sync.Once
	err                   error

	mu sync.Mutex // guards the fields below; held across Leave
	// ml is the running memberlist, nil before Start.
	ml *memberlist.Memberlist
	// cancel stops the goroutines started by Start.
	cancel context.CancelFunc
	// closed is set by Close.
	closed bool
}

// NewCluster returns a Cluster for cfg that reports membership changes to
// onChange (nil ignores them). It starts nothing: call Start.
func NewCluster(cfg ClusterConfig, onChange func(members []Member)) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if onChange == nil {
		onChange = func([]Member) {}
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	cfg.SecondaryKeys = slices.Clone(cfg.SecondaryKeys)
	if cfg.JoinBackoffMin <= 0 {
		cfg.JoinBackoffMin = 100 * time.Millisecond
	}
	if cfg.JoinBackoffMax < cfg.JoinBackoffMin {
		cfg.JoinBackoffMax = max(2*time.Second, cfg.JoinBackoffMin)
	}
	l := discardLogger(cfg.Logger).With(slog.String("node", cfg.Name))
	c := &Cluster{
		cfg:      cfg,
		onChange: onChange,
		log:      l,
		d:        newDelegate(l, cfg.Name, encodeMeta(metaVersion, cfg.GRPCAddr, cfg.Incarnation)),
		joined:   make(chan struct{}),
		refused:  make(chan struct{}),
	}
	c.self.Store(&Member{Name: cfg.Name, GRPCAddr: cfg.GRPCAddr, Protocol: ProtocolVersion, Incarnation: cfg.Incarnation})
	return c, nil
}

// Start creates this node's memberlist (binding the gossip port) and, unless
// there are no seeds, starts joining them in the background, retrying with
// backoff until one answers or ctx ends; Ready reports when it has. It also
// starts the goroutine that calls onChange, which calls it at least once, with
// this node alone or more. ctx bounds the life of both goroutines; Close stops
// them earlier. Start returns an error if the memberlist cannot be created
// (the port is taken, say); it may be called once.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.ml != nil:
		return ErrAlreadyStarted
	}
	mc, err := c.cfg.memberlistConfig(c.d, c.log)
	if err != nil {
		return err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("peer: creating memberlist: %w", err)
	}
	self := ml.LocalNode()
	grpcAddr := advertisedGRPCAddr(c.cfg.GRPCAddr, self.Addr)
	if grpcAddr != c.cfg.GRPCAddr {
		c.d.setMeta(encodeMeta(metaVersion, grpcAddr, c.cfg.Incarnation))
		if err := ml.UpdateNode(mc.TCPTimeout); err != nil {
			_ = ml.Shutdown()
			return fmt.Errorf("peer: advertising gRPC address %s: %w", grpcAddr, err)
		}
	}
	c.ml = ml
	c.self.Store(&Member{Name: c.cfg.Name, GRPCAddr: grpcAddr, Protocol: ProtocolVersion, GossipAddr: self.Address(), Incarnation: c.cfg.Incarnation})
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel

	seeds := otherSeeds(c.cfg.Seeds, self.Address(), net.JoinHostPort(c.cfg.BindAddr, strconv.Itoa(int(self.Port))))
	if len(seeds) == 0 {
		c.markReady()
		c.log.Info("started a new cluster", "gossip", self.Address(), "grpc", grpcAddr)
	} else {
		c.wg.Go(func() { c.join(runCtx, ml, seeds) })
	}
	c.d.signal() // deliver the first list even if memberlist's events came before
	c.wg.Go(func() { c.run(runCtx) })
	if c.cfg.reconnectInterval() > 0 {
		port := int(ml.LocalNode().Port)
		c.wg.Go(func() { c.reconnect(runCtx, ml, seeds, port) })
	}
	return nil
}

// join tries to join the cluster through seeds until one answers, another
// member joins this node, or ctx ends, waiting between attempts from
// JoinBackoffMin doubling to JoinBackoffMax. It gives up for good (refuse,
// ErrNameTaken) when a seed's cluster holds this node's name, alive, at
// another address; a suspect holder, which may be this node's own previous
// run not yet declared dead, is waited out.
func (c *Cluster) join(ctx context.Context, ml *memberlist.Memberlist, seeds []string) {
	wait := c.cfg.JoinBackoffMin
	for attempt := 1; ctx.Err() == nil && !c.ready.Load(); attempt++ {
		c.d.takeConflict()
		n, err := ml.Join(seeds)
		conflict := c.d.takeConflict()
		switch {
		case conflict != nil && conflict.state == memberlist.StateAlive:
			c.refuse(fmt.Errorf("%w: %q is a live member at %s (this node: %s); give this node another name",
				ErrNameTaken, c.cfg.Name, conflict.addr, ml.LocalNode().Address()))
			return
		case conflict != nil:
			c.log.Warn("a suspect member at another address holds this node's name (a previous run?); retrying",
				"holder", conflict.addr, "retry_in", wait)
		case n > 0:
			c.markReady()
			c.log.Info("joined the cluster", "seeds_contacted", n, "members", ml.NumMembers())
			return
		default:
			c.log.Warn("could not join any seed; retrying", "seeds", seeds, "attempt", attempt, "retry_in", wait, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.JoinBackoffMax)
	}
}

// markReady records that the node is in a cluster, and signals run so that
// onChange hears of it (Ready changed).
func (c *Cluster) markReady() {
	c.ready.Store(true)
	c.joinedOnce.Do(func() { close(c.joined) })
	c.d.signal()
}

// refuse gives up joining for good with err.
func (c *Cluster) refuse(err error) {
	c.refuseOne.Do(func() {
		c.err = err
		close(c.refused)
	})
	c.log.Error("refused by the cluster; not joining", "err", err)
}

// Joined returns a channel that is closed once the node is in a cluster:
// it joined a seed, another member joined it, or it had no seeds (Ready).
func (c *Cluster) Joined() <-chan struct{} { return c.joined }

// Refused returns a channel that is closed when the Cluster gives up
// joining for good; Err then says why.
func (c *Cluster) Refused() <-chan struct{} { return c.refused }

// Err returns why the Cluster gave up joining (wrapping ErrNameTaken), or
// nil while Refused is open.
func (c *Cluster) Err() error {
	select {
	case <-c.refused:
		return c.err
	default:
		return nil
	}
}

// run calls onChange with every new member list (or set of failed
// members, or change of Ready) until ctx ends. A node that sees another
// live member is in a cluster, even if its own seeds never answered:
// someone joined it.
func (c *Cluster) run(ctx context.Context) {
	var (
		last       []Member
		lastFailed []string
		lastReady  bool
	)
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.d.changed:
		}
		ms, failed := c.d.snapshot()
		if len(ms) > 1 && !c.ready.Load() && c.Err() == nil {
			c.markReady()
			c.log.Info("joined by another member", "members", Names(ms))
		}
		ready := c.ready.Load()
		if !first && slices.Equal(ms, last) && slices.Equal(failed, lastFailed) && ready == lastReady {
			continue
		}
		first, last, lastFailed, lastReady = false, ms, failed, ready
		c.log.Debug("membership changed", "members", Names(ms), "failed", failed)
		c.failed.Store(&failed)
		c.onChange(slices.Clone(ms))
	}
}

// Failed returns the names of the members that failed (crashed, or out of
// reach: memberlist declared them dead without a leave) less than
// ReconnectTimeout ago and are not live again, sorted, as of the list last
// given to onChange: called from onChange, those that go with its list.
// A member that left gracefully (Leave) is not among them.
func (c *Cluster) Failed() []string {
	if p := c.failed.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// otherSeeds returns seeds without the node's own gossip addresses.
func otherSeeds(seeds []string, self ...string) []string {
	var out []string
	for _, s := range seeds {
		if s != "" && !slices.Contains(self, s) {
			out = append(out, s)
		}
	}
	return out
}

// Ready reports whether the node is in a cluster (it joined a seed, another
// member joined it, or it started one of its own, having no seeds) and is
// not closed.
func (c *Cluster) Ready() bool { return c.ready.Load() && !c.gone.Load() }

// Members returns the live members, sorted by name, this node included.
func (c *Cluster) Members() []Member { return c.d.members() }

// Self returns this node as a member. Its GRPCAddr is the advertised one and
// its GossipAddr is set once Start has returned.
func (c *Cluster) Self() Member {
	return *c.self.Load()
}

// GossipAddr returns the advertised gossip address ("ip:port") that other
// nodes can use as a seed; with BindPort 0, the port the OS chose. It is empty
// before Start.
func (c *Cluster) GossipAddr() string { return c.Self().GossipAddr }

// Leave tells the cluster that this node is leaving, so that the others
// drop it at once instead of detecting a failure, and count it as gone
// gracefully (not among their Failed members, not reconnected). It first
// marks its metadata as leaving and waits (at most half of timeout) for
// that update to go out, then sends memberlist's leave and waits at most
// the rest of timeout for it to reach another member. Call it before Close.
// The node keeps answering gossip until Close, and stops reconnecting.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.ml == nil:
		return ErrNotStarted
	}
	c.gone.Store(true)
	start := time.Now()
	c.d.setLeaving()
	if err := c.ml.UpdateNode(timeout / 2); err != nil {
		c.log.Warn("announcing the leave in the metadata timed out; the others may count it as a failure", "err", err)
	}
	if err := c.ml.Leave(max(timeout-time.Since(start), timeout/2)); err != nil {
		return fmt.Errorf("peer: leaving the cluster: %w", err)
	}
	return nil
}

// Close shuts the memberlist down (without a leave message: call Leave first
// for a graceful exit), stops the Cluster's goroutines and waits for them. It
// may wait for a join attempt in flight (at most the TCP timeout). It is safe
// to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.gone.Store(true)
	ml, cancel := c.ml, c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	var err error
	if ml != nil {
		err = ml.Shutdown()
	}
	c.wg.Wait()
	return err
}
