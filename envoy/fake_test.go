package envoy

import "github.com/ringlimit/ringlimit/internal/checkertest"

// The node stand-in shared with the other Checker consumers' tests.
type (
	manualClock = checkertest.Clock
	fakeChecker = checkertest.Checker
)

var newFakeChecker = checkertest.NewChecker
