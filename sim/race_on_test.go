//go:build race

package sim

// raceEnabled is set when the tests run under the race detector.
const raceEnabled = true
