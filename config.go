package ringlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/api"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Gossip profiles accepted by Config.Gossip.Profile.
const (
	// GossipLAN is memberlist's LAN configuration: nodes on one network.
	GossipLAN = "lan"
	// GossipLocal is tuned for nodes on one host (loopback): short probe
	// intervals and timeouts, so failures are detected in about a second.
	GossipLocal = "local"
)

// Config configures a Node, grouped by component: the public API
// (API), gossip membership (Gossip), the links between nodes (Peer), the
// coordination core (Sync), the rules and the front ends that read them
// (Rules), and the graceful stop (Shutdown). Start from DefaultConfig,
// which documents every default; the zero Config is not valid. No field
// of one component is overwritten from another: where the node derives a
// value (the core's name and key bound), Validate refuses a different one.
type Config struct {
	// Name is the node's name in the cluster: its memberlist name and its
	// name on the ring. It must be unique in the cluster and should be stable
	// across restarts (keys are placed by name, not by address). It is
	// valid UTF-8 with no control characters (the core keeps names of its
	// own, such as the holder of folded lease grants, that begin with one).
	// Default: the host name.
	Name string

	// API configures the public gRPC and HTTP APIs: addresses, TLS, limits
	// and timeouts.
	API APIConfig
	// Gossip configures membership: memberlist's address, seeds, profile
	// and encryption.
	Gossip GossipConfig
	// Peer configures the traffic between nodes: its port and how the peers
	// authenticate each other.
	Peer PeerConfig
	// Sync configures the coordination core: default consistency mode and
	// partition policy, tick, flush interval, forward window, batch sizes,
	// timeouts. Two of its fields belong to the node and are left zero:
	// Sync.Self is Name, and Sync.MaxKeyLen is API.MaxKeyLen plus the 3 bytes
	// of the key's separator and algorithm tag; Validate refuses any other
	// value rather than overwrite it. Sync.Incarnation, when zero, is set by
	// Start from the clock (the start time in nanoseconds), so a restarted
	// node is told from its old self. Default rlsync.DefaultConfig() with
	// Self and MaxKeyLen zero.
	Sync rlsync.Config
	// Rules configures the rules file and the front ends that read it
	// (Envoy's rate limit service, nginx's auth_request endpoint).
	Rules RulesConfig
	// Shutdown bounds the steps of a graceful Shutdown.
	Shutdown ShutdownConfig
	// Sidecar enforces the sidecar profile: the public gRPC and HTTP APIs
	// must bind to a loopback address, so only the application beside the
	// node can call it, and peers must be given Peer.Addr when gossip binds
	// beyond loopback. Default false (the defaults bind everything to
	// 127.0.0.1 anyway).
	Sidecar bool

	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registry receives the node's Prometheus metrics and is served at
	// GET /metrics. Default: a new registry of the node's own (never the
	// global one, so several nodes can run in one process).
	Registry *prometheus.Registry
	// Clock is the time source. Default: the system clock.
	Clock Clock
}

// APIConfig configures the public gRPC and HTTP APIs (package api and their
// servers).
type APIConfig struct {
	// GRPCAddr is the host:port the public gRPC server listens on: the
	// RateLimiter service and Envoy's rate limit service. The peer service
	// never shares it (Peer.Addr). Port 0 picks a free port; Node.GRPCAddr
	// reports the bound address. Default 127.0.0.1:7101.
	GRPCAddr string
	// HTTPAddr is the host:port of the HTTP/JSON API, health and metrics.
	// Empty disables HTTP. Default 127.0.0.1:8101.
	HTTPAddr string
	// TLS enables TLS on the public gRPC and HTTP APIs (health and metrics
	// included), optionally requiring client certificates. Default off.
	TLS TLSFiles
	// MaxKeyLen bounds len(name) + len(unique_key) of an item, in bytes.
	// Default 1024.
	MaxKeyLen int
	// MaxBatchItems bounds the items of one public Check call; a larger call
	// is rejected as a whole. Default 1000.
	MaxBatchItems int
	// MaxBodyBytes bounds an HTTP request body; a larger one gets 413.
	// Default 1 MiB (1000 items of ordinary size fit easily).
	MaxBodyBytes int64
	// MaxRecvMsgBytes bounds one gRPC message received, public or peer.
	// Default 4 MiB (gRPC's own default).
	MaxRecvMsgBytes int
	// MaxConcurrentStreams bounds concurrent gRPC calls per connection.
	// Default 1024.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds the request headers of the HTTP server and of
	// the gRPC servers (their HTTP/2 header list). Default 64 KiB.
	MaxHeaderBytes int
	// MaxConnectionAge is how long a gRPC connection lives before the
	// server asks the client to reconnect (GOAWAY), then closes it after
	// CheckTimeout more for the calls in flight. It spreads long-lived
	// clients over nodes that joined since, and bounds how long one
	// connection can hold a stream open by sending slowly. Default 30m.
	MaxConnectionAge time.Duration
	// CheckTimeout bounds how long one Check waits for its answers when the
	// caller's deadline is later or absent. The core answers by the partition
	// policy after Sync.RequestTimeout, so this is a backstop. Default 2s.
	CheckTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// HTTP server's timeouts. Defaults 5s, 10s, 10s and 2m. ReadHeaderTimeout
	// also bounds a gRPC connection's handshake (TLS and HTTP/2), and
	// IdleTimeout how long a gRPC connection with no call stays open.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// GRPCRulesOnly makes the public gRPC API take only checks that name a
	// rule (the rule field, or a rule's name as the name): a check that
	// chooses its own limit is answered with an error. For listeners that
	// untrusted callers reach, which must not choose their limits. The
	// embedding API (Node.Check) is not a listener and is not bound by it.
	// Default false.
	GRPCRulesOnly bool
	// HTTPRulesOnly is GRPCRulesOnly for POST /v1/check. Default false.
	HTTPRulesOnly bool
	// Pprof serves Go's profiler at /debug/pprof/ on the HTTP port. Expose
	// it only where the HTTP port is private. Default false.
	Pprof bool
}

