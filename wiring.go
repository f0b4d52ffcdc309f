package ringlimit

import (
	"net"
	"strconv"

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
	if n.cfg.GossipProfile == GossipLocal {
		cc = peer.LocalClusterConfig()
	}
	cc.Name = n.cfg.Name
	cc.BindAddr, cc.BindPort = splitHostPort(n.cfg.GossipAddr)
	if n.cfg.GossipAdvertiseAddr != "" {
		cc.AdvertiseAddr, cc.AdvertisePort = splitHostPort(n.cfg.GossipAdvertiseAddr)
	}
	cc.Seeds = n.cfg.Seeds
	if n.cfg.GossipReconnectInterval != 0 {
		cc.ReconnectInterval = n.cfg.GossipReconnectInterval
	}
	if n.cfg.GossipReconnectTimeout != 0 {
		cc.ReconnectTimeout = n.cfg.GossipReconnectTimeout
	}
	cc.GRPCAddr = n.peerAddr
	cc.Incarnation = n.cfg.Sync.Incarnation
	cc.SecretKey = n.cfg.GossipKey
	cc.SecondaryKeys = n.cfg.GossipSecondaryKeys
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
