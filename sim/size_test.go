package sim

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestSentSizesAreEncodedSizes: with every envelope checked (sizeCheck 1),
// the size the bytes metric counts for each envelope a node sends, read
// from the sizes protobuf cached in its parts (cachedSize), is the length
// of its encoding, in every coordinated mode, healthy and under faults
// (healthy alone under the race detector: raceCut).
func TestSentSizesAreEncodedSizes(t *testing.T) {
	t.Parallel()
	for _, name := range raceCut([]string{"healthy", "partition-half", "churn"}) {
		for _, m := range []check.Mode{check.ModeOwner, check.ModeCached, check.ModeLeased} {
			c, err := NewCluster(short(t, name), Variant{Mode: m}, 1)
			if err != nil {
				t.Fatal(err)
			}
			c.sizeCheck = 1
			if _, err := c.Run(nil); err != nil {
				t.Fatalf("%s, %v: %v", name, m, err)
			}
			var sent int64
			for _, s := range c.nodes {
				sent += s.sent
			}
			if sent == 0 {
				t.Errorf("%s, %v: no envelope sent", name, m)
			}
		}
	}
}

// TestCheckSizeCatchesAModifiedMessage: a part modified after its size was
// cached makes the cached size stale, and checkSize says so.
func TestCheckSizeCatchesAModifiedMessage(t *testing.T) {
	push := &peerv1.Push{Items: []*peerv1.KeyState{{Key: "k1", State: []byte{1, 2, 3}}}}
	env := &peerv1.Envelope{From: "n1", To: "n2", Body: &peerv1.Envelope_Push{Push: push}}
	s := &simNode{name: "n1"}
	s.checkSize(env, cachedSize.Size(env))
	if s.sizeErr != nil {
		t.Fatalf("unmodified: %v", s.sizeErr)
	}
	push.Items[0].Key = "a longer key" // after it was sized: as if sent, then modified
	stale := cachedSize.Size(env)
	if fresh := proto.Size(env); stale == fresh {
		t.Fatalf("the cached size %d follows the change: the test shows nothing", stale)
	}
	s.checkSize(env, stale)
	if s.sizeErr == nil || !strings.Contains(s.sizeErr.Error(), "modified after it was sent") {
		t.Fatalf("stale size %d: got error %v, want a modified message", stale, s.sizeErr)
	}
}
