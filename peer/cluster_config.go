package peer

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profiles of ClusterConfig.Profile.
const (
	// ProfileLAN tunes memberlist for nodes on separate hosts of one LAN.
	ProfileLAN = "lan"
	// ProfileLocal tunes memberlist for many nodes on one host (loopback,
	// distinct ports): shorter probe and gossip intervals, short TCP timeouts.
	ProfileLocal = "local"
)

// Errors returned by ClusterConfig.Validate, NewCluster and Cluster's methods.
var (
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("peer: invalid config")
	// ErrNotStarted: a method that needs a running Cluster or Transport was
	// called before Start.
	ErrNotStarted = errors.New("peer: not started")
	// ErrClosed: Start or Leave was called after Close.
	ErrClosed = errors.New("peer: closed")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("peer: already started")
	// ErrNameTaken: the cluster this node tried to join has a live member
	// of the same name at another address. Cluster.Err returns it once
	// the Cluster has given up joining.
	ErrNameTaken = errors.New("peer: another live member has this node's name")
)

// ClusterConfig configures a Cluster. Start from DefaultClusterConfig (a LAN
// node) or LocalClusterConfig (a node on loopback) and set Name and GRPCAddr.
// A zero duration or multiplier below means "the profile's value".
type ClusterConfig struct {
	// Name is this node's name, unique in the cluster: its identity on the
	// ring and in every envelope. Required.
	Name string
	// BindAddr and BindPort are where memberlist listens for gossip (UDP and
	// TCP on the same port). BindPort 0 lets the OS choose a port; read it
	// back with Cluster.GossipAddr.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are the gossip address other members
	// use to reach this node (NAT, containers). Empty and 0 mean: derived
	// from the bind address (memberlist picks a private IP when binding
	// 0.0.0.0).
	AdvertiseAddr string
	AdvertisePort int
	// Seeds are gossip addresses ("host:port") of existing members to join
	// through. Start retries them with backoff until one answers. A node with
	// no seeds (or whose only seed is itself) starts a cluster of one.
	Seeds []string
	// GRPCAddr is the address ("host:port") other members dial for this
	// node's gRPC server. It travels in the node's gossip metadata. An empty
	// or unspecified host (":9001", "0.0.0.0:9001") is replaced with the
	// node's advertised gossip IP. Required.
	GRPCAddr string
	// Incarnation identifies this process lifetime (rlsync.Config's
	// Incarnation). It travels in the gossip metadata, where the other
	// members' Transports read which envelopes to accept from this node
	// (Member.Incarnation). Zero advertises none. Default 0.
	Incarnation uint64
	// Profile selects the memberlist tuning: ProfileLAN (the default when
	// empty) or ProfileLocal.
	Profile string
	// SecretKey, when set, enables memberlist's gossip encryption (AES-GCM);
	// it must be 16, 24 or 32 bytes (AES-128/192/256) and the same on every
	// member. Nil gossips in clear text.
	SecretKey []byte
	// SecondaryKeys are further gossip keys, of the same sizes, that this
	// node accepts (decrypts) but does not send with: they let the key be
	// rotated by rolling restarts without splitting the cluster (install the
	// new key as a secondary everywhere, then make it the SecretKey
	// everywhere, then remove the old one; docs/security.md). They need a
	// SecretKey.
	SecondaryKeys [][]byte
	// Logger receives memberlist's log output (otherwise written to stderr)
	// and the Cluster's own, at matching levels. Nil discards them.
	Logger *slog.Logger

	// ProbeInterval is the time between two failure-detection probes of a
	// random member. Lower detects failures sooner at the cost of more UDP
	// traffic. Profile values: lan 250ms, local 200ms (memberlist's default
	// is 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack before asking other
	// members to probe indirectly; it should be the network's p99 RTT plus
	// scheduling headroom. Profile values: lan 100ms, local 100ms (loopback
	// RTT is microseconds; the headroom is for many nodes sharing few cores).
	ProbeTimeout time.Duration
	// SuspicionMult sets how long a member that failed a probe stays suspect
	// (and may refute) before it is declared dead:
	// SuspicionMult * ProbeInterval * max(1, log10(members)). With 2,
	// memberlist expects no confirmations from other members (it waits for
	// SuspicionMult-2 of them) so the timeout is that minimum. Profile
	// values: 2 for both (lan: 500ms, local: 400ms below 10 members).
	//
	// Expected time from a crash to the members' lists dropping the node:
	// up to ~ProbeInterval until some member probes it, one ProbeInterval of
	// direct, indirect and TCP probes, the suspicion timeout, then a gossip
	// round: about 1.1s on lan and 0.9s on local, 1.6s if the probe order is
	// unlucky: within the 2s in which a crashed node's keys must be answered
	// again. Measured on loopback (TestClusterFailureDetection): lan 0.9 to
	// 1.2s, local 0.6 to 1.0s. Lifeguard (memberlist's awareness) stretches a
	// slow node's own intervals, which keeps an overloaded node from accusing
	// healthy ones.
	SuspicionMult int
	// GossipInterval is the time between gossip rounds that spread news
	// (joins, suspicions, deaths) not piggybacked on probes. Profile values:
	// lan 100ms, local 50ms (memberlist's default is 200ms).
	GossipInterval time.Duration
	// TCPTimeout bounds a join's and a push/pull's TCP connection and its
	// reads and writes. Profile values: lan 5s, local 1s. Close may wait this
	// long for a join attempt in flight.
	TCPTimeout time.Duration

	// JoinBackoffMin and JoinBackoffMax bound the wait between two attempts
	// to join the seeds: it starts at Min and doubles up to Max. Defaults
	// 100ms and 2s.
	JoinBackoffMin time.Duration
	JoinBackoffMax time.Duration

	// ReconnectInterval is the time between two attempts to join again the
	// members this node lost, once it has joined: every seed that no live
	// member answers for, and every member that failed (not one that left
	// gracefully) within ReconnectTimeout. memberlist never contacts a
	// member again once it has declared it dead, so without this a
	// partition that outlasts failure detection would never heal (Serf's
	// reconnect does the same). Each wait is drawn within ±25% of it.
	// Profile values: lan 2s, local 2s. Negative turns reconnection off.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is tried again, and
	// reported by Cluster.Failed, before it is forgotten (by the reconnect
	// loop: with reconnection off, a failed member is reported until it is
	// live again). Seeds are tried for as long as they are missing. Profile
	// values: lan 10m, local 10m.
	ReconnectTimeout time.Duration

	// wrapTransport, when set (tests), wraps memberlist's network transport,
	// which the Cluster then creates itself; tuneMemberlist, when set
	// (tests), adjusts memberlist's configuration last.
	wrapTransport  func(memberlist.Transport) memberlist.Transport
	tuneMemberlist func(*memberlist.Config)
}

