package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// ProtocolVersion is the version of the node-to-node protocol this build
// speaks, advertised in every node's gossip metadata. It changes only when a
// change to the Peer service or the envelopes is not backward compatible.
const ProtocolVersion = 1

// metaVersion is the version of the metadata encoding itself.
const metaVersion = ProtocolVersion

// Member is one live member of the cluster, as the Cluster reports it.
type Member struct {
	// Name is the member's node name: its identity.
	Name string
	// GRPCAddr is where the member serves gRPC ("host:port").
	GRPCAddr string
	// Protocol is the peer protocol version the member speaks.
	Protocol int
	// GossipAddr is the member's memberlist address ("host:port"), for
	// display only: members are never identified by address.
	GossipAddr string
	// Incarnation is the incarnation of the member's process as its gossip
	// metadata advertises it (ClusterConfig.Incarnation); 0 when it
	// advertises none. The Transport accepts from a member only envelopes of
	// that incarnation, so a restart is recognised through the membership,
	// never through a number an envelope claims.
	Incarnation uint64
}

// Names returns the names of ms, in order.
func Names(ms []Member) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return names
}

// sortMembers sorts ms by name.
func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
}

// errBadMeta is wrapped by decodeMeta's errors.
var errBadMeta = errors.New("peer: bad node metadata")

// wireMeta is the JSON form of a node's gossip metadata. JSON keeps it
// readable in memberlist's debug output and lets later versions add fields
// that older nodes ignore. It must stay under memberlist.MetaMaxSize (512
// bytes).
type wireMeta struct {
	// V is the peer protocol version (ProtocolVersion).
	V int `json:"v"`
	// GRPC is the node's gRPC address.
	GRPC string `json:"grpc"`
	// Leaving is set by a node about to leave gracefully (Cluster.Leave), so
	// that the others count its departure as a leave, not a failure
	// (memberlist does not tell its event delegate which it was).
	Leaving bool `json:"leaving,omitempty"`
	// Inc is the node's process incarnation (ClusterConfig.Incarnation),
	// omitted when zero.
	Inc uint64 `json:"inc,omitempty"`
}

// encodeMeta returns the gossip metadata of a node speaking protocol v with
// its gRPC server at grpcAddr, in its process incarnation inc.
func encodeMeta(v int, grpcAddr string, inc uint64) []byte {
	return encodeWireMeta(wireMeta{V: v, GRPC: grpcAddr, Inc: inc})
}

// encodeWireMeta returns m encoded.
func encodeWireMeta(m wireMeta) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("peer: encoding metadata: " + err.Error()) // broken invariant: a struct of an int, a string and a bool always encodes
	}
	return b
}

// decodeMeta parses gossip metadata: the protocol version and gRPC address.
func decodeMeta(b []byte) (protocol int, grpcAddr string, err error) {
	m, err := decodeWireMeta(b)
	return m.V, m.GRPC, err
}

// decodeWireMeta parses and checks gossip metadata.
func decodeWireMeta(b []byte) (wireMeta, error) {
	var m wireMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return wireMeta{}, fmt.Errorf("%w: %v", errBadMeta, err)
	}
	if m.V < 1 {
		return wireMeta{}, fmt.Errorf("%w: protocol version %d", errBadMeta, m.V)
	}
	if _, _, err := net.SplitHostPort(m.GRPC); err != nil {
		return wireMeta{}, fmt.Errorf("%w: gRPC address %q: %v", errBadMeta, m.GRPC, err)
	}
	return m, nil
}

// advertisedGRPCAddr returns addr with an empty or unspecified host replaced
// by ip (the node's advertised gossip IP), so that other members can dial it.
func advertisedGRPCAddr(addr string, ip net.IP) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || ip == nil {
		return addr
	}
	if h := net.ParseIP(host); host != "" && (h == nil || !h.IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(ip.String(), port)
}
