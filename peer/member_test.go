package peer

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9001", "[::1]:9001", "node-1.example:443"} {
		b := encodeMeta(ProtocolVersion, addr, 0)
		if len(b) > memberlist.MetaMaxSize {
			t.Errorf("%s: metadata is %d bytes, more than %d", addr, len(b), memberlist.MetaMaxSize)
		}
		v, got, err := decodeMeta(b)
		if err != nil || v != ProtocolVersion || got != addr {
			t.Errorf("decodeMeta(encodeMeta(%q)) = %d, %q, %v", addr, v, got, err)
		}
	}
}

func TestDecodeMeta(t *testing.T) {
	tests := []struct {
		meta     string
		protocol int
		addr     string
		bad      bool
	}{
		{meta: `{"v":1,"grpc":"10.0.0.1:9001"}`, protocol: 1, addr: "10.0.0.1:9001"},
		{meta: `{"v":7,"grpc":"h:1","tls":"x"}`, protocol: 7, addr: "h:1"}, // a later version's fields are ignored
		{meta: ``, bad: true},
		{meta: `not json`, bad: true},
		{meta: `{"grpc":"h:1"}`, bad: true},          // no version
		{meta: `{"v":1}`, bad: true},                 // no address
		{meta: `{"v":1,"grpc":"nohost"}`, bad: true}, // no port
	}
	for _, tt := range tests {
		v, addr, err := decodeMeta([]byte(tt.meta))
		if tt.bad {
			if !errors.Is(err, errBadMeta) {
				t.Errorf("decodeMeta(%q) error = %v, want errBadMeta", tt.meta, err)
			}
			continue
		}
		if err != nil || v != tt.protocol || addr != tt.addr {
			t.Errorf("decodeMeta(%q) = %d, %q, %v; want %d, %q", tt.meta, v, addr, err, tt.protocol, tt.addr)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"grpc":"127.0.0.1:9001"}`))
	f.Add([]byte(`{"v":-1,"grpc":":"}`))
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, addr, err := decodeMeta(b)
		if err != nil {
			return
		}
		if v < 1 {
			t.Fatalf("accepted protocol %d", v)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			t.Fatalf("accepted address %q: %v", addr, err)
		}
	})
}

func TestAdvertisedGRPCAddr(t *testing.T) {
	ip := net.ParseIP("10.1.2.3")
	tests := []struct{ addr, want string }{
		{":9001", "10.1.2.3:9001"},
		{"0.0.0.0:9001", "10.1.2.3:9001"},
		{"[::]:9001", "10.1.2.3:9001"},
		{"127.0.0.1:9001", "127.0.0.1:9001"},
		{"node-1:9001", "node-1:9001"},
	}
	for _, tt := range tests {
		if got := advertisedGRPCAddr(tt.addr, ip); got != tt.want {
			t.Errorf("advertisedGRPCAddr(%q) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestParseMemberlistLine(t *testing.T) {
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1", slog.LevelDebug, "Stream connection from=127.0.0.1:1"},
		{"[INFO] memberlist: Marking b as failed", slog.LevelInfo, "Marking b as failed"},
		{"[WARN] memberlist: Was able to connect", slog.LevelWarn, "Was able to connect"},
		{"[ERR] memberlist: Failed to send", slog.LevelError, "Failed to send"},
		{"[ERR] memberlist: Failed fallback TCP ping: timeout 200ms", slog.LevelWarn, "Failed fallback TCP ping: timeout 200ms"},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7948: use of closed network connection", slog.LevelWarn,
			"Failed to send gossip to 127.0.0.1:7948: use of closed network connection"},
		{"[ERR] memberlist: Push/Pull with b failed: EOF", slog.LevelWarn, "Push/Pull with b failed: EOF"},
		{"[ERR] memberlist: Failed to decode message", slog.LevelError, "Failed to decode message"},
		{"[ERROR] something", slog.LevelError, "something"},
		{"no level", slog.LevelInfo, "no level"},
	}
	for _, tt := range tests {
		level, msg := parseMemberlistLine([]byte(tt.line))
		if level != tt.level || msg != tt.msg {
			t.Errorf("parseMemberlistLine(%q) = %v, %q; want %v, %q", tt.line, level, msg, tt.level, tt.msg)
		}
	}
}

// TestMemberlistLogsGoToSlog: memberlist's own log lines come out of the
// configured slog.Logger, not stderr.
func TestMemberlistLogsGoToSlog(t *testing.T) {
	var buf syncBuffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := startNode(t, "a", func(c *ClusterConfig) { c.Logger = l })
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "component=memberlist") || !strings.Contains(out, "node=a") {
		t.Errorf("no memberlist record in the slog output:\n%s", out)
	}
}

func TestClusterConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*ClusterConfig)
		ok   bool
	}{
		{"lan", func(*ClusterConfig) {}, true},
		{"no name", func(c *ClusterConfig) { c.Name = "" }, false},
		{"no grpc", func(c *ClusterConfig) { c.GRPCAddr = "" }, false},
		{"grpc without port", func(c *ClusterConfig) { c.GRPCAddr = "host" }, false},
		{"grpc too long", func(c *ClusterConfig) { c.GRPCAddr = strings.Repeat("h", 600) + ":1" }, false},
		{"unknown profile", func(c *ClusterConfig) { c.Profile = "wan" }, false},
		{"local profile", func(c *ClusterConfig) { c.Profile = ProfileLocal }, true},
		{"port out of range", func(c *ClusterConfig) { c.BindPort = 70000 }, false},
		{"negative probe", func(c *ClusterConfig) { c.ProbeInterval = -time.Second }, false},
		{"negative suspicion", func(c *ClusterConfig) { c.SuspicionMult = -1 }, false},
		{"aes-256 key", func(c *ClusterConfig) { c.SecretKey = make([]byte, 32) }, true},
		{"bad key length", func(c *ClusterConfig) { c.SecretKey = make([]byte, 10) }, false},
	}
	for _, tt := range tests {
		c := DefaultClusterConfig()
		c.Name, c.GRPCAddr = "a", "127.0.0.1:9001"
		tt.edit(&c)
		err := c.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if _, err := NewCluster(c, nil); (err == nil) != tt.ok {
			t.Errorf("%s: NewCluster error = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// TestProfiles pins the failure-detection tuning of each profile, and that
// explicit knobs override it.
func TestProfiles(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name                                string
		edit                                func(*ClusterConfig)
		probeInterval, probeTimeout, gossip time.Duration
		suspicionMult                       int
		tcpTimeout                          time.Duration
	}{
		{"lan", func(*ClusterConfig) {}, 250 * ms, 100 * ms, 100 * ms, 2, 5 * time.Second},
		{"local", func(c *ClusterConfig) { c.Profile = ProfileLocal }, 200 * ms, 100 * ms, 50 * ms, 2, time.Second},
		{"override", func(c *ClusterConfig) {
			c.ProbeInterval, c.ProbeTimeout, c.GossipInterval, c.SuspicionMult, c.TCPTimeout = time.Second, 500*ms, 200*ms, 4, 10*time.Second
		}, time.Second, 500 * ms, 200 * ms, 4, 10 * time.Second},
	}
	for _, tt := range tests {
		c := DefaultClusterConfig()
		c.Name, c.GRPCAddr = "a", "127.0.0.1:9001"
		tt.edit(&c)
		mc, err := c.memberlistConfig(newDelegate(slog.New(slog.DiscardHandler), "x", nil), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if mc.ProbeInterval != tt.probeInterval || mc.ProbeTimeout != tt.probeTimeout || mc.GossipInterval != tt.gossip ||
			mc.SuspicionMult != tt.suspicionMult || mc.TCPTimeout != tt.tcpTimeout {
			t.Errorf("%s: probe %v/%v gossip %v suspicion x%d tcp %v; want %v/%v %v x%d %v", tt.name,
				mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval, mc.SuspicionMult, mc.TCPTimeout,
				tt.probeInterval, tt.probeTimeout, tt.gossip, tt.suspicionMult, tt.tcpTimeout)
		}
		if mc.Name != "a" || mc.LogOutput != nil || mc.Logger == nil {
			t.Errorf("%s: name %q, LogOutput %v, Logger %v", tt.name, mc.Name, mc.LogOutput, mc.Logger)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
