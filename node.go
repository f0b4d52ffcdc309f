package ringlimit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/peer"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rules"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Node is a running ringlimit node: the gRPC and HTTP servers, the gossip
// membership, the links to the other nodes and the coordination core, driven
// by a ticker. Start one with Start; stop it with Shutdown (graceful) or
// Close (abrupt). A Node is safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock Clock

	core *rlsync.Node
	drv  *peer.Driver // applies every input of core in one order
	// ring is the core's current ring, published by the driver's loop
	// (publishRing) for status, Owner and Members: the very ring the core
	// decides on, a minority side's baseline included.
	ring    atomic.Pointer[ring.Ring]
	tr      *peer.Transport
	cl      *peer.Cluster
	metrics *metrics
	api     *api.Server // the public check API, over decide
	gate    *gate       // calls in flight
	rules   *ruleSet
	bad     *badKeys // the front ends' requests with bad keys

	grpcSrv          *grpc.Server
	peerSrv          *grpc.Server // the peer service's own server
	httpSrv          *http.Server // nil when HTTP is disabled
	grpcLn, httpLn   net.Listener
	peerLn           net.Listener
	grpcAddr, httpAd string
	peerAddr         string          // where peers reach this node: PeerAddr's bound address
	tlsCfg           *tls.Config     // the public APIs' TLS, nil when off
	mtls             *peer.MutualTLS // the peers' identity, nil with InsecurePeers

	cancel   context.CancelFunc // ends the node's run context
	stopTick chan struct{}      // closed to stop the rules poller
	leaving  atomic.Bool        // Leave was called on the core
	handed   chan struct{}      // closed on the driver's loop once the core has handed off
	// handedClosed records that handed is closed; only the driver's loop
	// touches it.
	handedClosed bool
	// membersIn is closed once the first membership has reached the core
	// and the ring (firstMembers guards the close).
	membersIn    chan struct{}
	firstMembers sync.Once
	wg           sync.WaitGroup // every goroutine the node started
	// clockSt is the core's clock status, published by the driver's loop
	// (clock.go).
	clockSt atomic.Pointer[rlsync.ClockStatus]

	stopOnce sync.Once
	stopErr  error
}

// firstMembershipTimeout bounds Start's wait for gossip's first membership
// report, which comes at once (a local event, not a network one).
const firstMembershipTimeout = 5 * time.Second

// Start starts a node for cfg: it binds the gRPC, HTTP and gossip ports
// (port 0 picks a free one; see GRPCAddr, HTTPAddr, GossipAddr), starts
// serving, and joins the cluster through cfg.Seeds in the background (Ready
// reports when it has; WaitReady waits for it). It returns once the node
// knows a first membership (itself at least), so it answers checks from then
// on. With no seeds it is the first node of its cluster and owns every key;
// with seeds, until it has joined (or another member joined it), it decides
// every key by the request's partition policy, answers degraded, as a node
// cut off from its cluster does (docs/operations.md). ctx bounds the start
// only; the node runs until Shutdown or Close. On error nothing is left
// running.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n = &Node{
		cfg:       cfg,
		log:       cfg.Logger.With(slog.String("node", cfg.Name)),
		clock:     cfg.Clock,
		gate:      newGate(),
		cancel:    cancel,
		stopTick:  make(chan struct{}),
		handed:    make(chan struct{}),
		membersIn: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	if err := n.listen(); err != nil {
		return n, err
	}
	if err := n.build(); err != nil {
		return n, err
	}
	n.drv.Start(runCtx)
	n.serve()
	if err := n.tr.Start(runCtx, n.drv); err != nil {
		return n, fmt.Errorf("ringlimit: starting the peer transport: %w", err)
	}
	if err := n.cl.Start(runCtx); err != nil {
		return n, fmt.Errorf("ringlimit: starting gossip: %w", err)
	}
	// Gossip reports the first membership (this node, at least) at once;
	// until it reaches the core, a check would find no owner.
	first := time.NewTimer(firstMembershipTimeout)
	defer first.Stop()
	select {
	case <-n.membersIn:
	case <-first.C:
		return n, fmt.Errorf("ringlimit: no membership from gossip within %v", firstMembershipTimeout)
	}
	n.log.Info("node started", "grpc", n.grpcAddr, "http", n.httpAd, "peer", n.peerAddr, "gossip", n.cl.GossipAddr(),
		"seeds", cfg.Gossip.Seeds, "mode", cfg.Sync.Mode.String(), "policy", cfg.Sync.Policy.String(),
		"tls", cfg.API.TLS.Enabled(), "peer_auth", cfg.peerAuth(), "gossip_encrypted", len(cfg.Gossip.Key) > 0)
	n.warnExposure()
	return n, nil
}

