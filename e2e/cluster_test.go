//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// The node's ports inside every container (the image's defaults).
const (
	grpcPort   = 7101
	httpPort   = 8101
	gossipPort = 7946
)

// clusterSpec describes a cluster to start.
type clusterSpec struct {
	// nodes is the number of nodes, named n1, n2, ...
	nodes int
	// homes gives each node's home network, 0, 1, ...: the network its peers
	// reach it on. Nodes that a cut separates must have different homes. Nil
	// puts every node on home 0.
	homes []int
	// flags are added to every node's command line.
	flags []string
	// clockOffset gives nodes, by index, a clock that far from the host's
	// (the node's test hook RINGLIMIT_TEST_CLOCK_OFFSET). Such a node may
	// be not ready for its clock: waitMembers does not wait for its
	// readiness.
	clockOffset map[int]time.Duration
	// create are options of docker create added for every node (a memory
	// limit, environment variables).
	create []string
}

// cluster is a set of node containers on networks of its own. Its methods
// fail the test on error; they are called from the test goroutine only.
type cluster struct {
	t      *testing.T
	id     string // random; in every container and network name
	client *network
	homes  []*network
	nodes  []*node
	// networks names every network created, for teardown.
	networks []string
	// skewed marks the nodes given a clock offset (clusterSpec.clockOffset).
	skewed map[int]bool
}

// network is a Docker network the cluster created.
type network struct {
	name   string
	prefix netip.Prefix
}

// node is one node container and the test's clients of it.
type node struct {
	i         int    // index in cluster.nodes
	name      string // the node's name: n1, n2, ...
	container string
	home      int
	clientIP  netip.Addr
	attached  []bool // by home network: connected now
	conn      *grpc.ClientConn
	api       ringlimitv1.RateLimiterClient
}

// startCluster creates the networks and the containers of spec, starts them
// and waits until every node sees every other. Everything it creates is
// removed when the test ends, passed or failed.
func startCluster(t *testing.T, spec clusterSpec) *cluster {
	t.Helper()
	c := &cluster{t: t, id: randomHex(3), skewed: map[int]bool{}}
	// The cluster's gossip key, fresh for the run: it encrypts gossip and
	// the nodes authenticate each other on the peer port with a CA derived
	// from it, as deployed (docs/security.md).
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand panics instead)
	gossipKey := base64.StdEncoding.EncodeToString(key)
	t.Cleanup(c.teardown)
	ctx := context.Background()
	nhomes := 1
	if spec.homes == nil {
		spec.homes = make([]int, spec.nodes)
	}
	for _, h := range spec.homes {
		nhomes = max(nhomes, h+1)
	}
	c.client = c.createNetwork(ctx, "client")
	for h := range nhomes {
		c.homes = append(c.homes, c.createNetwork(ctx, "h"+strconv.Itoa(h)))
	}
	var seeds []string
	for i := range spec.nodes {
		seeds = append(seeds, netip.AddrPortFrom(c.ipOn(c.homes[spec.homes[i]], i), gossipPort).String())
	}
	for i := range spec.nodes {
		n := &node{i: i, name: "n" + strconv.Itoa(i+1), home: spec.homes[i],
			clientIP: c.ipOn(c.client, i), attached: make([]bool, nhomes)}
		n.container = fmt.Sprintf("rle2e-%s-%s", c.id, n.name)
		args := []string{"create", "--name", n.container, "--hostname", n.name,
			"--label", runLabel + "=" + runID, "-e", "RINGLIMIT_GOSSIP_KEY=" + gossipKey}
		if d, ok := spec.clockOffset[i]; ok {
			args = append(args, "-e", "RINGLIMIT_TEST_CLOCK_OFFSET="+d.String())
			c.skewed[i] = true
		}
		args = append(args, spec.create...)
		args = append(args, "--network", c.client.name, "--ip", n.clientIP.String(), imageID,
			"--name", n.name,
			"--gossip-advertise-addr", netip.AddrPortFrom(c.ipOn(c.homes[n.home], i), gossipPort).String(),
			"--seeds", strings.Join(seeds, ","), "--gossip-profile", "lan")
		args = append(args, spec.flags...)
		c.must(docker(ctx, args...))
		c.nodes = append(c.nodes, n)
		for h, hn := range c.homes {
			c.must(docker(ctx, "network", "connect", "--ip", c.ipOn(hn, i).String(), hn.name, n.container))
			n.attached[h] = true
		}
		conn, err := grpc.NewClient(netip.AddrPortFrom(n.clientIP, grpcPort).String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			t.Fatalf("gRPC client of %s: %v", n.name, err)
		}
		n.conn, n.api = conn, ringlimitv1.NewRateLimiterClient(conn)
	}
	start := time.Now()
	c.must(docker(ctx, append([]string{"start"}, c.containers()...)...))
	if _, err := c.waitMembers(c.all(), c.names(c.all()), 60*time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v", err)
	}
	t.Logf("cluster %s: %d nodes up and converged in %v (networks: client %s, homes %v)",
		c.id, spec.nodes, time.Since(start).Round(time.Millisecond), c.client.prefix, c.homePrefixes())
	return c
}