// DefaultClusterConfig returns the configuration of a node on a LAN: gossip on
// 0.0.0.0:7946 (memberlist's customary port), ProfileLAN. Set Name, GRPCAddr
// and Seeds.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{
		BindAddr:       "0.0.0.0",
		BindPort:       7946,
		Profile:        ProfileLAN,
		JoinBackoffMin: 100 * time.Millisecond,
		JoinBackoffMax: 2 * time.Second,
	}
}

// LocalClusterConfig returns the configuration of one of many nodes on one
// host: gossip on 127.0.0.1 at an OS-chosen port (set BindPort for a fixed
// one), ProfileLocal.
func LocalClusterConfig() ClusterConfig {
	c := DefaultClusterConfig()
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.Profile = ProfileLocal
	return c
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c ClusterConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Name == "":
		return bad("Name is empty")
	case c.GRPCAddr == "":
		return bad("GRPCAddr is empty")
	case c.Profile != "" && c.Profile != ProfileLAN && c.Profile != ProfileLocal:
		return bad("Profile %q (want %q or %q)", c.Profile, ProfileLAN, ProfileLocal)
	case c.BindPort < 0 || c.BindPort > 65535:
		return bad("BindPort %d out of range", c.BindPort)
	case c.AdvertisePort < 0 || c.AdvertisePort > 65535:
		return bad("AdvertisePort %d out of range", c.AdvertisePort)
	case c.ProbeInterval < 0 || c.ProbeTimeout < 0 || c.GossipInterval < 0 || c.TCPTimeout < 0:
		return bad("negative interval or timeout")
	case c.SuspicionMult < 0:
		return bad("SuspicionMult %d is negative", c.SuspicionMult)
	case c.JoinBackoffMin < 0 || c.JoinBackoffMax < 0:
		return bad("negative join backoff")
	case c.ReconnectTimeout < 0:
		return bad("ReconnectTimeout %v is negative", c.ReconnectTimeout)
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return bad("GRPCAddr %q: %v", c.GRPCAddr, err)
	}
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return bad("SecretKey is %d bytes (want 16, 24 or 32)", n)
	}
	if len(c.SecondaryKeys) > 0 && len(c.SecretKey) == 0 {
		return bad("SecondaryKeys without a SecretKey")
	}
	for i, k := range c.SecondaryKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return bad("SecondaryKeys[%d] is %d bytes (want 16, 24 or 32)", i, n)
		}
	}
	if n := len(encodeWireMeta(wireMeta{V: metaVersion, GRPC: c.GRPCAddr, Leaving: true, Inc: c.Incarnation})); n > memberlist.MetaMaxSize {
		return bad("GRPCAddr too long: metadata is %d bytes, at most %d", n, memberlist.MetaMaxSize)
	}
	return nil
}

