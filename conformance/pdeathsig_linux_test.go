package conformance

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the test process dies, so
// that a crash of the test (Lyft's service panics on some inputs) leaves no
// redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
