package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// ErrScenario is wrapped by every error of Scenario.Validate and Load.
var ErrScenario = errors.New("sim: invalid scenario")

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s", "250ms"). It also reads a bare number of nanoseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String returns d in Go's duration notation.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"100ms\" or nanoseconds", b)
	}
	*d = Duration(n)
	return nil
}

// Scenario describes one simulated situation: the cluster, its traffic, its
// network and what goes wrong when. The zero value of every field means its
// default (see Defaults), so a JSON file names only what it changes. Node
// names are "n1", "n2", ... in order; nodes that join later continue the
// numbering.
type Scenario struct {
	// Name identifies the scenario in reports.
	Name string `json:"name"`
	// Description says what the scenario shows, in one sentence.
	Description string `json:"description,omitempty"`
	// Nodes is the number of nodes at the start. Default 5.
	Nodes int `json:"nodes,omitempty"`
	// Duration is the simulated time the clients send traffic. Default 60s.
	Duration Duration `json:"duration,omitempty"`
	// Window is the length of a measurement window: admissions are compared
	// with the ideal per key and per window. Default 1s.
	Window Duration `json:"window,omitempty"`
	// Tolerance is the relative distance from the ideal, per window, within
	// which the cluster counts as converged after a disruption. Default 0.01.
	Tolerance float64 `json:"tolerance,omitempty"`
	// Limit is the limit every key runs under.
	Limit LimitSpec `json:"limit"`
	// Workload is the client traffic.
	Workload Workload `json:"workload"`
	// Network models latency, loss and unreachability.
	Network Network `json:"network"`
	// Membership models how fast the members learn of changes (gossip).
	Membership Membership `json:"membership"`
	// Sync sets the coordination core's configuration.
	Sync SyncSpec `json:"sync"`
	// Events is the timeline of faults and membership changes.
	Events []Event `json:"events,omitempty"`
}

// LimitSpec is a bucket.Limit in JSON form.
type LimitSpec struct {
	// Algorithm is the algorithm's name ("token_bucket", "gcra", ...).
	// Default token_bucket.
	Algorithm string `json:"algorithm,omitempty"`
	// Limit is the permits per Period. Default 500.
	Limit int64 `json:"limit,omitempty"`
	// Period is the time over which Limit permits are granted. Default 1s.
	Period Duration `json:"period,omitempty"`
	// Burst is the capacity; zero means Limit.
	Burst int64 `json:"burst,omitempty"`
	// MaxWait, MinGap and WarmUp are passed to bucket.Limit as they are.
	MaxWait Duration `json:"max_wait,omitempty"`
	MinGap  Duration `json:"min_gap,omitempty"`
	WarmUp  Duration `json:"warm_up,omitempty"`
	// MaxBurstSeconds and ColdFactor are Guava's options (multiples of
	// 0.001; zero is the default).
	MaxBurstSeconds float64 `json:"max_burst_seconds,omitempty"`
	ColdFactor      float64 `json:"cold_factor,omitempty"`
}

// Bucket returns the limit as a bucket.Limit.
func (l LimitSpec) Bucket() (bucket.Limit, error) {
	a, err := bucket.ParseAlgorithm(l.Algorithm)
	if err != nil {
		return bucket.Limit{}, err
	}
	bl := bucket.Limit{Algorithm: a, Limit: l.Limit, Period: l.Period.D(), Burst: l.Burst,
		MaxWait: l.MaxWait.D(), MinGap: l.MinGap.D(), WarmUp: l.WarmUp.D()}
	if err := bl.SetGuavaOptions(l.MaxBurstSeconds, l.ColdFactor); err != nil {
		return bucket.Limit{}, err
	}
	return bl, bl.Validate()
}

// Workload describes the client traffic: one arrival process for the whole
// cluster, each arrival sent to a node by the load balancer and given a key.
type Workload struct {
	// Rate is the mean number of requests per second, cluster-wide (while
	// "on" for bursty traffic). Default 10000.
	Rate float64 `json:"rate,omitempty"`
	// Arrivals is "poisson" (exponential gaps; the default) or "fixed" (even
	// spacing).
	Arrivals string `json:"arrivals,omitempty"`
	// Keys is the number of distinct keys. Default 10000.
	Keys int `json:"keys,omitempty"`
	// Dist picks a request's key: "uniform", "zipf" (the default: key k has
	// weight 1/(k+1)^ZipfS, key 0 the hottest) or "hot" (key 0 with
	// probability HotShare, otherwise uniform among the others).
	Dist string `json:"dist,omitempty"`
	// ZipfS is the zipf exponent, greater than 1. Default 1.1.
	ZipfS float64 `json:"zipf_s,omitempty"`
	// HotShare is the share of requests to key 0 under "hot". Default 0.5.
	HotShare float64 `json:"hot_share,omitempty"`
	// On and Off make the traffic bursty: Rate for On, silence for Off, and
	// again. Zero On means steady traffic.
	On  Duration `json:"on,omitempty"`
	Off Duration `json:"off,omitempty"`
	// MultiHit is the probability that a request asks for more than one hit;
	// such a request asks for 2..MaxHits hits, uniformly. Default 0.05.
	// Negative means never.
	MultiHit float64 `json:"multi_hit,omitempty"`
	// MaxHits bounds the hits of one request. Default 5.
	MaxHits int64 `json:"max_hits,omitempty"`
	// Skew skews the load balancer: node i gets weight 1/(i+1)^Skew. Zero
	// balances evenly.
	Skew float64 `json:"skew,omitempty"`
	// Weights, when set, gives the load balancer's weight of each initial
	// node explicitly (overrides Skew). Nodes that join later get weight 1.
	Weights []float64 `json:"weights,omitempty"`
}

