package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// watcher records what a Cluster's onChange reports.
type watcher struct {
	mu    sync.Mutex
	last  []Member
	calls int
}

func (w *watcher) onChange(ms []Member) {
	w.mu.Lock()
	w.last, w.calls = ms, w.calls+1
	w.mu.Unlock()
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

func (w *watcher) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Names(w.last)
}

// testNode is a Cluster on loopback with its watcher.
type testNode struct {
	*Cluster
	w *watcher
}

// grpcAddrOf is the (fake) gRPC address the test gives node name.
func grpcAddrOf(name string) string { return "127.0.0.1:" + strconv.Itoa(7000+int(name[0])) }

// startNode starts a Cluster named name with the local profile on an
// OS-chosen port, joining seeds; it is closed when the test ends.
func startNode(t *testing.T, name string, edit func(*ClusterConfig), seeds ...string) *testNode {
	t.Helper()
	cfg := LocalClusterConfig()
	cfg.Name = name
	cfg.GRPCAddr = grpcAddrOf(name)
	cfg.Seeds = seeds
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, logs.String())
		}
	})
	if edit != nil {
		edit(&cfg)
	}
	w := &watcher{}
	c, err := NewCluster(cfg, w.onChange)
	if err != nil {
		t.Fatalf("NewCluster(%s): %v", name, err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &testNode{Cluster: c, w: w}
}

// agree reports whether every node's last onChange and Members list exactly
// want.
func agree(nodes []*testNode, want ...string) func() bool {
	return func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.w.names(), want) || !slices.Equal(Names(n.Members()), want) {
				return false
			}
		}
		return true
	}
}

func describe(nodes []*testNode) func() string {
	return func() string {
		s := ""
		for _, n := range nodes {
			s += fmt.Sprintf(" %s sees %v (memberlist %v);", n.cfg.Name, n.w.names(), Names(n.Members()))
		}
		return s
	}
}

// TestClusterLifecycle walks one cluster through joins, a graceful leave and
// a crash, with real memberlist on loopback.
func TestClusterLifecycle(t *testing.T) {
	a := startNode(t, "a", func(c *ClusterConfig) { c.GRPCAddr = ":7097" }) // host filled in from the gossip IP
	b := startNode(t, "b", nil, a.GossipAddr())
	c := startNode(t, "c", nil, a.GossipAddr())
	abc := []*testNode{a, b, c}

	waitFor(t, 10*time.Second, "a, b and c agree on [a b c]", agree(abc, "a", "b", "c"), describe(abc))
	for _, n := range abc {
		if !n.Ready() {
			t.Errorf("%s: Ready() = false after joining", n.cfg.Name)
		}
	}
	got := b.Members()
	want := []Member{
		{Name: "a", GRPCAddr: "127.0.0.1:7097", Protocol: ProtocolVersion, GossipAddr: a.GossipAddr()},
		{Name: "b", GRPCAddr: grpcAddrOf("b"), Protocol: ProtocolVersion, GossipAddr: b.GossipAddr()},
		{Name: "c", GRPCAddr: grpcAddrOf("c"), Protocol: ProtocolVersion, GossipAddr: c.GossipAddr()},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("b.Members() = %+v, want %+v", got, want)
	}
	if self := a.Self(); self != want[0] {
		t.Errorf("a.Self() = %+v, want %+v", self, want[0])
	}

	d := startNode(t, "d", nil, c.GossipAddr())
	abcd := []*testNode{a, b, c, d}
	waitFor(t, 10*time.Second, "all four agree on [a b c d]", agree(abcd, "a", "b", "c", "d"), describe(abcd))

	if err := c.Leave(time.Second); err != nil {
		t.Fatalf("c.Leave: %v", err)
	}
	if c.Ready() {
		t.Errorf("c: Ready() = true after Leave")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("c.Close: %v", err)
	}
	abd := []*testNode{a, b, d}
	waitFor(t, 5*time.Second, "a, b and d drop c after its leave", agree(abd, "a", "b", "d"), describe(abd))

	// A crash: no leave message; the others must detect the failure.
	crashed := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("b.Close: %v", err)
	}
	ad := []*testNode{a, d}
	waitFor(t, 10*time.Second, "a and d detect b's failure", agree(ad, "a", "d"), describe(ad))
	t.Logf("crash of b detected by a and d in %v (local profile)", time.Since(crashed).Round(time.Millisecond))
}

