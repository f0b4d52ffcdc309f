package ringlimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// waitMembers waits until n's ring holds want members: Start returns before
// the node's first membership reaches its core (a check that comes in
// between is answered "check: no members"), and a joining node learns of the
// others by gossip.
func waitMembers(n *ringlimit.Node, want int) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for len(n.Members()) < want {
		select {
		case <-tick.C:
		case <-deadline:
			log.Fatalf("node %s: members %v, want %d", n.Name(), n.Members(), want)
		}
	}
}

// stop shuts n down gracefully: it hands its keys to the other nodes and
// leaves the cluster.
func stop(n *ringlimit.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		log.Print(err)
	}
}

// clusterSecret is the secret the nodes of one cluster share: 32 random bytes
// given to every node (from a secret store; made up here), from which they
// authenticate each other (Config.Peer.Secret).
var clusterSecret = []byte("an example secret, 32 bytes long")

// A program embeds a node and asks it directly, with no network hop: the
// node decides, and serves the same checks over gRPC and HTTP to others.
func ExampleStart() {
	cfg := ringlimit.DefaultConfig()
	cfg.Name = "embedded"
	cfg.API.GRPCAddr = "127.0.0.1:0" // port 0: the system picks; see n.GRPCAddr()
	cfg.API.HTTPAddr = "127.0.0.1:0"
	cfg.Gossip.Addr = "127.0.0.1:0"
	cfg.Peer.Secret = clusterSecret // what the cluster's nodes authenticate each other with
	// cfg.Gossip.Seeds = []string{"ringlimit-headless:7946"} would join an
	// existing cluster of sidecars or standalone nodes.
	n, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer stop(n)
	if err := n.WaitReady(context.Background()); err != nil { // at once: no seeds, the first node
		log.Fatal(err)
	}

	item := &ringlimitv1.CheckItem{ // hits left out: one per check (proto.Int64(0) would peek)
		Name: "api", UniqueKey: "user:42", Limit: 2,
		Period: durationpb.New(time.Minute),
	}
	for range 3 {
		resp, err := n.Check(context.Background(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item}})
		if err != nil {
			log.Fatal(err)
		}
		r := resp.Items[0]
		fmt.Println(r.Status, "remaining", r.Remaining, "owner", r.Owner)
	}
	// Output:
	// STATUS_UNDER_LIMIT remaining 1 owner embedded
	// STATUS_UNDER_LIMIT remaining 0 owner embedded
	// STATUS_OVER_LIMIT remaining 0 owner embedded
}

// Two nodes in one process form one cluster: the second joins through the
// first's gossip address, and a limit is shared between them. Owner mode
// sends every check to the key's owner, so the limit is exact whichever
// node is asked.
func ExampleStart_cluster() {
	start := func(name string, seeds ...string) *ringlimit.Node {
		cfg := ringlimit.DefaultConfig()
		cfg.Name = name
		cfg.API.GRPCAddr, cfg.API.HTTPAddr, cfg.Gossip.Addr = "127.0.0.1:0", "", "127.0.0.1:0"
		cfg.Gossip.Profile = ringlimit.GossipLocal // nodes on one host
		cfg.Gossip.Seeds = seeds
		cfg.Peer.Secret = clusterSecret
		n, err := ringlimit.Start(context.Background(), cfg)
		if err != nil {
			log.Fatal(err)
		}
		return n
	}
	a := start("a")
	defer stop(a)
	b := start("b", a.GossipAddr())
	defer stop(b)
	if err := b.WaitReady(context.Background()); err != nil { // b joined through a
		log.Fatal(err)
	}
	waitMembers(a, 2)
	waitMembers(b, 2)
	fmt.Println("a sees", a.Members(), "and b sees", b.Members())

	item := &ringlimitv1.CheckItem{
		Name: "login", UniqueKey: "alice", Hits: proto.Int64(1), Limit: 3,
		Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_OWNER,
	}
	for i, n := range []*ringlimit.Node{a, b, a, b} {
		resp, err := n.Check(context.Background(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("check %d via %s: %v\n", i+1, n.Name(), resp.Items[0].Status)
	}
	// Output:
	// a sees [a b] and b sees [a b]
	// check 1 via a: STATUS_UNDER_LIMIT
	// check 2 via b: STATUS_UNDER_LIMIT
	// check 3 via a: STATUS_UNDER_LIMIT
	// check 4 via b: STATUS_OVER_LIMIT
}
