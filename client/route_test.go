package client_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/client"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/ring"
)

func TestDefaultPartitionCountIsTheRings(t *testing.T) {
	if got, want := client.DefaultPartitionCount, ring.DefaultConfig().PartitionCount; got != want {
		t.Errorf("DefaultPartitionCount = %d, ring.DefaultConfig().PartitionCount = %d", got, want)
	}
	if got := client.NewOwnerTable(0).Partitions(); got != client.DefaultPartitionCount {
		t.Errorf("NewOwnerTable(0).Partitions() = %d, want %d", got, client.DefaultPartitionCount)
	}
}

// TestOwnerTablePartitionIsTheRings: the table puts a bucket in the
// partition that package ring puts its ring key (name NUL key) in.
func TestOwnerTablePartitionIsTheRings(t *testing.T) {
	for _, n := range []int{1, 7, 271, 1021} {
		cfg := ring.DefaultConfig()
		cfg.PartitionCount = n
		r, err := ring.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tab := client.NewOwnerTable(n)
		for i := range 500 {
			name, key := fmt.Sprintf("limit%d", i%3), fmt.Sprintf("user:%d", i)
			if got, want := tab.Partition(name, key), r.PartitionOf(name+"\x00"+key); got != want {
				t.Fatalf("partitions %d, (%q, %q): table %d, ring %d", n, name, key, got, want)
			}
		}
	}
}

func TestOwnerTableLearnsPartitions(t *testing.T) {
	tab := client.NewOwnerTable(7)
	if _, ok := tab.Owner("api", "a"); ok {
		t.Fatal("an empty table knows an owner")
	}
	tab.Learn("api", "a", "")
	if _, ok := tab.Owner("api", "a"); ok {
		t.Error("an empty owner was learned")
	}
	tab.Learn("api", "a", "n1")
	// Another key of the same partition: learned with the first.
	var same string
	for i := 0; same == ""; i++ {
		if k := fmt.Sprint("k", i); tab.Partition("api", k) == tab.Partition("api", "a") {
			same = k
		}
	}
	for _, key := range []string{"a", same} {
		if got, ok := tab.Owner("api", key); !ok || got != "n1" {
			t.Errorf("after learning n1 owns (api, a): Owner(api, %s) = %q, %v; want n1", key, got, ok)
		}
	}
	tab.Learn("api", same, "n2")
	if got, _ := tab.Owner("api", "a"); got != "n2" {
		t.Errorf("after learning n2 owns a key of the partition: Owner(api, a) = %q, want n2", got)
	}
}

// fakeCluster is fake nodes that answer every item as owned by the member
// its ring names: the node called answers (Node), the ring's member owns
// (Owner). A fake does not forward; what matters to the client is who
// answered and who owns.
type fakeCluster struct {
	ring  atomic.Pointer[ring.Ring]
	addrs []string
	stops []func()
	calls []atomic.Int64 // by node
}

func newFakeCluster(t *testing.T, names ...string) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{calls: make([]atomic.Int64, len(names))}
	fc.setMembers(t, names...)
	for i, name := range names {
		f := &fakeNode{name: name}
		f.answer = func(_ context.Context, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
			fc.calls[i].Add(1)
			r := fc.ring.Load()
			resp := &ringlimitv1.CheckResponse{Node: name}
			for _, it := range req.Items {
				owner, _ := r.Owner(it.Name + "\x00" + it.UniqueKey)
				resp.Items = append(resp.Items, &ringlimitv1.CheckResult{Status: ringlimitv1.Status_STATUS_UNDER_LIMIT, Owner: owner})
			}
			return resp, nil
		}
		addr, stop := serveFakeStoppable(t, f)
		fc.addrs = append(fc.addrs, addr)
		fc.stops = append(fc.stops, stop)
	}
	return fc
}

// setMembers makes the ring's members names.
func (fc *fakeCluster) setMembers(t *testing.T, names ...string) {
	t.Helper()
	r, err := ring.New(ring.DefaultConfig(), names...)
	if err != nil {
		t.Fatal(err)
	}
	fc.ring.Store(r)
}

