package sync

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// BenchmarkEvictingInsert measures a check of a key never seen on a node
// at its MaxKeys (64,000), so that every insert evicts: one hit of a
// limit of 100 an hour, owner mode, keys user:%07d. One op is one such
// check, its share of an eviction included (and, with the evicted marks,
// its mark and its slot's lookup).
func BenchmarkEvictingInsert(b *testing.B) {
	const bound = 64_000
	cfg := DefaultConfig()
	cfg.Self, cfg.MaxKeys = "a", bound
	n, err := NewNode(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	n.SetMembers(t0, []string{"a"})
	keyBuf := []byte("user:0000000")
	reqs := []check.Request{{Hits: 1, Limit: perHour(100), Mode: check.ModeOwner}}
	resps := make([]check.Response, 1)
	next := func(i int) {
		for k, d := i, len(keyBuf)-1; d >= len("user:"); k, d = k/10, d-1 {
			keyBuf[d] = byte('0' + k%10)
		}
		reqs[0].Key = string(keyBuf)
		n.Check(t0.Add(time.Duration(i)*10*time.Microsecond), reqs, resps, func() {})
	}
	for i := range bound {
		next(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := bound; b.Loop(); i++ {
		next(i)
	}
}
