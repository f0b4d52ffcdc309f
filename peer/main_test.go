package peer

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor polls cond every few milliseconds until it holds or within passes,
// then fails the test with what and the states. Only the real-network tests
// use it: they wait on a condition, never for a fixed time.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, states ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range states {
				what += "; " + s()
			}
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
