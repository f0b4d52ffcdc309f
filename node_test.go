package ringlimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// TestSyncConfigChangesOnlyWhatTheNodeDerives: the core gets every field
// of Config.Sync as set, and Self and MaxKeyLen from Name and MaxKeyLen
// (Joining, set by seeds, in TestSyncConfigJoiningFromSeeds).
func TestSyncConfigChangesOnlyWhatTheNodeDerives(t *testing.T) {
	c := DefaultConfig()
	c.Name, c.API.MaxKeyLen = "n7", 200
	c.Sync.Mode, c.Sync.FlushInterval, c.Sync.RequestTimeout = check.ModeOwner, 7*time.Millisecond, 300*time.Millisecond
	c.Sync.Incarnation = 42
	got := c.syncConfig()
	if got.Self != "n7" || got.MaxKeyLen != 203 {
		t.Errorf("core Self %q, MaxKeyLen %d; want n7, 203", got.Self, got.MaxKeyLen)
	}
	got.Self, got.MaxKeyLen = c.Sync.Self, c.Sync.MaxKeyLen
	if !reflect.DeepEqual(got, c.Sync) {
		t.Errorf("the core's config differs from Config.Sync beyond Self and MaxKeyLen:\n got %+v\nwant %+v", got, c.Sync)
	}
}

// TestSyncConfigJoiningFromSeeds: a node started with seeds tells its core
// it joins a cluster that may have run before it (a restart: the state its
// previous life spent may be held by no member, sync/lostkey.go); one
// without starts a new cluster, unless Config.Sync says otherwise.
func TestSyncConfigJoiningFromSeeds(t *testing.T) {
	c := DefaultConfig()
	if c.syncConfig().Joining {
		t.Error("a node without seeds is Joining")
	}
	c.Sync.Joining = true
	if !c.syncConfig().Joining {
		t.Error("Sync.Joining set by the embedder was dropped")
	}
	c.Sync.Joining = false
	c.Gossip.Addr = "10.0.0.1:7946"
	c.Gossip.Seeds = []string{"10.0.0.1:7946"}
	if c.syncConfig().Joining {
		t.Error("a node whose only seed is itself is Joining")
	}
	c.Gossip.Seeds = []string{"10.0.0.1:7946", "10.0.0.2:7946"}
	if !c.syncConfig().Joining {
		t.Error("a node with seeds is not Joining")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"HTTP disabled", func(c *Config) { c.API.HTTPAddr = "" }, ""},
		{"no name is filled in by Start", func(c *Config) { c.Name = "" }, ""},
		{"name with a control character", func(c *Config) { c.Name = "\x00folded" }, "Name"},
		{"name not UTF-8", func(c *Config) { c.Name = "n\xff" }, "Name"},
		{"bad gRPC address", func(c *Config) { c.API.GRPCAddr = "7101" }, "GRPCAddr"},
		{"no gossip address", func(c *Config) { c.Gossip.Addr = "" }, "Gossip.Addr"},
		{"bad advertise address", func(c *Config) { c.Gossip.AdvertiseAddr = "host" }, "Gossip.AdvertiseAddr"},
		{"bad seed", func(c *Config) { c.Gossip.Seeds = []string{"10.0.0.1"} }, "Gossip.Seeds"},
		{"bad profile", func(c *Config) { c.Gossip.Profile = "wan" }, "Gossip.Profile"},
		{"bad gossip key", func(c *Config) { c.Gossip.Key = []byte("short") }, "Gossip.Key"},
		{"zero key length", func(c *Config) { c.API.MaxKeyLen = 0 }, "MaxKeyLen"},
		{"zero batch", func(c *Config) { c.API.MaxBatchItems = 0 }, "MaxBatchItems"},
		{"zero body", func(c *Config) { c.API.MaxBodyBytes = 0 }, "MaxBodyBytes"},
		{"zero timeout", func(c *Config) { c.API.WriteTimeout = 0 }, "WriteTimeout"},
		{"zero check timeout", func(c *Config) { c.API.CheckTimeout = 0 }, "CheckTimeout"},
		{"check timeout within request timeout", func(c *Config) { c.API.CheckTimeout = c.Sync.RequestTimeout }, "CheckTimeout"},
		{"bad core config", func(c *Config) { c.Sync.FlushInterval = 0 }, "Sync"},
		{"negative peer RPC timeout", func(c *Config) { c.Peer.RPCTimeout = -time.Second }, "Peer.RPCTimeout"},
		// The node derives these from its own fields: a different value is
		// refused, never silently overwritten.
		{"core name other than Name", func(c *Config) { c.Sync.Self = "other" }, "Sync.Self"},
		{"core name equal to Name", func(c *Config) { c.Sync.Self = "n" }, ""},
		{"core key bound of its own", func(c *Config) { c.Sync.MaxKeyLen = rlsync.DefaultConfig().MaxKeyLen }, "Sync.MaxKeyLen"},
		{"core key bound as derived", func(c *Config) { c.API.MaxKeyLen, c.Sync.MaxKeyLen = 100, 103 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Name = "n"
			c.Peer.Secret = testPeerSecret
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an ErrConfig naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	cfg := testConfig("bad")
	cfg.API.MaxBatchItems = -1
	if n, err := Start(t.Context(), cfg); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("Start = %v, %v; want an ErrConfig", n, err)
	}
}

func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig("clash")
	cfg.API.HTTPAddr = ln.Addr().String()
	n, err := Start(t.Context(), cfg)
	if err == nil || n != nil {
		t.Fatalf("Start = %v, %v; want an error and no node", n, err)
	}
	// goleak (TestMain) checks that nothing was left running.
}

func TestShutdownRefusesNewCallsAndIsIdempotent(t *testing.T) {
	n, err := Start(t.Context(), testConfig("short-lived"))
	if err != nil {
		t.Fatal(err)
	}
	waitMembers(t, []*Node{n}, []string{"short-lived"})
	httpAddr := n.HTTPAddr()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n.Ready() {
		t.Error("Ready after Shutdown")
	}
	_, err = n.Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item1("a", "b", 0, 0)}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Check after Shutdown: %v, want Unavailable", err)
	}
	if _, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
		t.Error("HTTP still served after Shutdown")
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close after Shutdown: %v", err)
	}
}