// serveFakeStoppable is serveFake (plaintext) with a function that stops
// the server early; it is safe to call twice.
func serveFakeStoppable(t *testing.T, f *fakeNode) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	ringlimitv1.RegisterRateLimiterServer(s, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	stop := func() { s.Stop(); <-done }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// warmUp calls c until every node has answered one call and then once per
// key of keys, so that c knows every node's address and every key's owner.
func warmUp(t *testing.T, c *client.Client, keys []string) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; len(seen) < 3; i++ {
		if i == 10000 {
			t.Fatalf("after %d calls only %v answered", i, seen)
		}
		res, err := c.Check(t.Context(), client.Item{Name: "api", Key: fmt.Sprint("warm", i), Hits: 1, Limit: 1, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		seen[res[0].Node] = true
	}
	for _, k := range keys {
		if _, err := c.Check(t.Context(), client.Item{Name: "api", Key: k, Hits: 1, Limit: 1, Period: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
}

// warmCluster returns a fake cluster of n1, n2 and n3, an owner-routing
// client of it and 300 keys, every one checked once (warmUp).
func warmCluster(t *testing.T) (*fakeCluster, *client.Client, []string) {
	t.Helper()
	fc := newFakeCluster(t, "n1", "n2", "n3")
	c := newClient(t, fc.addrs, client.WithOwnerRouting())
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	warmUp(t, c, keys)
	return fc, c, keys
}

func TestOwnerRoutingSendsEachCheckToItsOwner(t *testing.T) {
	fc, c, keys := warmCluster(t)
	owned := map[string]int{}
	for _, k := range keys {
		res, err := c.Check(t.Context(), client.Item{Name: "api", Key: k, Hits: 1, Limit: 1, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0]; r.Node != r.Owner {
			t.Errorf("key %s: answered by %s, owned by %s; want its owner to answer", k, r.Node, r.Owner)
		}
		owned[res[0].Node]++
	}
	if len(owned) != 3 {
		t.Errorf("owners answering: %v, want all three", owned)
	}

	// A call of several items goes to the owner of most of them.
	var items []client.Item
	for _, k := range keys {
		if o, _ := fc.ring.Load().Owner("api\x00" + k); o == "n2" && len(items) < 3 {
			items = append(items, client.Item{Name: "api", Key: k, Hits: 1, Limit: 1, Period: time.Second})
		}
	}
	for _, k := range keys {
		if o, _ := fc.ring.Load().Owner("api\x00" + k); o == "n3" {
			items = append(items, client.Item{Name: "api", Key: k, Hits: 1, Limit: 1, Period: time.Second})
			break
		}
	}
	res, err := c.Check(t.Context(), items...)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Node != "n2" {
		t.Errorf("3 items of n2 and 1 of n3: answered by %s, want n2", res[0].Node)
	}
}

// TestOwnerRoutingFollowsMembershipChanges: after the ring changes, a check
// whose key moved goes to its old owner once (which answers, naming the new
// owner) and to the new owner after.
func TestOwnerRoutingFollowsMembershipChanges(t *testing.T) {
	fc, c, keys := warmCluster(t)
	before := fc.ring.Load()
	fc.setMembers(t, "n1", "n2") // n3 left the ring (but still answers)
	moved := 0
	for _, k := range keys {
		old, _ := before.Owner("api\x00" + k)
		if old != "n3" {
			continue
		}
		moved++
		item := client.Item{Name: "api", Key: k, Hits: 1, Limit: 1, Period: time.Second}
		res, err := c.Check(t.Context(), item)
		if err != nil {
			t.Fatal(err)
		}
		// The first call of the key's partition since the change went to n3;
		// whatever went, the answer names the new owner, and the next call
		// goes there.
		if res[0].Owner == "n3" {
			t.Fatalf("key %s: owner still n3 after the change", k)
		}
		res, err = c.Check(t.Context(), item)
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0]; r.Node != r.Owner {
			t.Errorf("key %s, second call after the change: answered by %s, owned by %s", k, r.Node, r.Owner)
		}
	}
	if moved == 0 {
		t.Fatal("no key was n3's")
	}
}

// TestOwnerRoutingSurvivesADeadNode: the checks of a stopped node's keys go
// to the other nodes.
func TestOwnerRoutingSurvivesADeadNode(t *testing.T) {
	fc := newFakeCluster(t, "n1", "n2", "n3")
	c := newClient(t, fc.addrs, client.WithOwnerRouting(), client.WithTimeout(5*time.Second))
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	warmUp(t, c, keys)
	var n3keys []string
	for _, k := range keys {
		if o, _ := fc.ring.Load().Owner("api\x00" + k); o == "n3" {
			n3keys = append(n3keys, k)
		}
	}
	fc.stops[2]()
	// Calls racing the connection's failure may fail; within a bounded
	// number of calls every one succeeds, answered by n1 or n2.
	ok := 0
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ok < 2*len(n3keys); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d calls, %d successes in a row; want %d", i, ok, 2*len(n3keys))
		}
		res, err := c.Check(t.Context(), client.Item{Name: "api", Key: n3keys[i%len(n3keys)], Hits: 1, Limit: 1, Period: time.Second})
		if err != nil {
			ok = 0
			continue
		}
		if res[0].Node == "n3" {
			t.Fatalf("answered by n3 after it stopped")
		}
		ok++
	}
}

func TestOwnerRoutingNeedsAddresses(t *testing.T) {
	_, err := client.New([]string{"dns:///ringlimit.example:7101"}, client.WithOwnerRouting())
	if err == nil || !strings.Contains(err.Error(), "owner routing") {
		t.Errorf("New(dns target, WithOwnerRouting) = %v, want an error about owner routing", err)
	}
}

func TestOwnerRoutingDial(t *testing.T) {
	fc := newFakeCluster(t, "n1", "n2")
	// One address is dead: Dial returns once another is ready.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c, err := client.Dial(t.Context(), []string{dead, fc.addrs[0], fc.addrs[1]}, client.WithOwnerRouting())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		if _, err := c.Check(t.Context(), client.Item{Name: "api", Key: fmt.Sprint(i), Hits: 1, Limit: 1, Period: time.Second}); err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if c, err := client.Dial(ctx, []string{dead}, client.WithOwnerRouting()); err == nil {
		c.Close()
		t.Error("Dial of a dead address succeeded")
	}
}

// TestNodeIndex: a name answers at one address, and an address is one
// name's: setting either moves it.
func TestNodeIndex(t *testing.T) {
	x := client.NewNodeIndex()
	x.Set("n1", 0)
	x.Set("n2", 1)
	x.Set("", 2)   // ignored
	x.Set("n3", 1) // address 1 now answers as n3: n2 is forgotten
	x.Set("n1", 2) // n1 moved to address 2
	for _, tc := range []struct {
		name string
		i    int
		ok   bool
	}{{"n1", 2, true}, {"n2", 0, false}, {"n3", 1, true}, {"", 0, false}} {
		if i, ok := x.Lookup(tc.name); ok != tc.ok || ok && i != tc.i {
			t.Errorf("Lookup(%q) = %d, %v; want %d, %v", tc.name, i, ok, tc.i, tc.ok)
		}
	}
}
