//go:build !linux

package conformance

import "os/exec"

// dieWithParent does nothing outside Linux: the test's cleanup stops
// redis-server, unless the test process crashes.
func dieWithParent(*exec.Cmd) {}
