package sim

import "testing"

// TestRestartedOwnerGetsMissedHandoff replays, in leased mode with policy
// fail-closed, the fault checker's minimal schedule of seed 235: 5 nodes,
// k2's next owner n3 restarted at 10.634 s (down 1.711 s), n2, k2's
// owner, leaving at 11.778 s while n3 is down. n2's hand-off of k2 to n3
// went unanswered; at n3's restart n2 did not send it again ahead of its
// answers (sync's resendHandoffs sends again to a new incarnation only,
// one greater than the last seen), because the simulator drew each life's
// incarnation at random and n3's new one was the smaller. n3, told of
// n2's leave by a forward's answer, decided k2 on a fresh bucket from
// 12.565 s until the hand-off came by its retry at 12.781 s, and lost its
// admission in the merge: +0.97 over the envelope. A later life now has a
// greater incarnation, as a real node's start time in nanoseconds.
func TestRestartedOwnerGetsMissedHandoff(t *testing.T) {
	checkSchedule(t, DefaultCheckSpec(), CheckModes()[1], `{"seed":235,"nodes":5,"detect":"2.991550992s","faults":[{"at":"10.634s","kind":"restart","node":"owner","for":"1.711s"},{"at":"11.778s","kind":"leave","node":"n2"}]}`)
}