// Network describes the simulated network between nodes.
type Network struct {
	// Latency is the one-way base latency of every link. Default 500µs.
	Latency Duration `json:"latency,omitempty"`
	// Jitter is added to the latency: uniform in [0, Jitter), or exponential
	// with mean Jitter when JitterDist is "exp". Default 200µs.
	Jitter Duration `json:"jitter,omitempty"`
	// JitterDist is "uniform" (the default) or "exp".
	JitterDist string `json:"jitter_dist,omitempty"`
	// Loss is the probability that a message is silently lost. Default 0.
	Loss float64 `json:"loss,omitempty"`
	// Reorder lets a link deliver messages out of order (each takes its own
	// latency). By default every link is FIFO, like one TCP connection.
	Reorder bool `json:"reorder,omitempty"`
	// Links overrides latency, jitter or loss of some links.
	Links []Link `json:"links,omitempty"`
	// Silent turns off unreachability reports: a send that fails is dropped
	// and the sender is never told (it only notices its timeouts).
	Silent bool `json:"silent,omitempty"`
	// Refused is how long after a send to a node that is down the sender is
	// told (Node.Unreachable), like a refused connection. Default 1ms.
	Refused Duration `json:"refused,omitempty"`
	// Timeout is how long after a send across a cut the sender is told, like
	// an RPC deadline. Default 250ms.
	Timeout Duration `json:"timeout,omitempty"`
}

// Link overrides the properties of the links from From to To. An empty From
// or To, or "*", matches every node. Zero fields keep the defaults.
type Link struct {
	// From and To select the links' ends: a node name, or "*".
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Latency, Jitter and Loss replace Network's for these links.
	Latency Duration `json:"latency,omitempty"`
	Jitter  Duration `json:"jitter,omitempty"`
	Loss    float64  `json:"loss,omitempty"`
}

// Membership models gossip: how long after a change each member sees it.
type Membership struct {
	// Detect is how long a member takes to declare a crashed or unreachable
	// node dead (memberlist's suspicion timeout). Default 3s.
	Detect Duration `json:"detect,omitempty"`
	// Notify is how long a join, a graceful leave or a healed link takes to
	// reach a member. Default 200ms.
	Notify Duration `json:"notify,omitempty"`
	// Spread is a random extra delay, uniform in [0, Spread), drawn per
	// member, so members do not all change their view at once. Default 300ms;
	// negative means none.
	Spread Duration `json:"spread,omitempty"`
	// Static freezes every view: partitions never change membership, only
	// crashes, joins and leaves do.
	Static bool `json:"static,omitempty"`
	// LeaveTimeout bounds how long a leaving node waits for its hand-off to
	// finish before it goes anyway. Default 5s.
	LeaveTimeout Duration `json:"leave_timeout,omitempty"`
}

// SyncSpec sets fields of the nodes' rlsync.Config; zero keeps the default
// of rlsync.DefaultConfig. The mode and the flush interval come from the
// Variant of a run.
type SyncSpec struct {
	// Policy is the partition policy: "fail-open", "fail-closed" or
	// "local-share".
	Policy string `json:"policy,omitempty"`
	// Tick is Config.TickInterval, Flush Config.FlushInterval (a Variant's
	// flush interval overrides it).
	Tick  Duration `json:"tick,omitempty"`
	Flush Duration `json:"flush,omitempty"`
	// SyncFraction is Config.SyncFraction, the early-sync threshold of
	// cached mode.
	SyncFraction float64 `json:"sync_fraction,omitempty"`
	// MaxBatch, ForwardWindow, RequestTimeout, UnreachableAfter and LeaseTTL
	// are the Config fields of the same names.
	MaxBatch         int      `json:"max_batch,omitempty"`
	ForwardWindow    Duration `json:"forward_window,omitempty"`
	RequestTimeout   Duration `json:"request_timeout,omitempty"`
	UnreachableAfter Duration `json:"unreachable_after,omitempty"`
	LeaseTTL         Duration `json:"lease_ttl,omitempty"`
}

// Config returns the node configuration for self under mode and flush
// (zero flush keeps the scenario's or the default).
func (s SyncSpec) Config(self string, mode check.Mode, flush time.Duration) (rlsync.Config, error) {
	c := rlsync.DefaultConfig()
	c.Self = self
	c.Mode = mode
	if s.Policy != "" {
		p, err := check.ParsePolicy(s.Policy)
		if err != nil {
			return c, err
		}
		c.Policy = p
	}
	set := func(dst *time.Duration, v Duration) {
		if v != 0 {
			*dst = v.D()
		}
	}
	set(&c.TickInterval, s.Tick)
	set(&c.FlushInterval, s.Flush)
	set(&c.ForwardWindow, s.ForwardWindow)
	set(&c.RequestTimeout, s.RequestTimeout)
	set(&c.UnreachableAfter, s.UnreachableAfter)
	set(&c.LeaseTTL, s.LeaseTTL)
	if flush != 0 {
		c.FlushInterval = flush
	}
	if s.SyncFraction != 0 {
		c.SyncFraction = s.SyncFraction
	}
	if s.MaxBatch != 0 {
		c.MaxBatch = s.MaxBatch
	}
	return c, c.Validate()
}

// Load reads a scenario from JSON, fills in the defaults and validates it.
// Unknown fields are an error, so a typo does not pass silently.
func Load(r io.Reader) (Scenario, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	s = s.WithDefaults()
	return s, s.Validate()
}

// LoadFile reads a scenario from the JSON file at path.
func LoadFile(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	return Load(bytes.NewReader(b))
}
