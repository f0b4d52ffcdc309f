package sync

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// fillNode returns a lone node (owner of every key) made with tweak, and
// checks keys named by name(i) for i in [from, to) on it, one hit each of a
// limit of 100 an hour (a used key stays: its state is not a fresh
// bucket's).
func fillNode(t *testing.T, tweak func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Self = "a"
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := NewNode(cfg, discard{})
	if err != nil {
		t.Fatal(err)
	}
	n.SetMembers(t0, []string{"a"})
	return n
}

// fill checks the keys name(i), i in [from, to), on n, the i-th at t0 +
// i×10µs, and ticks n every 500 keys as its driver would (a tick every 5ms).
func fill(n *Node, name func(int) string, from, to int) {
	reqs := []check.Request{{Hits: 1, Limit: perHour(100)}}
	resps := make([]check.Response, 1)
	for i := from; i < to; i++ {
		now := t0.Add(time.Duration(i) * 10 * time.Microsecond)
		reqs[0].Key = name(i)
		n.Check(now, reqs, resps, func() {})
		if i%500 == 0 {
			n.Tick(now)
		}
	}
}

// liveHeap returns the heap's live bytes after a collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHeapPerKey100k is the quick form of TestBytesPerKey, in make test:
// 100,000 owned keys of 12 bytes take at most 150 bytes of live heap each,
// key and index included (125 measured: one 96-byte allocation holding the
// entry, the key and the token bucket, and the table's 12-byte slots), and
// the store's charge (Metrics.KeyBytes) is within 15% of what the heap
// holds.
func TestHeapPerKey100k(t *testing.T) {
	const keys = 100_000
	name := func(i int) string { return fmt.Sprintf("user:%07d", i) }
	before := liveHeap()
	n := fillNode(t, nil)
	fill(n, name, 0, keys)
	after := liveHeap()
	per := float64(after-before) / keys
	charged := float64(n.Metrics().KeyBytes.Load()) / keys
	t.Logf("%d keys: %.0f bytes of live heap per key, %.0f charged", n.Metrics().Keys.Load(), per, charged)
	if per > 150 {
		t.Errorf("%.0f bytes of heap per key, want at most 150", per)
	}
	if charged < per*0.85 || charged > per*1.15 {
		t.Errorf("charged %.0f bytes per key for %.0f on the heap: want within 15%%", charged, per)
	}
	runtime.KeepAlive(n)
}

// TestByteBudget: MaxKeyBytes bounds the memory of long keys, which
// MaxKeys alone would not; the charge follows evictions back down, and a
// key in use survives a flood of new ones.
func TestByteBudget(t *testing.T) {
	long := strings.Repeat("x", 200)
	name := func(i int) string { return fmt.Sprintf("%s%07d", long, i) }
	per := entryCharge(len(name(0)), &entry{meta: flagKeyed}, false)
	budget := 1000 * per
	n := fillNode(t, func(c *Config) { c.MaxKeyBytes = budget })
	reqs := []check.Request{{Key: "hot", Hits: 0, Limit: perHour(100)}}
	resps := make([]check.Response, 1)
	for i := 0; i < 20_000; i += 100 {
		fill(n, name, i, i+100)
		n.Check(t0.Add(time.Duration(i)*10*time.Microsecond), reqs, resps, func() {})
	}
	m := n.Metrics()
	if got := m.KeyBytes.Load(); got > budget {
		t.Errorf("KeyBytes %d, want at most the budget %d", got, budget)
	}
	if got := m.Keys.Load(); got > 1001 || got < 500 {
		t.Errorf("Keys %d, want between 500 and 1001 (the budget holds 1000 long keys)", got)
	}
	if m.Evicted.Load() < 19_000 {
		t.Errorf("Evicted %d, want at least 19000", m.Evicted.Load())
	}
	if remainingOn(n, t0, "hot") < 0 {
		t.Error("the key in use was evicted")
	}
	// Every key evicted gave its charge back: what is left is what is held.
	var sum int64
	for i := range n.st.shards {
		s := &n.st.shards[i]
		for k, e := range s.m.all() {
			sum += entryCharge(len(k), e, false)
		}
	}
	if got := m.KeyBytes.Load(); got != sum {
		t.Errorf("KeyBytes %d, the keys held cost %d", got, sum)
	}
}

