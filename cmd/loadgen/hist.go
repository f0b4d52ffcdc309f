package main

import (
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram: exact below 128ns, then 64
// buckets per power of two (a relative error under 1.6%). It is not safe for
// concurrent use: each worker keeps its own and they are merged at the end.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSub     = 64                     // buckets per power of two
	histExact   = 2 * histSub            // values below this have a bucket each
	histBuckets = histExact + 57*histSub // up to 2^63 ns
)

// bucketOf returns the bucket of v nanoseconds.
func bucketOf(v uint64) int {
	if v < histExact {
		return int(v)
	}
	shift := bits.Len64(v) - 7 // >= 1: v>>shift is in [64, 128)
	return histExact + (shift-1)*histSub + int(v>>shift) - histSub
}

// lowerBound returns the smallest value of bucket b.
func lowerBound(b int) uint64 {
	if b < histExact {
		return uint64(b)
	}
	shift := (b-histExact)/histSub + 1
	m := uint64((b-histExact)%histSub + histSub)
	return m << shift
}

// record adds one observation; negative durations count as zero.
func (h *hist) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

// merge adds o's observations to h.
func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1): the lower bound of the
// bucket holding the observation of rank ceil(q*n). Zero when empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) || rank == 0 {
		rank++
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(lowerBound(b))
		}
	}
	return time.Duration(lowerBound(histBuckets - 1))
}
