package sim

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches,
// without waiting for it and without faulting on any address. It changes
// no result, only how soon a later read of the line completes.
//
//go:noescape
func prefetch(p unsafe.Pointer)