// TestEvictionHeapFlat: a store at its bound that keeps taking new keys
// (every insert evicts) holds no more live heap than when it first became
// full, and allocates per inserted key no more than it did while filling
// up without evicting (the key's entry, and the table's growth then): not
// a list of candidates per eviction. The heap does not balloon while
// evicting.
func TestEvictionHeapFlat(t *testing.T) {
	const bound = 64_000
	name := func(i int) string { return fmt.Sprintf("flood:%07d", i) }
	var m0, m1, m2 runtime.MemStats
	before := liveHeap()
	n := fillNode(t, func(c *Config) { c.MaxKeys = bound })
	runtime.ReadMemStats(&m0)
	fill(n, name, 0, bound)
	full := liveHeap()
	const more = 4 * bound
	runtime.ReadMemStats(&m1)
	fill(n, name, bound, bound+more)
	runtime.ReadMemStats(&m2)
	flooded := liveHeap()
	fillPer := float64(m1.TotalAlloc-m0.TotalAlloc) / bound
	evictPer := float64(m2.TotalAlloc-m1.TotalAlloc) / more
	t.Logf("live heap: full %.1f MiB, after %d more keys %.1f MiB; allocated per key: %.0f bytes while filling, %.0f while evicting",
		float64(full-before)/(1<<20), more, float64(flooded-before)/(1<<20), fillPer, evictPer)
	if got := n.Metrics().Keys.Load(); got > bound {
		t.Errorf("Keys %d, want at most %d", got, bound)
	}
	if float64(flooded-before) > 1.10*float64(full-before) {
		t.Errorf("live heap grew from %d to %d bytes while evicting", full-before, flooded-before)
	}
	if evictPer > fillPer {
		t.Errorf("%.0f bytes allocated per inserted key while evicting, more than the %.0f while filling", evictPer, fillPer)
	}
	runtime.KeepAlive(n)
}

// TestHeldBackupsBudget: the backups a node holds for another owner are
// charged to its byte budget and take at most half of it; the rest are
// counted as dropped, and a held state given back releases its charge.
func TestHeldBackupsBudget(t *testing.T) {
	members := []string{"a", "b"}
	key := func(i int) string { return fmt.Sprintf("held-%04d", i) }
	per := heldCharge(len(key(0)))
	budget := 40 * per // room for 20 held states
	nw := newTestNet(t, func(cfg *Config) {
		if cfg.Self == "b" {
			cfg.MaxKeyBytes = budget
		}
	}, members...)
	a, b := nw.nodes["a"], nw.nodes["b"]
	owned := 0
	for i := 0; owned < 60; i++ {
		if k := key(i); a.view.owner(k) == "a" {
			checkSync(t, a, nw.now, check.Request{Key: k, Hits: 1, Limit: perHour(100)})
			owned++
		}
	}
	nw.run(500 * time.Millisecond)
	held := len(b.dur.held)
	m := b.Metrics()
	if held != 20 || m.BackupKeysDropped.Load() != 40 {
		t.Errorf("b holds %d backups and dropped %d; want 20 held (half its budget) and 40 dropped", held, m.BackupKeysDropped.Load())
	}
	if got, want := b.st.heldBytes, int64(held)*per; got != want || m.KeyBytes.Load() < want {
		t.Errorf("held charge %d (KeyBytes %d), want %d", got, m.KeyBytes.Load(), want)
	}
	// The held states given back (as when their owner fails) release their
	// charge.
	b.takeHeld(func(string, *heldBackup) bool { return false })
	if b.st.heldBytes != 0 {
		t.Errorf("held charge %d after every held state was taken, want 0", b.st.heldBytes)
	}
}
