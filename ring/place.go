package ring

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// placement returns, for each partition, the index in names of its
// owner, and the load bound: exactly what consistent v0.10.0's New gives
// for the members encode(names[i]) added in that order (its add, then
// distributePartitions once). The library sorts its whole circle once per
// member added, O(M² R log(M R)) for M members of R virtual nodes: at 100
// members most of a membership change's CPU, and a partition of N nodes
// makes N² changes (issue #19). This sorts it once. Every lookup is checked
// against the library (library_test.go), and the bound's "not enough
// room" panic of the library is ErrPlacement here.
func placement(names []string, cfg Config) (owner []int32, maxLoad float64, err error) {
	r := cfg.ReplicationFactor
	circle := make([]uint64, 0, len(names)*r)
	at := make(map[uint64]int32, len(names)*r)
	var buf []byte
	for i, n := range names {
		for j := range r {
			// The library names virtual node j of member m fmt.Sprintf("%s%d", m, j).
			buf = strconv.AppendInt(append(buf[:0], encode(n)...), int64(j), 10)
			h := xxhash.Sum64(buf)
			at[h] = int32(i) // a later member takes a colliding hash, as in the library's map
			circle = append(circle, h)
		}
	}
	slices.Sort(circle)
	maxLoad = math.Ceil(float64(uint64(cfg.PartitionCount)/uint64(len(names))) * cfg.Load)
	loads := make([]float64, len(names))
	owner = make([]int32, cfg.PartitionCount)
	var bs [8]byte
	for p := range cfg.PartitionCount {
		binary.LittleEndian.PutUint64(bs[:], uint64(p))
		idx, _ := slices.BinarySearch(circle, xxhash.Sum64(bs[:])) // the first hash >= the partition's
		if idx >= len(circle) {
			idx = 0
		}
		for count := 1; ; count++ {
			if count >= len(circle) {
				return nil, 0, fmt.Errorf("%w: not enough room to distribute partitions", ErrPlacement)
			}
			m := at[circle[idx]]
			if loads[m]+1 <= maxLoad {
				owner[p] = m
				loads[m]++
				break
			}
			idx++
			if idx >= len(circle) {
				idx = 0
			}
		}
	}
	return owner, maxLoad, nil
}