// GossipConfig configures membership by gossip (package peer over
// hashicorp/memberlist).
type GossipConfig struct {
	// Addr is the host:port memberlist binds (TCP and UDP). Port 0
	// picks a free port. Default 127.0.0.1:7946 (memberlist's port).
	Addr string
	// AdvertiseAddr, when set, is the host:port other nodes use to
	// reach this node's gossip (behind NAT, in containers). Default: derived
	// from Addr.
	AdvertiseAddr string
	// Seeds are gossip addresses (host:port) of nodes to join through. Empty
	// starts a new cluster. Unreachable seeds are retried in the background.
	Seeds []string
	// Profile is GossipLAN or GossipLocal. Default GossipLAN.
	Profile string
	// ReconnectInterval is how often a node joins again the seeds and
	// failed members missing from its membership, so that a partition heals
	// (peer.ClusterConfig.ReconnectInterval). Zero is the profile's value
	// (2s); negative turns reconnection off.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is tried again
	// (peer.ClusterConfig.ReconnectTimeout). Zero is the profile's value
	// (10m).
	ReconnectTimeout time.Duration
	// ProbeInterval, ProbeTimeout and SuspicionMult tune failure detection
	// (peer.ClusterConfig's fields of these names, which say what each
	// does). Zero is the profile's value (local: 200ms, 100ms, 2; lan:
	// 250ms, 100ms, 2). Many nodes sharing few cores (tens of nodes in one
	// process) need longer ones: a node starved of CPU answers probes late,
	// is suspected and declared dead though alive, and the membership
	// churns instead of settling (TestSidecarScaleRarelySeenKeys). Longer
	// values detect a crash later.
	ProbeInterval, ProbeTimeout time.Duration
	SuspicionMult               int
	// Key, when set, encrypts gossip with this AES key (16, 24 or 32
	// bytes); every member must have it. Default none: gossip in clear text,
	// acceptable only on a private network (docs/security.md).
	Key []byte
	// SecondaryKeys are further gossip keys this node accepts but does
	// not send with, for rotating Key by rolling restarts
	// (docs/security.md). They need a Key. Default none.
	SecondaryKeys [][]byte
}

