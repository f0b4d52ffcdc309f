package ringlimit

import (
	"net"
	"strconv"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/peer"
)

// transportConfig configures the links to the other nodes. Their metrics go
// to the node's registry.
func (n *Node) transportConfig() peer.TransportConfig {
	tc := peer.DefaultTransportConfig()
	tc.Self = n.cfg.Name
	tc.Clock = n.clock
	tc.Logger = n.cfg.Logger // peer adds the node attribute itself
	tc.Registerer = n.cfg.Registry
	if n.cfg.Peer.RPCTimeout != 0 {
		tc.RPCTimeout = n.cfg.Peer.RPCTimeout
	}
	if n.mtls != nil {
		tc.Credentials = n.mtls.ClientCredentials()
		tc.Authorize = peer.AuthorizeCertificate
	}
	return tc
}

// clusterConfig configures gossip: bound to GossipAddr, advertising in the
// node's metadata the bound address where peers reach it (PeerAddr's) and
// its incarnation. Config.Validate checked the addresses.
func (n *Node) clusterConfig() peer.ClusterConfig {
	cc := peer.DefaultClusterConfig()
	if n.cfg.Gossip.Profile == GossipLocal {
		cc = peer.LocalClusterConfig()
	}
	cc.Name = n.cfg.Name
	cc.BindAddr, cc.BindPort = splitHostPort(n.cfg.Gossip.Addr)
	if n.cfg.Gossip.AdvertiseAddr != "" {
		cc.AdvertiseAddr, cc.AdvertisePort = splitHostPort(n.cfg.Gossip.AdvertiseAddr)
	}
	cc.Seeds = n.cfg.Gossip.Seeds
	if n.cfg.Gossip.ReconnectInterval != 0 {
		cc.ReconnectInterval = n.cfg.Gossip.ReconnectInterval
	}
	if n.cfg.Gossip.ReconnectTimeout != 0 {
		cc.ReconnectTimeout = n.cfg.Gossip.ReconnectTimeout
	}
	cc.ProbeInterval = n.cfg.Gossip.ProbeInterval // zero: the profile's
	cc.ProbeTimeout = n.cfg.Gossip.ProbeTimeout
	cc.SuspicionMult = n.cfg.Gossip.SuspicionMult
	cc.GRPCAddr = n.peerAddr
	cc.Incarnation = n.cfg.Sync.Incarnation
	cc.SecretKey = n.cfg.Gossip.Key
	cc.SecondaryKeys = n.cfg.Gossip.SecondaryKeys
	cc.Logger = n.cfg.Logger
	return cc
}

// splitHostPort splits a validated host:port; an empty host is 0.0.0.0 and a
// bad port is 0.
func splitHostPort(addr string) (string, int) {
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		host = "0.0.0.0"
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

// apiConfig configures the public check API (package api) from c.API; the
// caller sets Rules.
func (c Config) apiConfig() api.Config {
	return api.Config{
		Node: c.Name, MaxKeyLen: c.API.MaxKeyLen, MaxBatchItems: c.API.MaxBatchItems, MaxBodyBytes: c.API.MaxBodyBytes,
		GRPCRulesOnly: c.API.GRPCRulesOnly, HTTPRulesOnly: c.API.HTTPRulesOnly,
	}
}
