package peer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// joinFailures is a slog.Handler that counts a Cluster's failed attempts to
// join its seeds.
type joinFailures struct{ n atomic.Int32 }

func (h *joinFailures) Enabled(context.Context, slog.Level) bool { return true }
func (h *joinFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "could not join any seed; retrying" {
		h.n.Add(1)
	}
	return nil
}
func (h *joinFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *joinFailures) WithGroup(string) slog.Handler      { return h }

// TestClusterGossipKeys: a node joins an encrypted cluster only with a key
// the members use, and each phase of a key rotation (install the new key,
// use it, remove the old one) keeps nodes of the neighbouring phases
// together, while skipping a phase splits them.
func TestClusterGossipKeys(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210fedcba98") // AES-128 and AES-192
	tests := []struct {
		name     string
		seed     [][]byte // the seed's keys, primary first; nil is plain text
		joiner   [][]byte
		wantJoin bool
	}{
		{"same key", [][]byte{k1}, [][]byte{k1}, true},
		{"wrong key", [][]byte{k1}, [][]byte{k2}, false},
		{"plain text to an encrypted cluster", [][]byte{k1}, nil, false},
		{"encrypted to a plain-text cluster", nil, [][]byte{k1}, false},
		{"rotation 1: new key installed on one side", [][]byte{k1}, [][]byte{k1, k2}, true},
		{"rotation 2: new key primary on one side", [][]byte{k1, k2}, [][]byte{k2, k1}, true},
		{"rotation 3: old key removed on one side", [][]byte{k2, k1}, [][]byte{k2}, true},
		{"rotation 2 before 1 was done everywhere", [][]byte{k1}, [][]byte{k2, k1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := func(ks [][]byte) func(*ClusterConfig) {
				return func(c *ClusterConfig) {
					if len(ks) > 0 {
						c.SecretKey, c.SecondaryKeys = ks[0], ks[1:]
					}
				}
			}
			a := startNode(t, "a", keys(tt.seed))
			fails := &joinFailures{}
			b := startNode(t, "b", func(c *ClusterConfig) {
				keys(tt.joiner)(c)
				c.JoinBackoffMin, c.JoinBackoffMax = 20*time.Millisecond, 20*time.Millisecond
				c.Logger = slog.New(fails)
			}, a.GossipAddr())
			nodes := []*testNode{a, b}
			if tt.wantJoin {
				waitFor(t, 10*time.Second, "a and b agree", agree(nodes, "a", "b"), describe(nodes))
				return
			}
			waitFor(t, 10*time.Second, "b fails to join three times", func() bool { return fails.n.Load() >= 3 })
			if b.Ready() {
				t.Errorf("b: Ready() = true, want false: it never joined")
			}
			if got := Names(a.Members()); !slices.Equal(got, []string{"a"}) {
				t.Errorf("a's members %v, want [a]", got)
			}
			if got := Names(b.Members()); !slices.Equal(got, []string{"b"}) {
				t.Errorf("b's members %v, want [b]", got)
			}
		})
	}
}

func TestClusterConfigGossipKeys(t *testing.T) {
	k := []byte("0123456789abcdef")
	for _, tt := range []struct {
		name    string
		primary []byte
		others  [][]byte
		ok      bool
	}{
		{"primary and secondary", k, [][]byte{make([]byte, 32)}, true},
		{"secondary without primary", nil, [][]byte{k}, false},
		{"secondary of a bad size", k, [][]byte{make([]byte, 20)}, false},
	} {
		c := LocalClusterConfig()
		c.Name, c.GRPCAddr = "a", "127.0.0.1:1"
		c.SecretKey, c.SecondaryKeys = tt.primary, tt.others
		if err := c.Validate(); (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%s: Validate() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}
