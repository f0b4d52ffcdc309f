package ringlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/peer"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/ring"
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

	core    *rlsync.Node
	ring    *ring.Holder // the same ring as the core's, for status and Owner
	tr      *peer.Transport
	cl      *peer.Cluster
	metrics *metrics
	gate    *gate // public calls in flight

	grpcSrv          *grpc.Server
	httpSrv          *http.Server // nil when HTTP is disabled
	grpcLn, httpLn   net.Listener
	grpcAddr, httpAd string

	cancel   context.CancelFunc // ends the node's run context
	stopTick chan struct{}      // closed to stop the tick loop
	leaving  atomic.Bool        // Leave was called on the core
	handed   chan struct{}      // closed by the tick loop once the core has handed off
	wg       sync.WaitGroup     // every goroutine the node started

	stopOnce sync.Once
	stopErr  error
}

// Start starts a node for cfg: it binds the gRPC, HTTP and gossip ports
// (port 0 picks a free one; see GRPCAddr, HTTPAddr, GossipAddr), starts
// serving, and joins the cluster through cfg.Seeds in the background (Ready
// reports when it has). ctx bounds the start only; the node runs until
// Shutdown or Close. On error nothing is left running.
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
		cfg:      cfg,
		log:      cfg.Logger.With(slog.String("node", cfg.Name)),
		clock:    cfg.Clock,
		gate:     newGate(),
		cancel:   cancel,
		stopTick: make(chan struct{}),
		handed:   make(chan struct{}),
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
	n.serve()
	if err := n.tr.Start(runCtx, n.core); err != nil {
		return n, fmt.Errorf("ringlimit: starting the peer transport: %w", err)
	}
	if err := n.cl.Start(runCtx); err != nil {
		return n, fmt.Errorf("ringlimit: starting gossip: %w", err)
	}
	n.log.Info("node started", "grpc", n.grpcAddr, "http", n.httpAd, "gossip", n.cl.GossipAddr(),
		"seeds", cfg.Seeds, "mode", cfg.Sync.Mode.String(), "policy", cfg.Sync.Policy.String())
	return n, nil
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

// listen binds the gRPC and HTTP ports.
func (n *Node) listen() error {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", n.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("ringlimit: gRPC listener: %w", err)
	}
	n.grpcLn, n.grpcAddr = ln, ln.Addr().String()
	if n.cfg.HTTPAddr == "" {
		return nil
	}
	ln, err = lc.Listen(context.Background(), "tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ringlimit: HTTP listener: %w", err)
	}
	n.httpLn, n.httpAd = ln, ln.Addr().String()
	return nil
}

// build creates the core, the ring, the transport, the cluster, the metrics
// and the servers. It starts nothing.
func (n *Node) build() error {
	cfg := n.cfg
	var err error
	n.tr, err = peer.NewTransport(n.transportConfig())
	if err != nil {
		return fmt.Errorf("ringlimit: peer transport: %w", err)
	}
	if n.core, err = rlsync.NewNode(cfg.syncConfig(), n.tr); err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	if n.ring, err = ring.NewHolder(cfg.Sync.Ring); err != nil {
		return fmt.Errorf("ringlimit: %w", err)
	}
	if n.cl, err = peer.NewCluster(n.clusterConfig(), n.onMembers); err != nil {
		return fmt.Errorf("ringlimit: gossip: %w", err)
	}
	n.metrics, err = newMetrics(cfg.Registry, n.core.Metrics(),
		func() float64 { return float64(len(n.cl.Members())) },
		func() float64 { return float64(n.ring.Version()) })
	if err != nil {
		return fmt.Errorf("ringlimit: registering metrics: %w", err)
	}
	n.grpcSrv = grpc.NewServer(n.grpcOptions()...)
	n.registerGRPC(n.grpcSrv)
	if n.httpLn != nil {
		n.httpSrv = &http.Server{
			Handler:           n.handler(),
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
		}
	}
	return nil
}

// registerGRPC registers every service the node serves on its one gRPC port.
func (n *Node) registerGRPC(s *grpc.Server) {
	ringlimitv1.RegisterRateLimiterServer(s, grpcAPI{n: n})
	n.tr.RegisterServer(s)
}

// grpcOptions are the gRPC server's limits and timeouts.
func (n *Node) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(n.cfg.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(n.cfg.MaxConcurrentStreams),
		grpc.ConnectionTimeout(n.cfg.ReadHeaderTimeout),
	}
}

// serve starts the servers and the tick loop.
func (n *Node) serve() {
	n.wg.Go(func() {
		if err := n.grpcSrv.Serve(n.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("gRPC server failed", "err", err)
		}
	})
	if n.httpSrv != nil {
		n.wg.Go(func() {
			if err := n.httpSrv.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("HTTP server failed", "err", err)
			}
		})
	}
	n.wg.Go(n.tickLoop)
}

// tickLoop calls the core's Tick every Sync.TickInterval until stopTick is
// closed, and closes handed once a Leave has handed every key off.
func (n *Node) tickLoop() {
	t := time.NewTicker(n.cfg.Sync.TickInterval)
	defer t.Stop()
	handed := false
	for {
		select {
		case <-n.stopTick:
			return
		case <-t.C:
		}
		n.core.Tick(n.clock.Now())
		if !handed && n.leaving.Load() && n.core.HandedOff() {
			handed = true
			close(n.handed)
		}
	}
}

// onMembers is the cluster's membership callback: peers' addresses first,
// then the core's and the status ring's membership.
func (n *Node) onMembers(ms []peer.Member) {
	n.tr.SetPeers(ms)
	names := peer.Names(ms)
	n.core.SetMembers(n.clock.Now(), names)
	if _, err := n.ring.SetMembers(names); err != nil {
		n.log.Error("ring update failed", "members", names, "err", err)
		return
	}
	n.log.Info("membership changed", "members", names)
}

// GRPCAddr returns the address the gRPC server is bound to.
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// HTTPAddr returns the address the HTTP server is bound to, or "" when HTTP
// is disabled.
func (n *Node) HTTPAddr() string { return n.httpAd }

// GossipAddr returns the gossip address other nodes can use as a seed.
func (n *Node) GossipAddr() string { return n.cl.GossipAddr() }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Ready reports whether the node has joined the cluster (or started one, with
// no seeds) and is not shutting down.
func (n *Node) Ready() bool { return n.notReady() == "" }

// notReady returns why the node is not ready, or "".
func (n *Node) notReady() string {
	switch {
	case n.leaving.Load() || n.gate.isClosed():
		return "shutting down"
	case !n.cl.Ready():
		return "not joined yet"
	}
	return ""
}

// Owner returns the node that owns the bucket of (name, uniqueKey) in this
// node's current ring.
func (n *Node) Owner(name, uniqueKey string) (string, error) {
	return n.ring.Owner(Key(name, uniqueKey))
}

// Members returns the names of the live members this node's ring holds,
// sorted.
func (n *Node) Members() []string { return n.ring.Load().Members() }