// warnInsecurePeers is the warning of a node whose peers do not
// authenticate, logged at start and shown in /v1/cluster.
const warnInsecurePeers = "peers are not authenticated (Peer.Insecure): whoever reaches the peer port can move any limit"

// warnExposure logs a warning for each port bound beyond loopback without
// protection. docs/security.md says what to expose.
func (n *Node) warnExposure() {
	if !n.cfg.API.TLS.Enabled() {
		for _, a := range []string{n.grpcAddr, n.httpAd} {
			if a != "" && !isLoopback(a) {
				n.log.Warn("public API beyond loopback without TLS: expose it to the application tier only", "addr", a)
			}
		}
	}
	if n.mtls == nil {
		n.log.Warn(warnInsecurePeers, "addr", n.peerAddr)
	}
	if len(n.cfg.Gossip.Key) == 0 && !isLoopback(n.cfg.Gossip.Addr) {
		n.log.Warn("gossip beyond loopback without encryption: set a gossip key", "addr", n.cfg.Gossip.Addr)
	}
	if n.cfg.API.Pprof && n.httpAd != "" && !isLoopback(n.httpAd) {
		n.log.Warn("profiler served beyond loopback", "addr", n.httpAd)
	}
}

// withDefaults fills in the fields whose default is computed.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return c, configErr("Name", "empty and the host name is unknown: %v", err)
		}
		c.Name = h
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Sync.Incarnation == 0 {
		c.Sync.Incarnation = uint64(c.Clock.Now().UnixNano())
	}
	return c, nil
}

// listen binds the gRPC, peer and HTTP ports.
func (n *Node) listen() error {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", n.cfg.API.GRPCAddr)
	if err != nil {
		return fmt.Errorf("ringlimit: gRPC listener: %w", err)
	}
	n.grpcLn, n.grpcAddr = ln, ln.Addr().String()
	peerAddr := n.cfg.Peer.Addr
	if peerAddr == "" {
		host, _, _ := net.SplitHostPort(n.cfg.API.GRPCAddr)
		peerAddr = net.JoinHostPort(host, "0")
	}
	ln, err = lc.Listen(context.Background(), "tcp", peerAddr)
	if err != nil {
		return fmt.Errorf("ringlimit: peer listener: %w", err)
	}
	n.peerLn, n.peerAddr = ln, ln.Addr().String()
	if n.cfg.API.HTTPAddr == "" {
		return nil
	}
	ln, err = lc.Listen(context.Background(), "tcp", n.cfg.API.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ringlimit: HTTP listener: %w", err)
	}
	n.httpLn, n.httpAd = ln, ln.Addr().String()
	return nil
}

