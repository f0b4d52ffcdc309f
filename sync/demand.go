package sync

import (
	"math"
	"slices"
	"time"
)

// Demand is measured per key as an exponentially decayed count of the hits
// asked for (admitted or not), with time constant demandTau: a steady rate of
// r hits per second reads as r*demandTau.Seconds(). The owner keeps every
// node's (its own checks plus the demand each flush reports) and its own; a
// non-owner keeps its own. Their ratio is a node's traffic share, which sizes
// its budget between syncs (cached mode) and its leases (leased mode).
const demandTau = time.Second

// coarseShift sets the unit of the coarse clock of entries: 2^24 ns, about
// 16.8 ms, fine enough for decay with a 1 s time constant and for LRU order.
const coarseShift = 24

// coarseBits is the width of the coarse clock: 26 bits of 16.8 ms wrap after
// about 13 days; an entry untouched for that long (and not evicted as idle)
// looks recent again, which only affects the LRU order.
const coarseBits = 32 - flagBits

const coarseMask = 1<<coarseBits - 1

// coarse returns now on the coarse clock.
func coarse(now time.Time) uint32 {
	return uint32(now.UnixNano()>>coarseShift) & coarseMask
}

// coarseUnit is the coarse clock's unit.
const coarseUnit = time.Duration(1) << coarseShift

// toCoarse converts a duration to coarse units, rounding up.
func toCoarse(d time.Duration) uint32 {
	u := (d + coarseUnit - 1) / coarseUnit
	return uint32(min(u, coarseMask))
}

// ageOf returns the coarse time from then to now, modulo the clock's wrap. A
// clock that went backwards reads as zero age.
func ageOf(now, then uint32) uint32 {
	a := (now - then) & coarseMask
	if a > coarseMask/2 {
		return 0
	}
	return a
}

// decayTable holds exp(-k*coarseUnit/demandTau) for k < len(decayTable);
// beyond it the factor is below 1e-7 and reads as zero.
var decayTable = func() (t [1024]float32) {
	for k := range t {
		t[k] = float32(math.Exp(-float64(k) * float64(coarseUnit) / float64(demandTau)))
	}
	return t
}()

// decayFactor returns the factor by which a demand count decays over age
// coarse units.
func decayFactor(age uint32) float32 {
	if age < uint32(len(decayTable)) {
		return decayTable[age]
	}
	return 0
}

// minHotRate is the least rate, in hits per second, for a key to be listed
// among the hot keys.
const minHotRate = 0.01

// HotKey is a key and the rate at which this node sees it asked for.
type HotKey struct {
	// Key is the key.
	Key string
	// Rate is the decayed demand in hits per second: for a key this node
	// owns, the whole cluster's (as flushed to it); for another, this node's.
	Rate float64
	// Owned reports whether this node owns the key.
	Owned bool
}

// HotKeys returns up to n of the keys with the highest demand, highest
// first. The lists are sampled by the store's sweep on Tick (every shard
// once per Config.SweepInterval), so they are at most that old and only the
// hottest few keys of each shard are candidates. It is cheap; like every
// other input, the driver applies it in order.
func (n *Node) HotKeys(k int) []HotKey {
	var all []HotKey
	for i := range n.st.shards {
		s := &n.st.shards[i]
		all = append(all, s.top...)
	}
	slices.SortFunc(all, func(a, b HotKey) int {
		switch {
		case hotLess(b, a):
			return -1
		case hotLess(a, b):
			return 1
		}
		return 0
	})
	if k < len(all) {
		all = all[:max(k, 0)]
	}
	return all
}
