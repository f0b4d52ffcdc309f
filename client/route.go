package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// router sends each call to the node that owns its items' keys, as an
// OwnerTable predicts (WithOwnerRouting). It holds one connection per
// address and learns which node answers at which address from the answers
// themselves (CheckResponse.node), so it needs no other source of
// membership. A call whose owner is unknown, or at no address of the client,
// or not connected, goes round-robin over the connected addresses, as a
// client without owner routing would send it.
//
// A router is safe for concurrent use.
type router struct {
	table *OwnerTable
	nodes []routeNode
	next  atomic.Uint64 // round-robin position

	// names maps a node's name to the index in nodes of the address it
	// last answered at.
	names *NodeIndex
}

// routeNode is the connection to one address.
type routeNode struct {
	addr string
	conn *grpc.ClientConn
	rpc  ringlimitv1.RateLimiterClient
}

// newRouter dials (without connecting) each of addrs with dopts. On error
// it closes what it opened.
func newRouter(addrs []string, partitions int, dopts []grpc.DialOption) (*router, error) {
	r := &router{table: NewOwnerTable(partitions), names: NewNodeIndex()}
	for _, a := range addrs {
		conn, err := grpc.NewClient(a, dopts...)
		if err != nil {
			_ = r.close()
			return nil, fmt.Errorf("client: %s: %w", a, err)
		}
		r.nodes = append(r.nodes, routeNode{addr: a, conn: conn, rpc: ringlimitv1.NewRateLimiterClient(conn)})
	}
	return r, nil
}

// close closes every connection.
func (r *router) close() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.conn.Close())
	}
	return errors.Join(errs...)
}

// pick returns the index of the node to call with items: the predicted
// owner of most of the items whose owner is known, when it is connected;
// otherwise the next connected node round-robin.
func (r *router) pick(items []Item) int {
	var buf [16]int // on the stack for up to 16 nodes
	var votes []int
	if len(r.nodes) <= len(buf) {
		votes = buf[:len(r.nodes)]
	} else {
		votes = make([]int, len(r.nodes))
	}
	best := -1
	for i := range items {
		it := &items[i]
		if !routable(it) {
			continue
		}
		owner, ok := r.table.Owner(it.Name, it.Key)
		if !ok {
			continue
		}
		if j, ok := r.names.Lookup(owner); ok {
			votes[j]++
			if best < 0 || votes[j] > votes[best] {
				best = j
			}
		}
	}
	if best >= 0 && r.nodes[best].conn.GetState() == connectivity.Ready {
		return best
	}
	return r.roundRobin()
}

// roundRobin returns the next node that is connected or, when none is, the
// next that is not failing (a call to it waits for its connection), or else
// the next one. It starts the connection of the idle nodes it passes.
func (r *router) roundRobin() int {
	n := len(r.nodes)
	start := int(r.next.Add(1) % uint64(n))
	fallback := -1
	for k := range n {
		i := (start + k) % n
		switch r.nodes[i].conn.GetState() {
		case connectivity.Ready:
			return i
		case connectivity.Idle:
			r.nodes[i].conn.Connect()
			fallback = cmpFallback(fallback, i)
		case connectivity.Connecting:
			fallback = cmpFallback(fallback, i)
		}
	}
	if fallback >= 0 {
		return fallback
	}
	return start
}

// cmpFallback keeps the first fallback found.
func cmpFallback(fallback, i int) int {
	if fallback >= 0 {
		return fallback
	}
	return i
}

// learn records what the answer resp to items, from node i, teaches: that
// resp.Node answers at node i's address, and the owner of each item's key.
func (r *router) learn(i int, items []Item, resp *ringlimitv1.CheckResponse) {
	r.names.Set(resp.GetNode(), i)
	for k, pr := range resp.GetItems() {
		if k < len(items) && routable(&items[k]) {
			r.table.Learn(items[k].Name, items[k].Key, pr.GetOwner())
		}
	}
}

// waitReady returns once one of the connections is ready, or ctx's error.
func (r *router) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{}, len(r.nodes))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // the watchers end with ctx
	for _, n := range r.nodes {
		n.conn.Connect()
		wg.Go(func() {
			for {
				s := n.conn.GetState()
				if s == connectivity.Ready {
					ready <- struct{}{}
					return
				}
				if !n.conn.WaitForStateChange(ctx, s) {
					return
				}
			}
		})
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// routable reports whether the router may predict its owner: its bucket is
// (Name, Key). The bucket of an item that names a rule is the rule's, which
// the client does not know.
func routable(it *Item) bool { return it.Rule == "" && it.Name != "" }
