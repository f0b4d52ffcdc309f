package main

import (
	"github.com/ringlimit/ringlimit/client"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// Routes of --route.
const (
	routeRoundRobin = "round-robin" // every call to the next target
	routeOwner      = "owner"       // every call to its keys' owner (ownerRoute)
)

// ownerRoute picks, for --route owner, the target that owns a call's keys,
// as the client package's owner routing does (client.WithOwnerRouting):
// owners are learned from the answers into a client.OwnerTable, and which
// node answers at which target from each answer's node name. A call whose
// owner is not known yet goes round-robin. It is safe for concurrent use.
type ownerRoute struct {
	table *client.OwnerTable
	n     int // targets

	names *client.NodeIndex // a node's name -> the target it answered at
}

func newOwnerRoute(targets, partitions int) *ownerRoute {
	return &ownerRoute{table: client.NewOwnerTable(partitions), n: targets, names: client.NewNodeIndex()}
}

// pick returns the target that owns most of req's keys among those whose
// owner is known, or -1 when none is known.
func (r *ownerRoute) pick(req *ringlimitv1.CheckRequest) int {
	if len(req.Items) == 1 { // the common case, without counting
		it := req.Items[0]
		if o, ok := r.table.Owner(it.Name, it.UniqueKey); ok {
			if i, ok := r.names.Lookup(o); ok {
				return i
			}
		}
		return -1
	}
	votes := make([]int, r.n)
	best := -1
	for _, it := range req.Items {
		if o, ok := r.table.Owner(it.Name, it.UniqueKey); ok {
			if i, ok := r.names.Lookup(o); ok {
				votes[i]++
				if best < 0 || votes[i] > votes[best] {
					best = i
				}
			}
		}
	}
	return best
}

// learn records what resp, the answer of target i to req, teaches.
func (r *ownerRoute) learn(i int, req *ringlimitv1.CheckRequest, resp *ringlimitv1.CheckResponse) {
	r.names.Set(resp.GetNode(), i)
	for k, res := range resp.GetItems() {
		if k < len(req.Items) {
			r.table.Learn(req.Items[k].Name, req.Items[k].UniqueKey, res.GetOwner())
		}
	}
}
