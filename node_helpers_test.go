package ringlimit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testPeerSecret is the test clusters' shared secret.
var testPeerSecret = []byte("ringlimit test cluster secret, 32")

// testConfig is a node on loopback with OS-chosen ports and fast gossip.
func testConfig(name string, seeds ...string) Config {
	c := DefaultConfig()
	c.Name = name
	c.API.GRPCAddr = "127.0.0.1:0"
	c.API.HTTPAddr = "127.0.0.1:0"
	c.Gossip.Addr = "127.0.0.1:0"
	c.Gossip.Profile = GossipLocal
	c.Peer.Secret = testPeerSecret
	c.Gossip.Seeds = seeds
	c.Shutdown.HandoffTimeout = 2 * time.Second
	c.Shutdown.LeaveTimeout = time.Second
	if testing.Verbose() {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return c
}

// startNode starts a node and stops it (gracefully) when the test ends,
// unless the test stopped it already.
func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// startCluster starts size nodes named n1.., the first one the seed, and
// waits until every node sees all of them.
func startCluster(t *testing.T, size int, edit func(*Config)) []*Node {
	t.Helper()
	var nodes []*Node
	for i := range size {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].GossipAddr()}
		}
		cfg := testConfig(fmt.Sprintf("n%d", i+1), seeds...)
		if edit != nil {
			edit(&cfg)
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	waitMembers(t, nodes, names(nodes))
	return nodes
}

func names(nodes []*Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name())
	}
	slices.Sort(out)
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	waitForf(t, within, func() string { return what }, cond)
}

// waitForf is waitFor with a description computed on failure.
func waitForf(t *testing.T, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMembers waits until every node's ring holds exactly want and it is
// ready: for up to 10s, and 2s more per node (gossip spreads a join in
// rounds; 30 nodes on a loaded 2-core machine took over 10s).
func waitMembers(t *testing.T, nodes []*Node, want []string) {
	t.Helper()
	var views []string
	what := func() string { return fmt.Sprintf("every node's ring is %q; the rings: %q", want, views) }
	waitForf(t, 10*time.Second+time.Duration(len(nodes))*2*time.Second, what, func() bool {
		views = views[:0]
		ok := true
		for _, n := range nodes {
			views = append(views, fmt.Sprintf("%s ready=%v %v", n.Name(), n.Ready(), n.Members()))
			if !n.Ready() || !slices.Equal(n.Members(), want) {
				ok = false
			}
		}
		return ok
	})
}

// dial returns a RateLimiter client for n, closed when the test ends.
func dial(t *testing.T, n *Node) ringlimitv1.RateLimiterClient {
	t.Helper()
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ringlimitv1.NewRateLimiterClient(cc)
}
