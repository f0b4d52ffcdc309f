package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// The defaults that WithDefaults fills in. Each is documented on its field.
const (
	defaultNodes     = 5
	defaultDuration  = Duration(60 * time.Second)
	defaultWindow    = Duration(time.Second)
	defaultTolerance = 0.01
	defaultRate      = 10000
	defaultKeys      = 10000
	defaultZipfS     = 1.1
	defaultHotShare  = 0.5
	defaultMultiHit  = 0.05
	defaultMaxHits   = 5
	defaultLatency   = Duration(500 * time.Microsecond)
	defaultJitter    = Duration(200 * time.Microsecond)
	defaultRefused   = Duration(time.Millisecond)
	defaultTimeout   = Duration(250 * time.Millisecond)
	defaultDetect    = Duration(3 * time.Second)
	defaultNotify    = Duration(200 * time.Millisecond)
	defaultSpread    = Duration(300 * time.Millisecond)
	defaultLeaveTO   = Duration(5 * time.Second)
	defaultDown      = Duration(2 * time.Second)
	// MaxNodes bounds the nodes a scenario may start with.
	MaxNodes = 200
	// MaxKeys bounds the distinct keys of a workload.
	MaxKeys = 10_000_000
)

// WithDefaults returns s with every zero field set to its default.
func (s Scenario) WithDefaults() Scenario {
	def := func(v *Duration, d Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if s.Nodes == 0 {
		s.Nodes = defaultNodes
	}
	def(&s.Duration, defaultDuration)
	def(&s.Window, defaultWindow)
	if s.Tolerance == 0 {
		s.Tolerance = defaultTolerance
	}
	l := &s.Limit
	if l.Algorithm == "" {
		l.Algorithm = "token_bucket"
	}
	if l.Limit == 0 {
		l.Limit = 500
	}
	def(&l.Period, Duration(time.Second))
	w := &s.Workload
	if w.Rate == 0 {
		w.Rate = defaultRate
	}
	if w.Arrivals == "" {
		w.Arrivals = "poisson"
	}
	if w.Keys == 0 {
		w.Keys = defaultKeys
	}
	if w.Dist == "" {
		w.Dist = "zipf"
	}
	if w.ZipfS == 0 {
		w.ZipfS = defaultZipfS
	}
	if w.HotShare == 0 {
		w.HotShare = defaultHotShare
	}
	if w.MultiHit == 0 {
		w.MultiHit = defaultMultiHit
	}
	if w.MaxHits == 0 {
		w.MaxHits = defaultMaxHits
	}
	n := &s.Network
	def(&n.Latency, defaultLatency)
	def(&n.Jitter, defaultJitter)
	if n.JitterDist == "" {
		n.JitterDist = "uniform"
	}
	def(&n.Refused, defaultRefused)
	def(&n.Timeout, defaultTimeout)
	m := &s.Membership
	def(&m.Detect, defaultDetect)
	def(&m.Notify, defaultNotify)
	def(&m.Spread, defaultSpread)
	def(&m.LeaveTimeout, defaultLeaveTO)
	s.Events = append([]Event(nil), s.Events...)
	for i := range s.Events {
		e := &s.Events[i]
		if e.Action == "partition" && e.Split == 0 && len(e.Groups) == 0 {
			e.Split = 0.5
		}
		if e.Action == "restart" || e.Action == "rolling-restart" || e.Action == "churn" {
			def(&e.Down, defaultDown)
		}
	}
	return s
}

// Validate reports the first invalid field of s, which must have its
// defaults filled in (WithDefaults). The error wraps ErrScenario.
func (s Scenario) Validate() error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("%w %q: %w", ErrScenario, s.Name, err)
	}
	return nil
}

