package ringlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/api"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// Gossip profiles accepted by Config.GossipProfile.
const (
	// GossipLAN is memberlist's LAN configuration: nodes on one network.
	GossipLAN = "lan"
	// GossipLocal is tuned for nodes on one host (loopback): short probe
	// intervals and timeouts, so failures are detected in about a second.
	GossipLocal = "local"
)

// Config configures a Node. Start from DefaultConfig, which documents every
// default; the zero Config is not valid.
type Config struct {
	// Name is the node's name in the cluster: its memberlist name and its
	// name on the ring. It must be unique in the cluster and should be stable
	// across restarts (keys are placed by name, not by address). Default: the
	// host name.
	Name string

	// GRPCAddr is the host:port the public gRPC server listens on: the
	// RateLimiter service and Envoy's rate limit service. The peer service
	// never shares it (PeerAddr). Port 0 picks a free port; Node.GRPCAddr
	// reports the bound address. Default 127.0.0.1:7101.
	GRPCAddr string
	// HTTPAddr is the host:port of the HTTP/JSON API, health and metrics.
	// Empty disables HTTP. Default 127.0.0.1:8101.
	HTTPAddr string
	// GossipAddr is the host:port memberlist binds (TCP and UDP). Port 0
	// picks a free port. Default 127.0.0.1:7946 (memberlist's port).
	GossipAddr string
	// GossipAdvertiseAddr, when set, is the host:port other nodes use to
	// reach this node's gossip (behind NAT, in containers). Default: derived
	// from GossipAddr.
	GossipAdvertiseAddr string
	// Seeds are gossip addresses (host:port) of nodes to join through. Empty
	// starts a new cluster. Unreachable seeds are retried in the background.
	Seeds []string
	// GossipProfile is GossipLAN or GossipLocal. Default GossipLAN.
	GossipProfile string
	// GossipReconnectInterval is how often a node joins again the seeds and
	// failed members missing from its membership, so that a partition heals
	// (peer.ClusterConfig.ReconnectInterval). Zero is the profile's value
	// (2s); negative turns reconnection off.
	GossipReconnectInterval time.Duration
	// GossipReconnectTimeout is how long a failed member is tried again
	// (peer.ClusterConfig.ReconnectTimeout). Zero is the profile's value
	// (10m).
	GossipReconnectTimeout time.Duration
	// GossipKey, when set, encrypts gossip with this AES key (16, 24 or 32
	// bytes); every member must have it. Default none: gossip in clear text,
	// acceptable only on a private network (docs/security.md).
	GossipKey []byte
	// GossipSecondaryKeys are further gossip keys this node accepts but does
	// not send with, for rotating GossipKey by rolling restarts
	// (docs/security.md). They need a GossipKey. Default none.
	GossipSecondaryKeys [][]byte

	// PeerAddr is the host:port of the peer service's own gRPC server (the
	// traffic between nodes), which the node advertises to its peers in
	// gossip (an unspecified host, 0.0.0.0 or "", is advertised as the
	// node's gossip IP). The public gRPC port never serves it: public
	// clients and peers are kept apart, each port with its own trust. Port
	// 0 picks a free port; Node.PeerAddr reports the bound address. Default
	// empty: GRPCAddr's host, port 0.
	PeerAddr string
	// PeerSecret is the cluster's shared secret (at least 16 bytes; 32
	// random bytes are best) from which the peers authenticate each other
	// when PeerTLS is off: it derives a certificate authority every member
	// holds (peer.SecretTLS), so the peer port speaks mutual TLS and every
	// envelope's sender is the name in its connection's certificate.
	// Default none: the secret is derived from GossipKey (and
	// GossipSecondaryKeys, for rotations) when there is one. With neither a
	// secret, a gossip key nor PeerTLS, Start fails unless InsecurePeers is
	// set (docs/security.md).
	PeerSecret []byte
	// InsecurePeers runs the peer port in plain text, believing the sender
	// each envelope names: anyone who reaches the port can then move any
	// limit. For tests and throwaway clusters on loopback only; the node
	// logs a warning at start and /v1/cluster shows it. It cannot be
	// combined with PeerTLS or PeerSecret. Default false.
	InsecurePeers bool
	// TLS enables TLS on the public gRPC and HTTP APIs (health and metrics
	// included), optionally requiring client certificates. Default off.
	TLS TLSFiles
	// PeerTLS enables mutual TLS on PeerAddr: every node presents a
	// certificate of the cluster's peer CA that names it, and accepts only
	// such peers (peer.MutualTLS states the rule). The node's Name must then
	// be a DNS name. Default off.
	PeerTLS PeerTLSFiles
	// Sidecar enforces the sidecar profile: the public gRPC and HTTP APIs
	// must bind to a loopback address, so only the application beside the
	// node can call it, and peers must be given PeerAddr when gossip binds
	// beyond loopback. Default false (the defaults bind everything to
	// 127.0.0.1 anyway).
	Sidecar bool

	// Sync configures the coordination core: default consistency mode and
	// partition policy, tick, flush interval, forward window, batch sizes,
	// timeouts. Two of its fields belong to the node and are left zero:
	// Sync.Self is Name, and Sync.MaxKeyLen is MaxKeyLen plus the 3 bytes
	// of the key's separator and algorithm tag; Validate refuses any other
	// value rather than overwrite it. Sync.Incarnation, when zero, is set by
	// Start from the clock (the start time in nanoseconds), so a restarted
	// node is told from its old self. Default rlsync.DefaultConfig() with
	// Self and MaxKeyLen zero.
	Sync rlsync.Config

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

	// HandoffTimeout bounds how long Shutdown waits for owned keys to be
	// handed to their next owners. Default 5s.
	HandoffTimeout time.Duration
	// LeaveTimeout bounds how long Shutdown waits for the gossip leave
	// message to spread. Default 2s.
	LeaveTimeout time.Duration

	// RulesPath is a rules file, or a directory of *.yaml and *.yml rules
	// files, in the shape of Lyft's ratelimit configuration
	// (docs/rules.md). The rules serve Envoy's rate limit service on the
	// gRPC port, nginx's auth_request endpoint /v1/nginx/auth on the HTTP
	// port, and the rule field of public checks. Start fails when they are
	// invalid, naming each problem's file and line. They are reloaded on
	// ReloadRules (SIGHUP in cmd/node) and when the files change; an invalid
	// reload is logged and the rules in force stay. Default empty: no rules.
	RulesPath string
	// RulesPollInterval is how often the rules files are read to see
	// whether their content changed (a SHA-256 of their names and bytes, so
	// an edit that keeps the size and the time is not missed). Zero
	// disables polling: reload with ReloadRules only. Default 5s: a change
	// takes effect within seconds, and reading a few small files that often
	// costs nothing measurable.
	RulesPollInterval time.Duration
	// RulesTicker, if set, returns the channel that paces the polling of the
	// rules files and a function that stops it, in place of a
	// time.NewTicker(d). Tests pass a channel they feed.
	RulesTicker func(d time.Duration) (<-chan time.Time, func())
	// EnvoyHeaders makes the Envoy rate limit service add the
	// x-ratelimit-limit, -remaining and -reset headers (and retry-after when
	// over) to its answers, as Lyft's LIMIT_RESPONSE_HEADERS_ENABLED does
	// (docs/envoy.md). Default false: Envoy computes them itself with
	// enable_x_ratelimit_headers.
	EnvoyHeaders bool
	// NginxRule is the rule that the nginx auth_request endpoint
	// (/v1/nginx/auth) checks every subrequest against. Empty: the rule is
	// named per request by the NginxRuleHeader header, which the nginx
	// configuration sets per location (docs/middleware.md). It needs
	// RulesPath. Default empty.
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
	// client key cannot be formed: missing, longer than MaxKeyLen, not
	// UTF-8. Default false: 403 Forbidden, which nginx passes on as such.
	// Either way it is counted (ringlimit_bad_keys_total{front="nginx"})
	// and logged at most once a second.
	NginxAllowBadKeys bool
	// EnvoyAllowBadKeys answers OK for an Envoy descriptor whose key cannot
	// be formed (no entries, an entry without a key, a key longer than
	// MaxKeyLen allows). Default false: OVER_LIMIT for that descriptor (an
	// error would be turned into "allow" by Envoy's default failure mode).
	// Counted and logged as NginxAllowBadKeys.
	EnvoyAllowBadKeys bool
	// GRPCRulesOnly makes the public gRPC API take only checks that name a
	// rule (the rule field, or a rule's name as the name): a check that
	// chooses its own limit is answered with an error. For listeners that
	// untrusted callers reach, which must not choose their limits. The
	// embedding API (Node.Check) is not a listener and is not bound by it.
	// Default false.
	GRPCRulesOnly bool
	// HTTPRulesOnly is GRPCRulesOnly for POST /v1/check. Default false.
	HTTPRulesOnly bool
	// NginxFailClosed makes the auth_request endpoint answer 503 when a
	// check fails (an unknown rule, the cluster unable to answer) instead of
	// 204 (fail open). A subrequest without a usable key is decided by
	// NginxAllowBadKeys instead. Default false.
	NginxFailClosed bool

	// Pprof serves Go's profiler at /debug/pprof/ on the HTTP port. Expose
	// it only where the HTTP port is private. Default false.
	Pprof bool

	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registry receives the node's Prometheus metrics and is served at
	// GET /metrics. Default: a new registry of the node's own (never the
	// global one, so several nodes can run in one process).
	Registry *prometheus.Registry
	// Clock is the time source. Default: the system clock.
	Clock Clock
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
		GRPCAddr:             "127.0.0.1:7101",
		HTTPAddr:             "127.0.0.1:8101",
		GossipAddr:           "127.0.0.1:7946",
		GossipProfile:        GossipLAN,
		Sync:                 defaultSyncConfig(),
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
		HandoffTimeout:       5 * time.Second,
		LeaveTimeout:         2 * time.Second,
		RulesPollInterval:    5 * time.Second,
		NginxRuleHeader:      "X-Ringlimit-Rule",
		NginxKeyHeader:       "X-Real-IP",
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
	if err := checkAddr("GRPCAddr", c.GRPCAddr, false); err != nil {
		return err
	}
	if err := checkAddr("HTTPAddr", c.HTTPAddr, true); err != nil {
		return err
	}
	if err := checkAddr("GossipAddr", c.GossipAddr, false); err != nil {
		return err
	}
	if err := checkAddr("GossipAdvertiseAddr", c.GossipAdvertiseAddr, true); err != nil {
		return err
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return configErr("Seeds", "%q is not host:port", s)
		}
	}
	switch c.GossipProfile {
	case GossipLAN, GossipLocal:
	default:
		return configErr("GossipProfile", "%q (want %q or %q)", c.GossipProfile, GossipLAN, GossipLocal)
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		return configErr("GossipKey", "%d bytes (want 16, 24 or 32)", len(c.GossipKey))
	}
	for i, k := range c.GossipSecondaryKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return configErr("GossipSecondaryKeys", "key %d is %d bytes (want 16, 24 or 32)", i+1, n)
		}
	}
	if len(c.GossipSecondaryKeys) > 0 && len(c.GossipKey) == 0 {
		return configErr("GossipSecondaryKeys", "need a GossipKey to send with")
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	switch {
	case c.MaxKeyLen <= 0:
		return configErr("MaxKeyLen", "must be positive")
	case c.MaxBatchItems <= 0:
		return configErr("MaxBatchItems", "must be positive")
	case c.MaxBodyBytes <= 0:
		return configErr("MaxBodyBytes", "must be positive")
	case c.MaxRecvMsgBytes <= 0:
		return configErr("MaxRecvMsgBytes", "must be positive")
	case c.MaxConcurrentStreams == 0:
		return configErr("MaxConcurrentStreams", "must be positive")
	case c.MaxHeaderBytes <= 0:
		return configErr("MaxHeaderBytes", "must be positive")
	case c.MaxConnectionAge <= 0:
		return configErr("MaxConnectionAge", "must be positive")
	case c.GossipReconnectTimeout < 0:
		return configErr("GossipReconnectTimeout", "%v must not be negative", c.GossipReconnectTimeout)
	case c.CheckTimeout <= 0:
		return configErr("CheckTimeout", "must be positive")
	case c.ReadHeaderTimeout <= 0, c.ReadTimeout <= 0, c.WriteTimeout <= 0, c.IdleTimeout <= 0:
		return configErr("ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout", "must be positive")
	case c.CheckTimeout <= c.Sync.RequestTimeout:
		return configErr("CheckTimeout", "%v must be longer than Sync.RequestTimeout (%v), after which the core answers by the partition policy",
			c.CheckTimeout, c.Sync.RequestTimeout)
	case c.HandoffTimeout <= 0:
		return configErr("HandoffTimeout", "must be positive")
	case c.LeaveTimeout <= 0:
		return configErr("LeaveTimeout", "must be positive")
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
		return configErr("Sync.MaxKeyLen", "%d conflicts with MaxKeyLen %d: the core's bound is MaxKeyLen plus %d bytes of separator and algorithm tag (%d); leave Sync.MaxKeyLen zero and set MaxKeyLen",
			c.Sync.MaxKeyLen, c.MaxKeyLen, api.KeyOverhead, want)
	}
	return nil
}

// coreMaxKeyLen is the core's bound on a key: the API's bound on name and
// unique_key, plus the separator and the algorithm tag (bucketKey).
func (c Config) coreMaxKeyLen() int { return c.MaxKeyLen + api.KeyOverhead }

// syncConfig returns c.Sync with the fields the node derives filled in
// (validateDerived has refused a conflicting value).
func (c Config) syncConfig() rlsync.Config {
	s := c.Sync
	s.Self = c.Name
	s.MaxKeyLen = c.coreMaxKeyLen()
	return s
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