// PeerConfig configures the traffic between nodes: the peer service's port
// and the peers' authentication (docs/security.md).
type PeerConfig struct {
	// Addr is the host:port of the peer service's own gRPC server (the
	// traffic between nodes), which the node advertises to its peers in
	// gossip (an unspecified host, 0.0.0.0 or "", is advertised as the
	// node's gossip IP). The public gRPC port never serves it: public
	// clients and peers are kept apart, each port with its own trust. Port
	// 0 picks a free port; Node.PeerAddr reports the bound address. Default
	// empty: API.GRPCAddr's host, port 0.
	Addr string
	// Secret is the cluster's shared secret (at least 16 bytes; 32
	// random bytes are best) from which the peers authenticate each other
	// when TLS is off: it derives a certificate authority every member
	// holds (peer.SecretTLS), so the peer port speaks mutual TLS and every
	// envelope's sender is the name in its connection's certificate.
	// Default none: the secret is derived from Gossip.Key (and
	// Gossip.SecondaryKeys, for rotations) when there is one. With neither a
	// secret, a gossip key nor TLS, Start fails unless Insecure is
	// set (docs/security.md).
	Secret []byte
	// Insecure runs the peer port in plain text, believing the sender
	// each envelope names: anyone who reaches the port can then move any
	// limit. For tests and throwaway clusters on loopback only; the node
	// logs a warning at start and /v1/cluster shows it. It cannot be
	// combined with TLS or Secret. Default false.
	Insecure bool
	// TLS enables mutual TLS on Addr: every node presents a
	// certificate of the cluster's peer CA that names it, and accepts only
	// such peers (peer.MutualTLS states the rule). The node's Name must then
	// be a DNS name. Default off.
	TLS PeerTLSFiles
	// RPCTimeout bounds every call to a peer, connection and TLS handshake
	// included: a call that misses it drops its batch and the peer counts
	// as unreachable for a while, so its keys go by the partition policy.
	// Zero is the default, 1s (a LAN round trip is under a millisecond).
	// Raise it where
	// a node may be starved of CPU for longer, as when tens of nodes share
	// a few cores and all handshake at once at start.
	RPCTimeout time.Duration
}

// RulesConfig configures the rules file (package rules) and the front ends
// that serve it: Envoy's rate limit service and nginx's auth_request
// endpoint (docs/rules.md, docs/envoy.md, docs/middleware.md).
type RulesConfig struct {
	// Path is a rules file, or a directory of *.yaml and *.yml rules
	// files, in the shape of Lyft's ratelimit configuration
	// (docs/rules.md). The rules serve Envoy's rate limit service on the
	// gRPC port, nginx's auth_request endpoint /v1/nginx/auth on the HTTP
	// port, and the rule field of public checks. Start fails when they are
	// invalid, naming each problem's file and line. They are reloaded on
	// ReloadRules (SIGHUP in cmd/node) and when the files change; an invalid
	// reload is logged and the rules in force stay. Default empty: no rules.
	Path string
	// PollInterval is how often the rules files are read to see
	// whether their content changed (a SHA-256 of their names and bytes, so
	// an edit that keeps the size and the time is not missed). Zero
	// disables polling: reload with ReloadRules only. Default 5s: a change
	// takes effect within seconds, and reading a few small files that often
	// costs nothing measurable.
	PollInterval time.Duration
	// Ticker, if set, returns the channel that paces the polling of the
	// rules files and a function that stops it, in place of a
	// time.NewTicker(d). Tests pass a channel they feed.
	Ticker func(d time.Duration) (<-chan time.Time, func())
	// EnvoyHeaders makes the Envoy rate limit service add the
	// x-ratelimit-limit, -remaining and -reset headers (and retry-after when
	// over) to its answers, as Lyft's LIMIT_RESPONSE_HEADERS_ENABLED does
	// (docs/envoy.md). Default false: Envoy computes them itself with
	// enable_x_ratelimit_headers.
	EnvoyHeaders bool
	// EnvoyAllowBadKeys answers OK for an Envoy descriptor whose key cannot
	// be formed (no entries, an entry without a key, a key longer than
	// API.MaxKeyLen allows). Default false: OVER_LIMIT for that descriptor (an
	// error would be turned into "allow" by Envoy's default failure mode).
	// Counted and logged as NginxAllowBadKeys.
	EnvoyAllowBadKeys bool
	// NginxRule is the rule that the nginx auth_request endpoint
	// (/v1/nginx/auth) checks every subrequest against. Empty: the rule is
	// named per request by the NginxRuleHeader header, which the nginx
	// configuration sets per location (docs/middleware.md). It needs
	// Path. Default empty.
	NginxRule string
	// NginxRuleHeader names the header that names the rule of an
	// auth_request subrequest when NginxRule is empty. nginx must always set
	// it (proxy_set_header): the subrequest carries the client's own
	// headers. Default "X-Ringlimit-Rule".
	NginxRuleHeader string
	// NginxKeyHeader names the header that carries the client key of an
	// auth_request subrequest. nginx must always set it (proxy_set_header
	// X-Real-IP $remote_addr), for the same reason. Default "X-Real-IP".
	NginxKeyHeader string
	// NginxAllowBadKeys lets through (204) an auth_request subrequest whose
	// client key cannot be formed: missing, longer than API.MaxKeyLen, not
	// UTF-8. Default false: 403 Forbidden, which nginx passes on as such.
	// Either way it is counted (ringlimit_bad_keys_total{front="nginx"})
	// and logged at most once a second.
	NginxAllowBadKeys bool
	// NginxFailClosed makes the auth_request endpoint answer 503 when a
	// check fails (an unknown rule, the cluster unable to answer) instead of
	// 204 (fail open). A subrequest without a usable key is decided by
	// NginxAllowBadKeys instead. Default false.
	NginxFailClosed bool
}