// build creates the core, the ring, the transport, the cluster, the metrics,
// the rules and the servers. It starts nothing but the rules file's poller
// (see buildRules), which teardown stops.
func (n *Node) build() error {
	cfg := n.cfg
	var err error
	if n.tlsCfg, err = cfg.API.TLS.serverTLS(); err != nil {
		return err
	}
	if n.mtls, err = cfg.mutualTLS(n.clock.Now()); err != nil {
		return err
	}
	n.tr, err = peer.NewTransport(n.transportConfig())
	if err != nil {
		return fmt.Errorf("ringlimit: peer transport: %w", err)
	}
	if n.core, err = rlsync.NewNode(cfg.syncConfig(), n.tr); err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	n.drv, err = peer.NewDriver(n.core, peer.DriverConfig{
		Clock: n.clock, TickInterval: cfg.Sync.TickInterval, AfterTick: n.afterTick})
	if err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	empty, err := ring.New(cfg.Sync.Ring)
	if err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	n.ring.Store(empty)
	if n.cl, err = peer.NewCluster(n.clusterConfig(), n.onMembers); err != nil {
		return fmt.Errorf("ringlimit: gossip: %w", err)
	}
	n.metrics, err = newMetrics(cfg.Registry, n.core.Metrics(),
		func() float64 { return float64(len(n.cl.Members())) },
		func() float64 { return float64(n.ring.Load().Version()) })
	if err != nil {
		return fmt.Errorf("ringlimit: registering metrics: %w", err)
	}
	if err := registerDriver(cfg.Registry, n.drv); err != nil {
		return fmt.Errorf("ringlimit: registering metrics: %w", err)
	}
	if n.bad, err = newBadKeys(cfg.Registry, n.log, n.clock); err != nil {
		return fmt.Errorf("ringlimit: registering metrics: %w", err)
	}
	if err := n.buildRules(); err != nil {
		return err
	}
	ac := cfg.apiConfig()
	ac.Rules = func() (*rules.Set, bool) { return n.rules.Rules(), n.rules.store != nil }
	n.api, err = api.New(ac, decider{n}, n.metrics)
	if err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	opts := n.grpcOptions()
	if n.tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tlsCfg.Clone())))
	}
	n.grpcSrv = grpc.NewServer(opts...)
	if err := n.registerGRPC(n.grpcSrv); err != nil {
		return err
	}
	opts = n.grpcOptions()
	if n.mtls != nil {
		opts = append(opts, grpc.Creds(n.mtls.ServerCredentials()))
	}
	n.peerSrv = grpc.NewServer(opts...)
	n.tr.RegisterServer(n.peerSrv)
	if n.httpLn != nil {
		n.httpSrv = &http.Server{
			Handler:           n.handler(),
			ReadHeaderTimeout: cfg.API.ReadHeaderTimeout,
			ReadTimeout:       cfg.API.ReadTimeout,
			WriteTimeout:      cfg.API.WriteTimeout,
			IdleTimeout:       cfg.API.IdleTimeout,
			MaxHeaderBytes:    cfg.API.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
		}
		if n.tlsCfg != nil {
			n.httpSrv.TLSConfig = n.tlsCfg.Clone()
		}
	}
	return nil
}

// registerGRPC registers the public services on the public gRPC server:
// RateLimiter and Envoy's RateLimitService v3. The peer service is
// registered by build on the peer port's server, never here.
func (n *Node) registerGRPC(s *grpc.Server) error {
	n.api.Register(s)
	return n.registerEnvoy(s)
}

