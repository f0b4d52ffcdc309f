//go:build !amd64

package sim

import "unsafe"

// prefetch does nothing on this architecture (see prefetch_amd64.go).
func prefetch(p unsafe.Pointer) {}
