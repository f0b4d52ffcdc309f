package ringlimit

import "github.com/ringlimit/ringlimit/ring"

// ClusterStatus is a node's view of the cluster, as served at
// GET /v1/cluster.
type ClusterStatus struct {
	// Self is this node's name.
	Self string `json:"self"`
	// GRPCAddr, HTTPAddr and GossipAddr are this node's bound addresses.
	GRPCAddr   string `json:"grpc_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	GossipAddr string `json:"gossip_addr"`
	// PeerAddr is where the other nodes reach this one's peer service.
	PeerAddr string `json:"peer_addr"`
	// PeerAuth is how peers authenticate each other: "mutual-tls"
	// (PeerTLS), "secret" (a CA derived from PeerSecret or the gossip key)
	// or "none (insecure)" (InsecurePeers).
	PeerAuth string `json:"peer_auth"`
	// Warnings lists what weakens this node's defences, such as peers
	// that do not authenticate; empty when nothing does.
	Warnings []string `json:"warnings,omitempty"`
	// Ready is what GET /readyz reports.
	Ready bool `json:"ready"`
	// NotReady says why the node is not ready; empty when it is.
	NotReady string `json:"not_ready,omitempty"`
	// Clock is this node's clock against its peers'.
	Clock ClockStatus `json:"clock"`
	// Mode and Policy are the node's defaults.
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	// Members lists the live members the gossip layer reports, sorted by
	// name, this node included.
	Members []MemberStatus `json:"members"`
	// Ring describes this node's ring: its members and their partitions.
	// Every node should show the same members and partitions; Version is
	// local to each node.
	Ring ring.Summary `json:"ring"`
}

// MemberStatus is one member as this node sees it.
type MemberStatus struct {
	// Name is the member's node name.
	Name string `json:"name"`
	// State is "alive": the gossip layer reports live members only (a
	// suspect member is still alive; a failed or departed one is gone).
	State string `json:"state"`
	// Self marks this node.
	Self bool `json:"self,omitempty"`
	// GRPCAddr and GossipAddr are where the member serves gRPC and gossip.
	GRPCAddr   string `json:"grpc_addr"`
	GossipAddr string `json:"gossip_addr,omitempty"`
	// Protocol is the peer protocol version the member speaks.
	Protocol int `json:"protocol"`
	// InRing reports whether this node's ring holds the member yet.
	InRing bool `json:"in_ring"`
}

// ClusterStatus returns this node's view of the cluster.
func (n *Node) ClusterStatus() ClusterStatus {
	r := n.ring.Load()
	s := ClusterStatus{
		Self:       n.cfg.Name,
		GRPCAddr:   n.grpcAddr,
		HTTPAddr:   n.httpAd,
		GossipAddr: n.cl.GossipAddr(),
		PeerAddr:   n.peerAddr,
		PeerAuth:   n.cfg.peerAuth(),
		Ready:      n.Ready(),
		NotReady:   n.notReady(),
		Clock:      n.clockStatus(),
		Mode:       n.cfg.Sync.Mode.String(),
		Policy:     n.cfg.Sync.Policy.String(),
		Ring:       r.Summary(),
	}
	if n.mtls == nil {
		s.Warnings = append(s.Warnings, warnInsecurePeers)
	}
	for _, m := range n.cl.Members() {
		s.Members = append(s.Members, MemberStatus{
			Name:       m.Name,
			State:      "alive",
			Self:       m.Name == n.cfg.Name,
			GRPCAddr:   m.GRPCAddr,
			GossipAddr: m.GossipAddr,
			Protocol:   m.Protocol,
			InRing:     r.Has(m.Name),
		})
	}
	if s.Members == nil {
		s.Members = []MemberStatus{}
	}
	return s
}