// createNetwork creates an --internal network on a random 10.x.y.0/24 that
// overlaps no host interface (and, Docker checks, no other network).
func (c *cluster) createNetwork(ctx context.Context, suffix string) *network {
	c.t.Helper()
	name := fmt.Sprintf("rle2e-%s-%s", c.id, suffix)
	for range 50 {
		b := []byte(randomHex(2))
		a, _ := strconv.ParseUint(string(b), 16, 32)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + (a>>8)%100), byte(a), 0}), 24)
		if overlapsHost(p) {
			continue
		}
		_, err := docker(ctx, "network", "create", "--internal", "--subnet", p.String(),
			"--label", runLabel+"="+runID, name)
		if overlaps(err) {
			continue
		}
		if err != nil {
			c.t.Fatal(err)
		}
		c.networks = append(c.networks, name)
		return &network{name: name, prefix: p}
	}
	c.t.Fatalf("no free subnet for network %s", name)
	return nil
}

// overlapsHost reports whether p overlaps the network of an address of the
// host.
func overlapsHost(p netip.Prefix) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			q, err := netip.ParsePrefix(ipn.String())
			if err == nil && q.Masked().Overlaps(p) {
				return true
			}
		}
	}
	return false
}

// ipOn returns node i's address on nw.
func (c *cluster) ipOn(nw *network, i int) netip.Addr {
	a := nw.prefix.Addr().As4()
	a[3] = byte(10 + i)
	return netip.AddrFrom4(a)
}

// teardown removes the cluster's containers and networks; on failure it
// first logs the end of each node's log.
func (c *cluster) teardown() {
	ctx := context.Background()
	for _, n := range c.nodes {
		if c.t.Failed() {
			out := dockerLogs(ctx, n.container, 40)
			c.t.Logf("---- last lines of %s's log:\n%s", n.name, out)
		}
		if n.conn != nil {
			n.conn.Close()
		}
	}
	if cs := c.containers(); len(cs) > 0 {
		if _, err := docker(ctx, append([]string{"rm", "-f"}, cs...)...); err != nil {
			c.t.Errorf("removing containers: %v", err)
		}
	}
	if len(c.networks) > 0 {
		// Docker can report a network as having active endpoints after
		// its containers were removed: for a moment (seen once on Docker
		// 20.10 after TestSplit), or for longer than 5 s when an endpoint
		// went stale across the test's disconnects and reconnects (seen
		// after TestSplit on 2026-11-27, the network removed only by the
		// final sweep). Each retry first force-disconnects the endpoints
		// the network still lists; retried for up to 10 s before it fails.
		var err error
		for try := 0; try < 40; try++ {
			if _, err = docker(ctx, append([]string{"network", "rm"}, c.networks...)...); err == nil {
				break
			}
			c.networks = c.remainingNetworks(ctx)
			if len(c.networks) == 0 {
				err = nil
				break
			}
			for _, nw := range c.networks {
				disconnectStale(ctx, nw)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			c.t.Errorf("removing networks: %v", err)
		}
	}
}

// disconnectStale force-disconnects from network nw every endpoint it
// still lists (its containers are removed by then): Docker keeps a stale
// endpoint after some disconnect and reconnect sequences, and refuses to
// remove the network until it is forced off. Errors are left to the
// retried removal to report.
func disconnectStale(ctx context.Context, nw string) {
	names, err := docker(ctx, "network", "inspect", "--format", "{{range .Containers}}{{.Name}} {{end}}", nw)
	if err != nil {
		return
	}
	for _, name := range strings.Fields(names) {
		_, _ = docker(ctx, "network", "disconnect", "--force", nw, name)
	}
}

// remainingNetworks returns those of c's networks Docker still has.
func (c *cluster) remainingNetworks(ctx context.Context) []string {
	var out []string
	for _, nw := range c.networks {
		if _, err := docker(ctx, "network", "inspect", "--format", "{{.Name}}", nw); err == nil {
			out = append(out, nw)
		}
	}
	return out
}

// dockerLogs returns the last lines of a container's log (the node logs to
// standard error).
func dockerLogs(ctx context.Context, container string, lines int) string {
	cmd := osexec.CommandContext(ctx, "docker", "logs", "--tail", strconv.Itoa(lines), container)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s(docker logs: %v)", out, err)
	}
	return string(out)
}

// must fails the test when a docker command failed.
func (c *cluster) must(_ string, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) containers() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.container)
	}
	return out
}

func (c *cluster) homePrefixes() []string {
	var out []string
	for _, h := range c.homes {
		out = append(out, h.prefix.String())
	}
	return out
}

// all returns every node's index.
func (c *cluster) all() []int {
	var out []int
	for i := range c.nodes {
		out = append(out, i)
	}
	return out
}

// except returns every node's index but the given ones.
func (c *cluster) except(skip ...int) []int {
	return slices.DeleteFunc(c.all(), func(i int) bool { return slices.Contains(skip, i) })
}