// The gRPC servers' keepalive policy. A client may ping at most every
// keepaliveMinTime, even with no call open (more often and the server closes
// the connection: a ping flood costs the server); the server pings a client
// silent for keepaliveTime and drops it if no answer comes within
// keepaliveTimeout, which frees the connections of vanished clients.
const (
	keepaliveMinTime = 10 * time.Second
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// grpcWindow is the gRPC servers' flow-control window, per stream and per
// connection, in bytes. Setting it turns off gRPC's bandwidth-delay
// estimator, which otherwise answers every data frame received while no
// estimate is pending with a ping: two more frames, a write and a wake-up
// each side, per call of a client that calls less often than it gets
// answers (c=1; docs/bench.md "The gRPC windows"). 4 MiB holds the largest
// message by default (MaxRecvMsgBytes) and is below the 16 MiB the
// estimator may grow a window to.
const grpcWindow = 4 << 20

// grpcOptions are the gRPC servers' limits and timeouts.
func (n *Node) grpcOptions() []grpc.ServerOption {
	c := n.cfg
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(api.Codec()),
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(grpcWindow),
		grpc.MaxRecvMsgSize(c.API.MaxRecvMsgBytes),
		grpc.NumStreamWorkers(64),
		grpc.MaxConcurrentStreams(c.API.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(uint32(min(int64(c.API.MaxHeaderBytes), math.MaxUint32))),
		grpc.ConnectionTimeout(c.API.ReadHeaderTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     c.API.IdleTimeout,
			MaxConnectionAge:      c.API.MaxConnectionAge,
			MaxConnectionAgeGrace: c.API.CheckTimeout,
			Time:                  keepaliveTime,
			Timeout:               keepaliveTimeout,
		}),
	}
}

// serve starts the servers (the core's driver, which ticks it, is started
// by Start).
func (n *Node) serve() {
	n.wg.Go(func() {
		if err := n.grpcSrv.Serve(n.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("gRPC server failed", "err", err)
		}
	})
	n.wg.Go(func() {
		if err := n.peerSrv.Serve(n.peerLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("peer gRPC server failed", "err", err)
		}
	})
	if n.httpSrv != nil {
		n.wg.Go(func() {
			var err error
			if n.httpSrv.TLSConfig != nil {
				err = n.httpSrv.ServeTLS(n.httpLn, "", "")
			} else {
				err = n.httpSrv.Serve(n.httpLn)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("HTTP server failed", "err", err)
			}
		})
	}
}

// publishRing publishes the core's current ring, on the driver's loop, after
// an input that may have changed it.
func (n *Node) publishRing() {
	if r := n.core.Ring(); r != nil && r != n.ring.Load() {
		n.ring.Store(r)
	}
}

// afterTick runs on the driver's loop after each Tick of the core (which
// may change the ring: failed members expire): it publishes the ring, and
// closes handed once a Leave has handed every key off.
func (n *Node) afterTick(time.Time) {
	n.publishRing()
	n.watchClock()
	if !n.handedClosed && n.leaving.Load() && n.core.HandedOff() {
		n.handedClosed = true
		close(n.handed)
	}
}

// onMembers is the cluster's membership callback: peers' addresses first,
// then the core's and the status ring's membership.
//
// The core is told which departed members failed (crash, partition) rather
// than left: it keeps them in its quorum baseline, so that a node cut off
// from most of the cluster decides their keys by the partition policy
// instead of taking them over (sync/quorum.go). The status ring holds the
// live members.
//
// Until the node is in a cluster (it has seeds and none answered yet), the
// core gets a stand-in for each seed (standIns), so that it decides every
// key by the partition policy instead of owning every key as a cluster of
// one. The stand-ins change together with the membership (SetExpected
// takes effect with SetMembership): no check sees a cluster of one.
func (n *Node) onMembers(ms []peer.Member) {
	defer n.firstMembers.Do(func() { close(n.membersIn) })
	n.tr.SetPeers(ms)
	names := peer.Names(ms)
	failed := n.cl.Failed()
	standIns := n.standIns()
	var q rlsync.Quorum
	err := n.drv.Do(context.Background(), func(now time.Time) {
		// One input: the stand-ins and the membership change together.
		n.core.SetExpected(standIns)
		n.core.SetMembership(now, names, failed)
		q = n.core.Quorum()
		n.publishRing()
	})
	if err != nil {
		n.log.Debug("membership change after the core stopped", "members", names)
		return
	}
	if len(standIns) > 0 {
		n.log.Warn("not in a cluster yet: every key goes by the partition policy, degraded, until a seed answers",
			"members", names, "seeds", n.cfg.Gossip.Seeds)
		return
	}
	if q.Minority {
		n.log.Warn("membership changed: minority side, the lost members' keys go by the partition policy",
			"members", names, "lost", q.Lost, "baseline", q.Baseline)
		return
	}
	n.log.Info("membership changed", "members", names, "failed", failed)
}

