package memlimit

import (
	"context"
	"math"
	"testing"
)

const mib = 1 << 20

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		keys, other, ceiling int64
		want                 int64
	}{
		{"no keys", 0, 10 * mib, math.MaxInt64, 20*mib + Slack},
		{"keys get a quarter", 100 * mib, 0, math.MaxInt64, 125*mib + Slack},
		{"both", 120 * mib, 15 * mib, math.MaxInt64, 30*mib + 150*mib + Slack},
		{"the ceiling wins", 128 * mib, 40 * mib, 200 * mib, 200 * mib},
		{"negative measures count as none", -5, -7, math.MaxInt64, Slack},
	} {
		if got := Limit(tc.keys, tc.other, tc.ceiling); got != tc.want {
			t.Errorf("%s: Limit(%d, %d, %d) = %d, want %d", tc.name, tc.keys, tc.other, tc.ceiling, got, tc.want)
		}
	}
}

// TestTunerSteps drives a Tuner over a fake runtime: the rest of the heap
// is measured at each new collection only (keys grown since then count as
// keys), the limit is set only when it changes, the ceiling caps it and
// is put back when Run ends.
func TestTunerSteps(t *testing.T) {
	var (
		keys, live, cycles int64
		limit              int64 = 300 * mib // GOMEMLIMIT
		sets               int
	)
	set := func(l int64) int64 {
		old := limit
		if l >= 0 {
			limit = l
			sets++
		}
		return old
	}
	tu := newTuner(func() int64 { return keys }, set, func() (uint64, uint64) { return uint64(live), uint64(cycles) })
	for i, st := range []struct {
		keys, live, cycles int64
		want               int64
		sets               int
	}{
		{0, 8 * mib, 1, 16*mib + Slack, 1},                     // t0: start-up heap, no keys
		{0, 8 * mib, 1, 16*mib + Slack, 1},                     // t1: nothing new: not set again
		{40 * mib, 8 * mib, 1, 16*mib + 50*mib + Slack, 2},     // t2: keys came, no collection since
		{80 * mib, 90 * mib, 2, 20*mib + 100*mib + Slack, 3},   // t3: a collection: other is 10 MiB
		{240 * mib, 90 * mib, 2, 300 * mib, 4},                 // t4: capped at the ceiling
		{240 * mib, 190 * mib, 3, 300 * mib, 4},                // t5: other < 0: none; still the ceiling
		{100 * mib, 110 * mib, 4, 20*mib + 125*mib + Slack, 5}, // t6: keys evicted
	} {
		keys, live, cycles = st.keys, st.live, st.cycles
		if got := tu.Update(); got != st.want || limit != st.want || sets != st.sets {
			t.Fatalf("t%d: Update = %d (limit %d, set %d times), want %d (set %d times)", i, got, limit, sets, st.want, st.sets)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tu.Run(ctx, 1)
	if limit != 300*mib {
		t.Errorf("after Run: limit %d, want the ceiling %d back", limit, 300*mib)
	}
}