// names returns the names of the nodes at idx, sorted.
func (c *cluster) names(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.nodes[i].name)
	}
	slices.Sort(out)
	return out
}

// kill sends SIGKILL to node i and returns the instant just before.
func (c *cluster) kill(i int) time.Time {
	c.t.Helper()
	at := time.Now()
	c.must(docker(context.Background(), "kill", "--signal", "KILL", c.nodes[i].container))
	return at
}

// stop stops node i with SIGTERM, killing it after grace, and returns when
// the container has exited.
func (c *cluster) stop(i int, grace time.Duration) {
	c.t.Helper()
	c.must(docker(context.Background(), "stop", "-t", strconv.Itoa(int(grace/time.Second)), c.nodes[i].container))
}

// start starts node i's stopped container (waitReady tells when it is
// ready).
func (c *cluster) start(i int) {
	c.t.Helper()
	c.must(docker(context.Background(), "start", c.nodes[i].container))
}

// cut separates the groups of nodes: each node is disconnected from the home
// networks of the nodes of the other groups. A node in no group keeps its
// links. It returns how long the docker commands took.
func (c *cluster) cut(groups ...[]int) time.Duration {
	c.t.Helper()
	start := time.Now()
	groupOf := map[int]int{}
	for g, idx := range groups {
		for _, i := range idx {
			groupOf[i] = g
		}
	}
	homeGroup := map[int]int{}
	for i, n := range c.nodes {
		g, ok := groupOf[i]
		if !ok {
			continue
		}
		if hg, seen := homeGroup[n.home]; seen && hg != g {
			c.t.Fatalf("cut: home network %d holds nodes of two groups", n.home)
		}
		homeGroup[n.home] = g
	}
	for i, n := range c.nodes {
		g, ok := groupOf[i]
		if !ok {
			continue
		}
		for h, hg := range homeGroup {
			if hg != g && n.attached[h] {
				c.must(docker(context.Background(), "network", "disconnect", c.homes[h].name, n.container))
				n.attached[h] = false
			}
		}
	}
	return time.Since(start)
}

// heal reconnects every link cut took away, each node at its old address.
// It returns how long the docker commands took.
func (c *cluster) heal() time.Duration {
	c.t.Helper()
	start := time.Now()
	for _, n := range c.nodes {
		for h, on := range n.attached {
			if !on {
				c.must(docker(context.Background(), "network", "connect", "--ip", c.ipOn(c.homes[h], n.i).String(),
					c.homes[h].name, n.container))
				n.attached[h] = true
			}
		}
	}
	return time.Since(start)
}

// httpClient is the test's client of the nodes' HTTP ports.
var httpClient = &http.Client{Timeout: time.Second}

// status returns node i's view of the cluster (GET /v1/cluster).
func (c *cluster) status(i int) (ringlimit.ClusterStatus, error) {
	var s ringlimit.ClusterStatus
	resp, err := httpClient.Get(fmt.Sprintf("http://%s/v1/cluster", netip.AddrPortFrom(c.nodes[i].clientIP, httpPort)))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /v1/cluster: %s: %s", resp.Status, b)
	}
	return s, json.Unmarshal(b, &s)
}

// view returns the members node i sees, sorted, and whether its ring holds
// every one of them and it is ready.
func (c *cluster) view(i int) ([]string, bool, error) {
	s, err := c.status(i)
	if err != nil {
		return nil, false, err
	}
	var names []string
	ok := s.Ready || c.skewed[i] && s.Clock.Skewed
	for _, m := range s.Members {
		names = append(names, m.Name)
		ok = ok && m.InRing
	}
	slices.Sort(names)
	return names, ok, nil
}

// waitMembers polls until every node of idx sees exactly the members want
// (ready, with all of them in its ring), and returns how long that took.
func (c *cluster) waitMembers(idx []int, want []string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		var bad []string
		for _, i := range idx {
			got, ok, err := c.view(i)
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s: %v", c.nodes[i].name, err))
			case !ok || !slices.Equal(got, want):
				bad = append(bad, fmt.Sprintf("%s sees %v (ring complete and ready: %v)", c.nodes[i].name, got, ok))
			}
		}
		if len(bad) == 0 {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("after %v, want every node of %v to see %v: %s",
				timeout, c.names(idx), want, strings.Join(bad, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady polls node i's /readyz until it answers 200, and returns how
// long that took.
func (c *cluster) waitReady(i int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	url := fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(c.nodes[i].clientIP, httpPort))
	for {
		resp, err := httpClient.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("%s not ready after %v (last: %v)", c.nodes[i].name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpGet returns the body of a GET of url.
func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricsLines returns the lines of node i's /metrics, fetched within 5 s.
func (c *cluster) metricsLines(i int) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := httpGet(ctx, fmt.Sprintf("http://%s:%d/metrics", c.nodes[i].clientIP, httpPort))
	if err != nil {
		return nil, err
	}
	return strings.Split(body, "\n"), nil
}
