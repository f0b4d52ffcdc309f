//go:build unix

// Package cputime reads the CPU time this process has used, so that a
// benchmark on a shared machine can report work per CPU-second.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time this process has used, user and system; 0
// when it cannot be read.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