// ShutdownConfig bounds the steps of a graceful Shutdown.
type ShutdownConfig struct {
	// HandoffTimeout bounds how long Shutdown waits for owned keys to be
	// handed to their next owners. Default 5s.
	HandoffTimeout time.Duration
	// LeaveTimeout bounds how long Shutdown waits for the gossip leave
	// message to spread. Default 2s.
	LeaveTimeout time.Duration
}

// Clock tells the time. Tests replace it; the node reads it once per
// request and once per tick.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultConfig returns the defaults documented on each field of Config.
func DefaultConfig() Config {
	return Config{
		API: APIConfig{
			GRPCAddr:             "127.0.0.1:7101",
			HTTPAddr:             "127.0.0.1:8101",
			MaxKeyLen:            1024,
			MaxBatchItems:        1000,
			MaxBodyBytes:         1 << 20,
			MaxRecvMsgBytes:      4 << 20,
			MaxConcurrentStreams: 1024,
			MaxHeaderBytes:       64 << 10,
			MaxConnectionAge:     30 * time.Minute,
			CheckTimeout:         2 * time.Second,
			ReadHeaderTimeout:    5 * time.Second,
			ReadTimeout:          10 * time.Second,
			WriteTimeout:         10 * time.Second,
			IdleTimeout:          2 * time.Minute,
		},
		Gossip: GossipConfig{
			Addr:    "127.0.0.1:7946",
			Profile: GossipLAN,
		},
		Sync: defaultSyncConfig(),
		Rules: RulesConfig{
			PollInterval:    5 * time.Second,
			NginxRuleHeader: "X-Ringlimit-Rule",
			NginxKeyHeader:  "X-Real-IP",
		},
		Shutdown: ShutdownConfig{
			HandoffTimeout: 5 * time.Second,
			LeaveTimeout:   2 * time.Second,
		},
	}
}

// defaultSyncConfig is the core's default with the fields the node derives
// (Self, MaxKeyLen) left zero.
func defaultSyncConfig() rlsync.Config {
	s := rlsync.DefaultConfig()
	s.Self, s.MaxKeyLen = "", 0
	return s
}

// ErrConfig is wrapped by every error of Config.Validate.
var ErrConfig = errors.New("ringlimit: invalid config")

func configErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// Validate reports the first invalid field. A missing Name is not an error:
// Start fills in the host name.
func (c Config) Validate() error {
	if !utf8.ValidString(c.Name) || strings.ContainsFunc(c.Name, unicode.IsControl) {
		return configErr("Name", "%q must be valid UTF-8 with no control characters", c.Name)
	}
	if err := checkAddr("API.GRPCAddr", c.API.GRPCAddr, false); err != nil {
		return err
	}
	if err := checkAddr("API.HTTPAddr", c.API.HTTPAddr, true); err != nil {
		return err
	}
	if err := checkAddr("Gossip.Addr", c.Gossip.Addr, false); err != nil {
		return err
	}
	if err := checkAddr("Gossip.AdvertiseAddr", c.Gossip.AdvertiseAddr, true); err != nil {
		return err
	}
	for _, s := range c.Gossip.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return configErr("Gossip.Seeds", "%q is not host:port", s)
		}
	}
	switch c.Gossip.Profile {
	case GossipLAN, GossipLocal:
	default:
		return configErr("Gossip.Profile", "%q (want %q or %q)", c.Gossip.Profile, GossipLAN, GossipLocal)
	}
	switch len(c.Gossip.Key) {
	case 0, 16, 24, 32:
	default:
		return configErr("Gossip.Key", "%d bytes (want 16, 24 or 32)", len(c.Gossip.Key))
	}
	for i, k := range c.Gossip.SecondaryKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return configErr("Gossip.SecondaryKeys", "key %d is %d bytes (want 16, 24 or 32)", i+1, n)
		}
	}
	if len(c.Gossip.SecondaryKeys) > 0 && len(c.Gossip.Key) == 0 {
		return configErr("Gossip.SecondaryKeys", "need a Gossip.Key to send with")
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	switch {
	case c.API.MaxKeyLen <= 0:
		return configErr("API.MaxKeyLen", "must be positive")
	case c.API.MaxBatchItems <= 0:
		return configErr("API.MaxBatchItems", "must be positive")
	case c.API.MaxBodyBytes <= 0:
		return configErr("API.MaxBodyBytes", "must be positive")
	case c.API.MaxRecvMsgBytes <= 0:
		return configErr("API.MaxRecvMsgBytes", "must be positive")
	case c.API.MaxConcurrentStreams == 0:
		return configErr("API.MaxConcurrentStreams", "must be positive")
	case c.API.MaxHeaderBytes <= 0:
		return configErr("API.MaxHeaderBytes", "must be positive")
	case c.API.MaxConnectionAge <= 0:
		return configErr("API.MaxConnectionAge", "must be positive")
	case c.Gossip.ReconnectTimeout < 0:
		return configErr("Gossip.ReconnectTimeout", "%v must not be negative", c.Gossip.ReconnectTimeout)
	case c.Gossip.ProbeInterval < 0, c.Gossip.ProbeTimeout < 0, c.Gossip.SuspicionMult < 0:
		return configErr("Gossip.ProbeInterval", "ProbeInterval %v, ProbeTimeout %v, SuspicionMult %d: none may be negative",
			c.Gossip.ProbeInterval, c.Gossip.ProbeTimeout, c.Gossip.SuspicionMult)
	case c.Peer.RPCTimeout < 0:
		return configErr("Peer.RPCTimeout", "%v must not be negative", c.Peer.RPCTimeout)
	case c.API.CheckTimeout <= 0:
		return configErr("API.CheckTimeout", "must be positive")
	case c.API.ReadHeaderTimeout <= 0, c.API.ReadTimeout <= 0, c.API.WriteTimeout <= 0, c.API.IdleTimeout <= 0:
		return configErr("API.ReadHeaderTimeout, API.ReadTimeout, API.WriteTimeout, API.IdleTimeout", "must be positive")
	case c.API.CheckTimeout <= c.Sync.RequestTimeout:
		return configErr("API.CheckTimeout", "%v must be longer than Sync.RequestTimeout (%v), after which the core answers by the partition policy",
			c.API.CheckTimeout, c.Sync.RequestTimeout)
	case c.Shutdown.HandoffTimeout <= 0:
		return configErr("Shutdown.HandoffTimeout", "must be positive")
	case c.Shutdown.LeaveTimeout <= 0:
		return configErr("Shutdown.LeaveTimeout", "must be positive")
	}
	if err := c.validateRules(); err != nil {
		return err
	}
	if err := c.validateDerived(); err != nil {
		return err
	}
	s := c.syncConfig()
	if s.Self == "" {
		s.Self = "placeholder" // Start fills in the host name
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: Sync: %w", ErrConfig, err)
	}
	return nil
}

// validateDerived refuses a value in a component's configuration that the
// node derives from one of its own fields: one setting would otherwise be
// silently overwritten by the other.
func (c Config) validateDerived() error {
	if c.Sync.Self != "" && c.Sync.Self != c.Name {
		return configErr("Sync.Self", "%q differs from Name %q: the core's name is the node's Name; leave Sync.Self empty", c.Sync.Self, c.Name)
	}
	if want := c.coreMaxKeyLen(); c.Sync.MaxKeyLen != 0 && c.Sync.MaxKeyLen != want {
		return configErr("Sync.MaxKeyLen", "%d conflicts with API.MaxKeyLen %d: the core's bound is API.MaxKeyLen plus %d bytes of separator and algorithm tag (%d); leave Sync.MaxKeyLen zero and set API.MaxKeyLen",
			c.Sync.MaxKeyLen, c.API.MaxKeyLen, api.KeyOverhead, want)
	}
	return nil
}

// coreMaxKeyLen is the core's bound on a key: the API's bound on name and
// unique_key, plus the separator and the algorithm tag (bucketKey).
func (c Config) coreMaxKeyLen() int { return c.API.MaxKeyLen + api.KeyOverhead }

// syncConfig returns c.Sync with the fields the node derives filled in
// (validateDerived has refused a conflicting value).
func (c Config) syncConfig() rlsync.Config {
	s := c.Sync
	s.Self = c.Name
	s.MaxKeyLen = c.coreMaxKeyLen()
	// A node given seeds joins a cluster that may have run before it, a
	// previous life of its own among the members (sync.Config.Joining).
	s.Joining = s.Joining || c.seedsOthers()
	return s
}

// seedsOthers reports whether Gossip.Seeds names a node other than this
// one (a seed that is its own gossip address starts a new cluster).
func (c Config) seedsOthers() bool {
	for _, seed := range c.Gossip.Seeds {
		if seed != "" && seed != c.Gossip.Addr && seed != c.Gossip.AdvertiseAddr {
			return true
		}
	}
	return false
}

func checkAddr(field, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return configErr(field, "%q is not host:port", addr)
	}
	return nil
}
