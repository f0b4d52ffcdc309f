package ringlimit

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/peer"
)

// TestGossipConfigReachesGossip: every field of Config.Gossip arrives in
// the cluster's configuration; a field added to GossipConfig without a
// check here fails the test, so none can be left unwired.
func TestGossipConfigReachesGossip(t *testing.T) {
	c := DefaultConfig()
	c.Name = "n1"
	key, key2 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 32)
	c.Gossip = GossipConfig{
		Addr: "10.1.2.3:7001", AdvertiseAddr: "10.9.9.9:7002", Seeds: []string{"s1:7946", "s2:7946"},
		Profile: GossipLocal, ReconnectInterval: 7 * time.Second, ReconnectTimeout: 9 * time.Minute,
		ProbeInterval: 3 * time.Second, ProbeTimeout: 1500 * time.Millisecond, SuspicionMult: 5,
		Key: key, SecondaryKeys: [][]byte{key2},
	}
	cc := (&Node{cfg: c}).clusterConfig()
	checks := map[string]bool{
		"Addr":              cc.BindAddr == "10.1.2.3" && cc.BindPort == 7001,
		"AdvertiseAddr":     cc.AdvertiseAddr == "10.9.9.9" && cc.AdvertisePort == 7002,
		"Seeds":             slices.Equal(cc.Seeds, c.Gossip.Seeds),
		"Profile":           cc.Profile == peer.ProfileLocal,
		"ReconnectInterval": cc.ReconnectInterval == 7*time.Second,
		"ReconnectTimeout":  cc.ReconnectTimeout == 9*time.Minute,
		"ProbeInterval":     cc.ProbeInterval == 3*time.Second,
		"ProbeTimeout":      cc.ProbeTimeout == 1500*time.Millisecond,
		"SuspicionMult":     cc.SuspicionMult == 5,
		"Key":               bytes.Equal(cc.SecretKey, key),
		"SecondaryKeys":     len(cc.SecondaryKeys) == 1 && bytes.Equal(cc.SecondaryKeys[0], key2),
	}
	requireEveryField(t, reflect.TypeFor[GossipConfig](), checks)
	if cc.Name != "n1" {
		t.Errorf("gossip name %q, want n1", cc.Name)
	}
}

// TestPeerRPCTimeoutReachesTheLinks: Peer.RPCTimeout bounds the links'
// calls; zero leaves the transport's default.
func TestPeerRPCTimeoutReachesTheLinks(t *testing.T) {
	c := DefaultConfig()
	if got, want := (&Node{cfg: c}).transportConfig().RPCTimeout, peer.DefaultTransportConfig().RPCTimeout; got != want {
		t.Errorf("zero Peer.RPCTimeout: links' RPCTimeout %v, want the default %v", got, want)
	}
	c.Peer.RPCTimeout = 7 * time.Second
	if got := (&Node{cfg: c}).transportConfig().RPCTimeout; got != 7*time.Second {
		t.Errorf("Peer.RPCTimeout 7s: links' RPCTimeout %v", got)
	}
}

// TestAPIConfigReachesTheAPI: the fields of Config.API that configure
// package api arrive there.
func TestAPIConfigReachesTheAPI(t *testing.T) {
	c := DefaultConfig()
	c.Name = "n2"
	c.API.MaxKeyLen, c.API.MaxBatchItems, c.API.MaxBodyBytes = 77, 88, 99
	c.API.GRPCRulesOnly, c.API.HTTPRulesOnly = true, true
	ac := c.apiConfig()
	if ac.Node != "n2" || ac.MaxKeyLen != 77 || ac.MaxBatchItems != 88 || ac.MaxBodyBytes != 99 || !ac.GRPCRulesOnly || !ac.HTTPRulesOnly {
		t.Errorf("api config %+v; want Node n2, MaxKeyLen 77, MaxBatchItems 88, MaxBodyBytes 99, both rules-only", ac)
	}
}

// requireEveryField fails t for each field of typ without a check, and for
// each check that does not hold.
func requireEveryField(t *testing.T, typ reflect.Type, checks map[string]bool) {
	t.Helper()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		ok, checked := checks[name]
		switch {
		case !checked:
			t.Errorf("%s.%s has no check: wire it to its component and check it here", typ.Name(), name)
		case !ok:
			t.Errorf("%s.%s does not reach its component", typ.Name(), name)
		}
	}
}
