package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/client"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// TestEnumsMatchTheWire pins the client's enumerations to the wire's
// numbers and to the names the node's JSON API and flags use.
func TestEnumsMatchTheWire(t *testing.T) {
	for v, wire := range ringlimitv1.Algorithm_name {
		a := client.Algorithm(v)
		if v == 0 {
			if a != client.AlgorithmDefault {
				t.Errorf("algorithm 0 is %v, want default", a)
			}
			continue
		}
		if want := "ALGORITHM_" + strings.ToUpper(a.String()); wire != want {
			t.Errorf("algorithm %d: wire %s, client %s", v, wire, a)
		}
		if got := bucket.Algorithm(v).String(); got != a.String() {
			t.Errorf("algorithm %d: bucket %s, client %s", v, got, a)
		}
	}
	for v, wire := range ringlimitv1.Mode_name {
		m := client.Mode(v)
		if want := "MODE_" + strings.ToUpper(m.String()); wire != want {
			t.Errorf("mode %d: wire %s, client %s", v, wire, m)
		}
		if got := rlsync.Mode(v).String(); got != m.String() {
			t.Errorf("mode %d: sync %s, client %s", v, got, m)
		}
	}
	for v, wire := range ringlimitv1.Policy_name {
		p := client.Policy(v)
		if want := "POLICY_" + strings.ToUpper(strings.ReplaceAll(p.String(), "-", "_")); wire != want {
			t.Errorf("policy %d: wire %s, client %s", v, wire, p)
		}
		if got := rlsync.Policy(v).String(); got != p.String() {
			t.Errorf("policy %d: sync %s, client %s", v, got, p)
		}
	}
	for v, wire := range ringlimitv1.Status_name {
		if want := "STATUS_" + strings.ToUpper(client.Status(v).String()); wire != want {
			t.Errorf("status %d: wire %s, client %s", v, wire, client.Status(v))
		}
	}
	if n := len(ringlimitv1.Algorithm_name); client.Algorithm(n).String() != "algorithm(11)" {
		t.Errorf("out of range: %s", client.Algorithm(n))
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		parse   func(string) (int32, error)
		want    int32
		wantErr bool
	}{
		{"", parseAlgorithm, int32(client.AlgorithmDefault), false},
		{"default", parseAlgorithm, int32(client.AlgorithmDefault), false},
		{"gcra", parseAlgorithm, int32(client.GCRA), false},
		{"smooth_warming_up", parseAlgorithm, int32(client.SmoothWarmingUp), false},
		{"GCRA", parseAlgorithm, 0, true},
		{"leaky-queue", parseAlgorithm, 0, true},
		{"owner", parseMode, int32(client.ModeOwner), false},
		{"", parseMode, int32(client.ModeDefault), false},
		{"exact", parseMode, 0, true},
		{"fail-closed", parsePolicy, int32(client.FailClosed), false},
		{"fail_closed", parsePolicy, 0, true},
	} {
		got, err := tc.parse(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, client.ErrUnknownName)) {
			t.Errorf("parse(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func parseAlgorithm(s string) (int32, error) {
	v, err := client.ParseAlgorithm(s)
	return int32(v), err
}
func parseMode(s string) (int32, error)   { v, err := client.ParseMode(s); return int32(v), err }
func parsePolicy(s string) (int32, error) { v, err := client.ParsePolicy(s); return int32(v), err }
