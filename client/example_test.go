package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
)

// startNode starts a one-node cluster on loopback, with ports chosen by the
// system, for the examples; a real program dials nodes it did not start.
// It returns once the node can decide, and a function that stops it.
func startNode() (*ringlimit.Node, func()) {
	cfg := ringlimit.DefaultConfig()
	cfg.Name = "node-a"
	cfg.API.GRPCAddr = "127.0.0.1:0"
	cfg.API.HTTPAddr = "127.0.0.1:0"
	cfg.Gossip.Addr = "127.0.0.1:0"
	cfg.Gossip.Profile = ringlimit.GossipLocal
	cfg.Peer.Secret = []byte("an example secret, 32 bytes long") // every node of the cluster has it
	n, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	}
	if err := waitMembers(n, 1); err != nil {
		stop()
		log.Fatal(err)
	}
	return n, stop
}

// waitMembers waits until n's ring holds want members. Start returns
// before the node's first membership reaches its core, and a check that
// arrives in between is answered "check: no members".
func waitMembers(n *ringlimit.Node, want int) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	deadline := time.After(10 * time.Second)
	for len(n.Members()) < want {
		select {
		case <-t.C:
		case <-deadline:
			return fmt.Errorf("node %s: members %v after 10s, want %d", n.Name(), n.Members(), want)
		}
	}
	return nil
}

// A client with a registered limit asks a node whether to admit each
// request of user "alice".
func Example() {
	node, stop := startNode()
	defer stop()

	c, err := client.New([]string{node.GRPCAddr()},
		client.WithTimeout(time.Second),
		client.WithLimit(client.Item{Name: "api", Limit: 3, Period: time.Hour}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		ok, err := c.Allow(ctx, "api", "alice")
		if err != nil {
			log.Fatal(err) // the node could not be asked: fail open or closed
		}
		fmt.Printf("request %d allowed: %v\n", i, ok)
	}
	// Output:
	// request 1 allowed: true
	// request 2 allowed: true
	// request 3 allowed: true
	// request 4 allowed: false
}

// Check decides several items in one call. Each item carries its own limit
// and algorithm; each result says what is left and, over the limit, when to
// retry. An invalid item is answered with an error of its own.
func ExampleClient_Check() {
	node, stop := startNode()
	defer stop()

	c, err := client.Dial(context.Background(), []string{node.GRPCAddr()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.Check(context.Background(),
		client.Item{Name: "login", Key: "bob", Hits: 5, Limit: 5, Period: time.Minute,
			Algorithm: bucket.SlidingLog, Mode: check.ModeOwner},
		client.Item{Name: "login", Key: "bob", Hits: 1, Limit: 5, Period: time.Minute,
			Algorithm: bucket.SlidingLog, Mode: check.ModeOwner},
		client.Item{Name: "search", Key: "bob", Hits: 1, Limit: 0, Period: time.Minute},
	)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		switch r.Status {
		case check.StatusUnderLimit:
			fmt.Printf("%s: remaining %d of %d, owner %s\n", r.Status, r.Remaining, r.Limit, r.Owner)
		case check.StatusOverLimit:
			fmt.Printf("%s: retry within a minute: %v\n", r.Status, r.RetryAfter > 0 && r.RetryAfter <= time.Minute)
		default:
			fmt.Printf("%s: %v\n", r.Status, r.Err)
		}
	}
	// Output:
	// under_limit: remaining 0 of 5, owner node-a
	// over_limit: retry within a minute: true
	// error: client: item 2: limit: must be positive, got 0
}

// WithTLS configures the client for nodes that serve TLS: the CA that
// signed the nodes' certificates and, for mutual TLS, the client's own.
func ExampleWithTLS() {
	pem, err := os.ReadFile("/etc/ringlimit/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair("/etc/ringlimit/client.pem", "/etc/ringlimit/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New([]string{"ringlimit-0.ringlimit-headless:7101", "ringlimit-1.ringlimit-headless:7101"},
		client.WithTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