// TestClusterJoinRetries starts a node whose seed is not up yet: it keeps
// retrying and joins once the seed starts.
func TestClusterJoinRetries(t *testing.T) {
	port := freePort(t)
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	b := startNode(t, "b", func(c *ClusterConfig) { c.JoinBackoffMax = 50 * time.Millisecond }, seed)
	if b.Ready() {
		t.Fatalf("b: Ready() = true before any seed answered")
	}
	if got := b.w.names(); len(got) > 1 {
		t.Fatalf("b sees %v before joining", got)
	}
	a := startNode(t, "a", func(c *ClusterConfig) { c.BindPort = port })
	waitFor(t, 10*time.Second, "b joins a once a is up", agree([]*testNode{a, b}, "a", "b"))
	if !b.Ready() {
		t.Errorf("b: Ready() = false after joining")
	}
}

// TestClusterEncrypted forms a cluster whose gossip is encrypted.
func TestClusterEncrypted(t *testing.T) {
	key := []byte("0123456789abcdef")
	withKey := func(c *ClusterConfig) { c.SecretKey = key }
	a := startNode(t, "a", withKey)
	b := startNode(t, "b", withKey, a.GossipAddr())
	waitFor(t, 10*time.Second, "a and b agree over encrypted gossip", agree([]*testNode{a, b}, "a", "b"))
}

// TestClusterSelfSeed: a node whose only seed is itself starts a cluster of
// one at once.
func TestClusterSelfSeed(t *testing.T) {
	port := freePort(t)
	self := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	a := startNode(t, "a", func(c *ClusterConfig) { c.BindPort = port }, self)
	if !a.Ready() {
		t.Errorf("Ready() = false for a node seeded with itself")
	}
	waitFor(t, 5*time.Second, "a sees itself", agree([]*testNode{a}, "a"))
}

func TestClusterCallOrder(t *testing.T) {
	cfg := LocalClusterConfig()
	cfg.Name, cfg.GRPCAddr = "a", "127.0.0.1:1"
	c, err := NewCluster(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Leave before Start = %v, want ErrNotStarted", err)
	}
	if got := c.GossipAddr(); got != "" {
		t.Errorf("GossipAddr before Start = %q, want empty", got)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want ErrAlreadyStarted", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Close = %v, want ErrClosed", err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	if c.Ready() {
		t.Errorf("Ready() after Close = true")
	}
}

func TestClusterPortTaken(t *testing.T) {
	a := startNode(t, "a", nil)
	_, port, _ := net.SplitHostPort(a.GossipAddr())
	cfg := LocalClusterConfig()
	cfg.Name, cfg.GRPCAddr = "b", "127.0.0.1:1"
	cfg.BindPort, _ = strconv.Atoi(port)
	c, err := NewCluster(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err == nil {
		t.Errorf("Start on a taken port succeeded")
	}
}

// freePort returns a loopback port that was free a moment ago (for TCP and
// UDP both, as memberlist needs).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestClusterFailureDetection measures, for each profile on loopback, the
// time from a member's crash to the survivors' dropping it. The budget the
// profiles are tuned for is 2s (a crashed node's keys answered again); the
// assertion allows more, for a loaded test machine, and the log reports it.
func TestClusterFailureDetection(t *testing.T) {
	for _, profile := range []string{ProfileLAN, ProfileLocal} {
		t.Run(profile, func(t *testing.T) {
			p := func(c *ClusterConfig) { c.Profile = profile }
			a := startNode(t, "a", p)
			b := startNode(t, "b", p, a.GossipAddr())
			c := startNode(t, "c", p, a.GossipAddr())
			waitFor(t, 10*time.Second, "a, b and c agree", agree([]*testNode{a, b, c}, "a", "b", "c"), describe([]*testNode{a, b, c}))
			crashed := time.Now()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "a and b detect c's crash", agree([]*testNode{a, b}, "a", "b"), describe([]*testNode{a, b}))
			t.Logf("%s profile: crash detected by both survivors in %v", profile, time.Since(crashed).Round(time.Millisecond))
		})
	}
}
