package ringlimit

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	rlsync "github.com/ringlimit/ringlimit/sync"
)

// ClockStatus is this node's clock against its peers', as served in
// GET /v1/cluster: the core measures every peer's clock from the messages
// they exchange and decides on cluster time, the median of the members'
// clocks (docs/consistency.md, "Clocks").
type ClockStatus struct {
	// OffsetMs is this node's clock minus cluster time, in milliseconds:
	// positive when this clock runs ahead.
	OffsetMs float64 `json:"offset_ms"`
	// BoundMs is the bound on |OffsetMs| (Config.Sync.MaxClockOffset).
	BoundMs float64 `json:"bound_ms"`
	// MeasuredPeers of Peers have had their clocks measured.
	MeasuredPeers int `json:"measured_peers"`
	Peers         int `json:"peers"`
	// Skewed reports |OffsetMs| > BoundMs (ringlimit_clock_skewed, a log
	// line).
	Skewed bool `json:"skewed"`
	// Outlier reports Skewed while most members' clocks are within the
	// bound of cluster time: this node's clock is the wrong one, and the
	// node is not ready. With two members, or no such majority, no node
	// can tell which clock is wrong: they report Skewed and stay ready.
	Outlier bool `json:"outlier"`
}

// clockStatusOf converts the core's report.
func clockStatusOf(s rlsync.ClockStatus) ClockStatus {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ClockStatus{OffsetMs: ms(s.Offset), BoundMs: ms(s.Bound), MeasuredPeers: s.Measured, Peers: s.Peers,
		Skewed: s.Skewed, Outlier: s.Outlier}
}

// watchClock, on the driver's loop after each tick, publishes the core's
// clock status for readiness and /v1/cluster, and logs when the node's
// clock goes beyond the bound and when it is back within it.
func (n *Node) watchClock() {
	s := n.core.ClockStatus()
	if prev := n.clockSt.Load(); prev != nil && *prev == s {
		return
	}
	prev := n.clockSt.Swap(&s)
	switch was := prev != nil && prev.Skewed; {
	case s.Skewed && !was:
		n.log.Warn("clock differs from the cluster's beyond the bound; decisions stay on cluster time (fix the time sync)",
			"offset", s.Offset, "bound", s.Bound, "outlier_not_ready", s.Outlier, "measured_peers", s.Measured, "peers", s.Peers)
	case !s.Skewed && was:
		n.log.Info("clock back within the bound of the cluster's", "offset", s.Offset, "bound", s.Bound)
	case s.Outlier && !prev.Outlier:
		n.log.Warn("clock is the one off among the members: not ready", "offset", s.Offset, "bound", s.Bound)
	}
}

// clockNotReady returns why the node's clock makes it not ready, or "".
func (n *Node) clockNotReady() string {
	if s := n.clockSt.Load(); s != nil && s.Outlier {
		return fmt.Sprintf("clock offset %v from the cluster's beyond the bound %v", s.Offset, s.Bound)
	}
	return ""
}

// clockStatus returns the last published clock status.
func (n *Node) clockStatus() ClockStatus {
	if s := n.clockSt.Load(); s != nil {
		return clockStatusOf(*s)
	}
	return ClockStatus{BoundMs: float64(n.cfg.Sync.MaxClockOffset) / float64(time.Millisecond)}
}

// clockCollectors exports the core's clock gauges.
func clockCollectors(c *rlsync.Metrics) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringlimit_clock_offset_seconds",
			Help: "This node's clock minus cluster time (the median of the members' clocks, as measured); positive when it runs ahead.",
		}, func() float64 { return float64(c.ClockOffsetNs.Load()) / 1e9 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringlimit_clock_skewed",
			Help: "1 while this node's clock differs from cluster time by more than the bound (--max-clock-offset): the node is not ready.",
		}, func() float64 { return float64(c.ClockSkewed.Load()) }),
	}
}

// offsetClock is a Clock that reads base plus a fixed offset: the test
// hook that lets tests run a node whose clock is wrong (Config.Clock).
type offsetClock struct {
	base   Clock
	offset time.Duration
}

// Now implements Clock.
func (c offsetClock) Now() time.Time { return c.base.Now().Add(c.offset) }

// OffsetClock returns a Clock that reads the system clock plus offset. It
// is a test hook: a node given it (Config.Clock) behaves as one on a host
// whose clock is offset ahead (behind if negative), which is how the tests
// of clock skew run real nodes in one process.
func OffsetClock(offset time.Duration) Clock { return offsetClock{systemClock{}, offset} }