// standIns returns the core's stand-ins for the members a node that is not
// in a cluster yet expects: one per seed other than its own address ("seed
// host:port"; the core ignores a stand-in that is a live member's name), or
// none once it has been in a cluster (even if it is leaving now).
func (n *Node) standIns() []string {
	select {
	case <-n.cl.Joined():
		return nil
	default:
	}
	var out []string
	for _, s := range n.cfg.Gossip.Seeds {
		if s != "" && s != n.cl.GossipAddr() {
			out = append(out, "seed "+s)
		}
	}
	return out
}

// ErrStopped is returned by WaitReady when the node stops first.
var ErrStopped = errors.New("ringlimit: node stopped")

// ErrNameTaken is wrapped by WaitReady's error when the cluster refused
// this node because a live member has its name: the node will not join (it
// goes on deciding by the partition policy); stop it and give it another
// name.
var ErrNameTaken = peer.ErrNameTaken

// WaitReady waits until the node is in its cluster, and returns nil then:
// it joined through a seed, another member joined it, or it has no seeds
// (Ready). It returns an error wrapping ErrNameTaken if the cluster refused
// the node for good, ErrStopped if the node stops first, or ctx's error.
// Start returns before the node has joined; until then it decides every key
// by the partition policy, degraded.
func (n *Node) WaitReady(ctx context.Context) error {
	select {
	case <-n.cl.Joined():
		return nil
	case <-n.cl.Refused():
		return fmt.Errorf("ringlimit: not joining: %w", n.cl.Err())
	case <-n.stopTick:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GRPCAddr returns the address the gRPC server is bound to.
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// PeerAddr returns the bound address where the other nodes reach this one
// (Config.Peer.Addr's).
func (n *Node) PeerAddr() string { return n.peerAddr }

// HTTPAddr returns the address the HTTP server is bound to, or "" when HTTP
// is disabled.
func (n *Node) HTTPAddr() string { return n.httpAd }

// GossipAddr returns the gossip address other nodes can use as a seed.
func (n *Node) GossipAddr() string { return n.cl.GossipAddr() }

// KeyBytes returns the memory charged for the keys the node stores and the
// backups it holds for other owners, in bytes (Config.Sync.MaxKeyBytes
// bounds it; the metric ringlimit_key_bytes). Safe for concurrent use.
func (n *Node) KeyBytes() int64 { return n.core.Metrics().KeyBytes.Load() }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Ready reports whether the node has joined the cluster (or started one, with
// no seeds) and is not shutting down.
func (n *Node) Ready() bool { return n.notReady() == "" }

// notReady returns why the node is not ready, or "".
func (n *Node) notReady() string {
	select {
	case <-n.membersIn:
	default:
		return "no membership yet"
	}
	switch {
	case n.leaving.Load() || n.gate.isClosed():
		return "shutting down"
	case !n.cl.Ready():
		return "not joined yet"
	}
	return n.clockNotReady()
}

// Owner returns the node that owns the bucket of (name, uniqueKey) in this
// node's current ring.
func (n *Node) Owner(name, uniqueKey string) (string, error) {
	return n.ring.Load().Owner(api.Key(name, uniqueKey))
}

// Members returns the names of the live members this node's ring holds,
// sorted: on a minority side (or before joining) the ring also holds the
// lost members (or the seeds' stand-ins), which are left out.
func (n *Node) Members() []string {
	live := map[string]bool{}
	for _, m := range n.cl.Members() {
		live[m.Name] = true
	}
	return slices.DeleteFunc(n.ring.Load().Members(), func(name string) bool { return !live[name] })
}