func (s Scenario) validate() error {
	w, n, m := s.Workload, s.Network, s.Membership
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case s.Nodes < 1 || s.Nodes > MaxNodes:
		return fmt.Errorf("nodes %d not in [1, %d]", s.Nodes, MaxNodes)
	case s.Duration <= 0 || s.Window <= 0:
		return fmt.Errorf("duration %v and window %v must be positive", s.Duration, s.Window)
	case s.Duration/s.Window > 1_000_000:
		return fmt.Errorf("more than a million windows of %v in %v", s.Window, s.Duration)
	case !(s.Tolerance > 0 && s.Tolerance < 1):
		return fmt.Errorf("tolerance %v not in (0, 1)", s.Tolerance)
	case !finite(w.Rate) || w.Rate <= 0 || w.Rate > 1e9:
		return fmt.Errorf("workload rate %v not in (0, 1e9]", w.Rate)
	case w.Arrivals != "poisson" && w.Arrivals != "fixed":
		return fmt.Errorf("workload arrivals %q: want poisson or fixed", w.Arrivals)
	case w.Keys < 1 || w.Keys > MaxKeys:
		return fmt.Errorf("workload keys %d not in [1, %d]", w.Keys, MaxKeys)
	case w.Dist != "uniform" && w.Dist != "zipf" && w.Dist != "hot":
		return fmt.Errorf("workload dist %q: want uniform, zipf or hot", w.Dist)
	case !finite(w.ZipfS) || w.ZipfS <= 1:
		return fmt.Errorf("workload zipf_s %v must be greater than 1", w.ZipfS)
	case !(w.HotShare >= 0 && w.HotShare <= 1):
		return fmt.Errorf("workload hot_share %v not in [0, 1]", w.HotShare)
	case w.On < 0 || w.Off < 0 || (w.On == 0 && w.Off > 0):
		return fmt.Errorf("workload on %v / off %v: both non-negative, off only with on", w.On, w.Off)
	case !(w.MultiHit <= 1) || w.MaxHits < 1:
		return fmt.Errorf("workload multi_hit %v must be at most 1 and max_hits %d at least 1", w.MultiHit, w.MaxHits)
	case !finite(w.Skew) || w.Skew < 0:
		return fmt.Errorf("workload skew %v must not be negative", w.Skew)
	case len(w.Weights) != 0 && len(w.Weights) != s.Nodes:
		return fmt.Errorf("workload weights: %d given for %d nodes", len(w.Weights), s.Nodes)
	case n.Latency < 0 || n.Jitter < 0 || n.Refused < 0 || n.Timeout < 0:
		return fmt.Errorf("network durations must not be negative")
	case n.JitterDist != "uniform" && n.JitterDist != "exp":
		return fmt.Errorf("network jitter_dist %q: want uniform or exp", n.JitterDist)
	case !(n.Loss >= 0 && n.Loss < 1):
		return fmt.Errorf("network loss %v not in [0, 1)", n.Loss)
	case m.Detect < 0 || m.Notify < 0 || m.LeaveTimeout <= 0:
		return fmt.Errorf("membership detect and notify must not be negative, leave_timeout positive")
	}
	sum := 0.0
	for _, x := range w.Weights {
		if !finite(x) || x < 0 {
			return fmt.Errorf("workload weight %v must not be negative", x)
		}
		sum += x
	}
	if len(w.Weights) > 0 && sum == 0 {
		return fmt.Errorf("workload weights are all zero")
	}
	for _, l := range n.Links {
		if !validSelector(l.From, true) || !validSelector(l.To, true) || l.From == "owner" || l.To == "owner" ||
			l.From == "random" || l.To == "random" {
			return fmt.Errorf("network link %q -> %q: name nodes or \"*\"", l.From, l.To)
		}
		if l.Latency < 0 || l.Jitter < 0 || !(l.Loss >= 0 && l.Loss < 1) {
			return fmt.Errorf("network link %q -> %q: bad latency, jitter or loss", l.From, l.To)
		}
	}
	if _, err := s.Limit.Bucket(); err != nil {
		return err
	}
	if _, err := s.Sync.Config("n1", check.ModeLocal, 0); err != nil {
		return err
	}
	for _, e := range s.Events {
		if err := e.validate(&s); err != nil {
			return err
		}
	}
	return nil
}
