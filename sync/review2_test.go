package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestFoldedGrantNotSettledByMember: a grant handed to the owner for a
// holder that is not a member of its view (zz: cut off and declared dead,
// or not seen yet) still holds the owner's bucket while zz may spend it,
// whatever another holder settles. a owns a key of 10 per 2 s (burst 10);
// b hands it a grant of 3 to b and one of 5 to zz expiring a nanosecond
// sooner. With the caps merge, zz's grant was folded into b's
// (addHandedGrant: its tokens added to the key's latest grant), so b
// settling its own grant (lease_settled) counted zz's 5 spent with it:
// the cap lifted, and 2.5 s later a admitted its full bucket of 10 while
// zz could still spend its 5, 15 in a moment for an envelope of 10 plus
// what 5 per second adds. Now a grant folded for want of a member's name
// is held by no member (foldedHolder), which no settle or spend report
// releases before its expiry.
func TestFoldedGrantNotSettledByMember(t *testing.T) {
	const ttl = 5 * time.Second
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 2 * time.Second}
	nw, a, key, req := handedOwner(t, ttl, l)
	nw.checkAnswered(a, req)
	id := nw.now.Add(ttl - 100*time.Millisecond).UnixNano()
	stepHandoffGrants(nw, "b", "a", 1,
		&peerv1.LeaseGrant{Key: key, To: "b", Id: id, Held: 3},
		&peerv1.LeaseGrant{Key: key, To: "zz", Id: id - 1, Held: 5})
	a.Step(nw.now, &peerv1.Envelope{From: "b", To: "a", Incarnation: nw.nodes["b"].cfg.Incarnation,
		Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1, Items: []*peerv1.FlushItem{
			{Key: key, Limit: limitToWire(l), LeaseSettled: id}}}}})
	nw.run(2500 * time.Millisecond)
	admitted := answeredAdmitted(nw, a, req, 20)
	t.Logf("a admitted %d at +2.5s, zz's grant of 5 live", admitted)
	if admitted > 5 {
		t.Errorf("a admitted %d at +2.5s while zz's grant of 5 was live, want at most 10 - 5: b's settle released zz's tokens", admitted)
	}
}