// memberlistConfig builds memberlist's configuration for c, with d as its
// delegate and event delegate. c must be valid.
func (c ClusterConfig) memberlistConfig(d *delegate, logger *slog.Logger) (*memberlist.Config, error) {
	var mc *memberlist.Config
	var p ClusterConfig // the profile's knobs
	if c.Profile == ProfileLocal {
		mc = memberlist.DefaultLocalConfig()
		p = ClusterConfig{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 50 * time.Millisecond, TCPTimeout: time.Second}
	} else {
		mc = memberlist.DefaultLANConfig()
		p = ClusterConfig{ProbeInterval: 250 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 100 * time.Millisecond, TCPTimeout: 5 * time.Second}
	}
	// Every member should hear of a change from gossip, not from the next
	// push/pull: a broadcast is sent RetransmitMult*ceil(log10(N+1)) times in
	// all, and with memberlist's local value, 2, a member of a four-node
	// cluster missed a join a few times in a hundred.
	mc.RetransmitMult = 4
	// The full state exchange that repairs whatever gossip missed: lan 15s
	// (memberlist: 30s), local 5s (memberlist: 15s); cheap below hundreds of
	// members.
	if c.Profile == ProfileLocal {
		mc.PushPullInterval = 5 * time.Second
	} else {
		mc.PushPullInterval = 15 * time.Second
	}
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort // memberlist sets both when BindPort is 0
	}
	mc.ProbeInterval = orDuration(c.ProbeInterval, p.ProbeInterval)
	mc.ProbeTimeout = orDuration(c.ProbeTimeout, p.ProbeTimeout)
	mc.SuspicionMult = orInt(c.SuspicionMult, p.SuspicionMult)
	mc.GossipInterval = orDuration(c.GossipInterval, p.GossipInterval)
	mc.TCPTimeout = orDuration(c.TCPTimeout, p.TCPTimeout)
	if len(c.SecretKey) > 0 {
		mc.SecretKey = append([]byte(nil), c.SecretKey...)
		var others [][]byte
		for _, k := range c.SecondaryKeys {
			others = append(others, append([]byte(nil), k...))
		}
		kr, err := memberlist.NewKeyring(others, mc.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("%w: SecretKey: %v", ErrInvalidConfig, err)
		}
		mc.Keyring = kr
	}
	// A member declared dead may come back at another address at once (a
	// replaced pod, a restart on a new port): memberlist's default, 0,
	// keeps the dead member's address until it forgets the member
	// (GossipToTheDeadTime, 15 to 30s), refusing the new one meanwhile,
	// while the newcomer believes it joined and owns the name's keys beside
	// the members that took them over. A live or suspect holder of the name
	// still refuses the newcomer (delegate.NotifyMerge).
	mc.DeadNodeReclaimTime = time.Nanosecond
	mc.Delegate = d
	mc.Events = d
	mc.Conflict = d
	mc.Merge = d
	mc.LogOutput = nil
	mc.Logger = log.New(&logWriter{l: logger}, "", 0)
	if c.wrapTransport != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("peer: creating memberlist's transport: %w", err)
		}
		if mc.BindPort == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
		mc.Transport = c.wrapTransport(nt)
	}
	if c.tuneMemberlist != nil {
		c.tuneMemberlist(mc)
	}
	return mc, nil
}

// reconnectInterval and reconnectTimeout return the reconnect knobs, or
// their profile values (both profiles: 2s and 10m). A negative interval is
// returned as is: reconnection is off.
func (c ClusterConfig) reconnectInterval() time.Duration {
	if c.ReconnectInterval != 0 {
		return c.ReconnectInterval
	}
	return 2 * time.Second
}

func (c ClusterConfig) reconnectTimeout() time.Duration {
	return orDuration(c.ReconnectTimeout, 10*time.Minute)
}

func orDuration(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// discardLogger returns l, or a logger that discards everything when l is nil.
func discardLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
