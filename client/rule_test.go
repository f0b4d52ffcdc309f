package client_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

func TestRuleIsSentAndRegistered(t *testing.T) {
	f := &fakeNode{name: "n1"}
	c := newClient(t, []string{serveFake(t, f, nil)},
		client.WithLimit(client.Item{Rule: "edge/remote_address", Mode: check.ModeOwner}))
	if _, err := c.Check(t.Context(), client.Item{Rule: "api/per_user", Key: "alice", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	ok, err := c.Allow(t.Context(), "edge/remote_address", "203.0.113.7")
	if !ok || err != nil {
		t.Fatalf("Allow by rule = %v, %v; want true, nil", ok, err)
	}
	want := []*ringlimitv1.CheckItem{
		{Rule: "api/per_user", UniqueKey: "alice", Hits: proto.Int64(1)},
		{Rule: "edge/remote_address", UniqueKey: "203.0.113.7", Hits: proto.Int64(1), Mode: ringlimitv1.Mode_MODE_OWNER},
	}
	reqs := f.requests()
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d", len(reqs), len(want))
	}
	for i, w := range want {
		if len(reqs[i].Items) != 1 || !proto.Equal(reqs[i].Items[0], w) {
			t.Errorf("request %d: got %v, want %v", i, reqs[i].Items, w)
		}
	}
}
