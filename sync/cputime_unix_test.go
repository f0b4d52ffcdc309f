//go:build unix

package sync

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used, user and system, so
// that a benchmark on a shared machine can report work per CPU-second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
