package ringlimit

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/peer"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// metrics are a node's Prometheus metrics, registered on Config.Registry.
// All methods are safe for concurrent use.
type metrics struct {
	decisions *prometheus.CounterVec
	// cells caches decisions' children by [algorithm][mode][status], so the
	// request path does no label lookup. Algorithm 0 is "invalid"; mode 0 is
	// "default" (not decided).
	cells        [int(bucket.SmoothWarmingUp) + 1][check.ModeLeased + 1][3]lazyCounter
	batchItems   [2]prometheus.Observer
	callDuration [2]prometheus.Observer
}

type lazyCounter struct {
	once sync.Once
	c    prometheus.Counter
}

var statusLabels = [3]string{check.StatusUnderLimit.String(), check.StatusOverLimit.String(), check.StatusError.String()}

// newMetrics registers the node's metrics on reg. core's counters and the
// cluster's member count are read at scrape time.
func newMetrics(reg prometheus.Registerer, core *rlsync.Metrics, members func() float64, ringVersion func() float64) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimit_decisions_total",
			Help: "Items of public Check calls answered by this node, by algorithm, mode decided in and status.",
		}, []string{"algorithm", "mode", "status"}),
	}
	batch := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ringlimit_check_batch_items",
		Help:    "Items per public Check call, by API.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	}, []string{"api"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ringlimit_check_duration_seconds",
		Help:    "Time to answer a public Check call, from decoding to the last answer, by API.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50us .. 1.6s
	}, []string{"api"})
	for _, a := range []api.API{api.GRPC, api.HTTP} {
		m.batchItems[a] = batch.WithLabelValues(a.String())
		m.callDuration[a] = dur.WithLabelValues(a.String())
	}
	cs := []prometheus.Collector{m.decisions, batch, dur,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringlimit_members",
			Help: "Live cluster members this node sees, itself included.",
		}, members),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringlimit_ring_version",
			Help: "Version of this node's ring; it changes on every membership change.",
		}, ringVersion),
	}
	cs = append(cs, coreCollectors(core)...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// coreCounter is one of the core's counters as a Prometheus counter.
type coreCounter struct {
	name, help string
	v          *atomic.Int64
}

// coreCounters lists every counter of rlsync.Metrics (all but Decisions and
// Keys, exported otherwise).
func coreCounters(c *rlsync.Metrics) []coreCounter {
	return []coreCounter{
		{"ringlimit_degraded_total", "Requests decided by the partition policy because the owner was unreachable.", &c.Degraded},
		{"ringlimit_forwarded_checks_total", "Owner-mode checks forwarded to another node.", &c.Forwarded},
		{"ringlimit_forward_batches_total", "Messages that carried forwarded checks.", &c.ForwardBatches},
		{"ringlimit_flushes_sent_total", "Flushes of pending hits sent to owners.", &c.FlushesSent},
		{"ringlimit_flushes_retried_total", "Flushes sent again after a timeout.", &c.FlushesRetried},
		{"ringlimit_flush_items_dropped_total", "Pending hits dropped from a full retry buffer.", &c.FlushItemsDropped},
		{"ringlimit_flush_duplicates_total", "Flush batches received twice and ignored.", &c.FlushDuplicates},
		{"ringlimit_pushes_sent_total", "State pushes sent by this node as owner.", &c.PushesSent},
		{"ringlimit_leases_granted_total", "Leases granted by this node as owner.", &c.LeasesGranted},
		{"ringlimit_leases_renewed_total", "Leases renewed.", &c.LeasesRenewed},
		{"ringlimit_leases_returned_total", "Leases returned.", &c.LeasesReturned},
		{"ringlimit_lease_tokens_granted_total", "Tokens granted in leases.", &c.LeaseTokensGranted},
		{"ringlimit_lease_tokens_returned_total", "Tokens returned from leases.", &c.LeaseTokensReturned},
		{"ringlimit_lease_tokens_refused_total", "Lease tokens a peer gave back beyond what this node granted it and had not seen returned (refused, not refunded).", &c.LeaseTokensRefused},
		{"ringlimit_handoffs_sent_total", "Hand-off messages sent.", &c.HandoffsSent},
		{"ringlimit_handoff_keys_total", "Keys handed off to new owners.", &c.HandoffKeys},
		{"ringlimit_handoffs_received_total", "Hand-off messages merged by this node as new owner.", &c.HandoffsReceived},
		{"ringlimit_handoffs_dropped_total", "Hand-off messages given up after the retries (their keys are rebuilt from the non-owners' reports).", &c.HandoffsDropped},
		{"ringlimit_evicted_total", "Keys evicted (idle or least recently used).", &c.Evicted},
		{"ringlimit_flushes_acked_total", "Flush acknowledgements received from owners.", &c.FlushesAcked},
		{"ringlimit_pushes_received_total", "State pushes received from owners.", &c.PushesReceived},
		{"ringlimit_forward_timeouts_total", "Owner-mode checks decided by the partition policy after a timeout or an unreachable owner.", &c.ForwardTimeouts},
		{"ringlimit_not_owner_total", "Items other nodes sent here for keys this node does not own (they route them again).", &c.NotOwner},
		{"ringlimit_flush_items_deferred_total", "Flushed items this node, their new owner, did not apply while the key's state was on its way from its previous owner (flushed again).", &c.FlushItemsDeferred},
		{"ringlimit_contested_total", "Checks refused by the owner this node's ring names, held until the two rings agree (a membership change reaching members at different times).", &c.Contested},
		{"ringlimit_core_envelopes_dropped_total", "Envelopes the core dropped: sender not a member, or addressed to another node.", &c.EnvelopesDropped},
		{"ringlimit_malformed_total", "Message items dropped because a state, limit or count in them was invalid, and envelopes with no known body.", &c.Malformed},
		{"ringlimit_peer_restarts_total", "Peers seen with a new incarnation (restarted faster than failure detection).", &c.PeerRestarts},
		{"ringlimit_membership_rejected_total", "Memberships the core could not use and ignored (an empty name, more members than partitions).", &c.MembershipRejected},
		{"ringlimit_backups_sent_total", "Backup messages this node sent as owner (owner mode: its keys' state, for the member that takes them over if it fails).", &c.BackupsSent},
		{"ringlimit_backup_keys_total", "Key states carried by the backup messages sent.", &c.BackupKeys},
		{"ringlimit_backups_retried_total", "Backup batches not acknowledged in time; their keys go again with the next round.", &c.BackupsRetried},
		{"ringlimit_backups_received_total", "Backup messages kept for other owners.", &c.BackupsReceived},
		{"ringlimit_backup_keys_dropped_total", "Backed-up key states not kept because MaxKeys states were held or the byte budget (--max-key-bytes) had no room.", &c.BackupKeysDropped},
		{"ringlimit_backup_keys_restored_total", "Held key states given to a key's new owner after its owner failed or restarted.", &c.BackupKeysRestored},
		{"ringlimit_backup_keys_not_kept_total", "Backed-up key states this node's backup target acknowledged as not kept (it held its most backups); their keys' fences did not rise.", &c.BackupKeysNotKept},
		{"ringlimit_backups_refused_total", "Backup messages not acknowledged because they carried a key the sender does not own in this node's view (its fence does not rise).", &c.BackupsRefused},
		{"ringlimit_clock_steps_total", "Times this node's clock correction moved (every state it held shifted with it).", &c.ClockSteps},
		{"ringlimit_clock_rebased_total", "Messages whose states were shifted on receipt to this node's cluster time (a sender whose clock is not yet measured, or whose cluster time differs).", &c.ClockRebased},
		{"ringlimit_policy_hits_charged_total", "Hits admitted by a partition policy without the key's owner, recorded to be charged to its bucket.", &c.PolicyHitsCharged},
		{"ringlimit_policy_hits_drained_total", "Recorded policy hits charged to their key's bucket since (sent to the owner or drained here).", &c.PolicyHitsDrained},
		{"ringlimit_policy_hits_uncharged_total", "Policy hits not recorded: beyond one bucket of debt per key, or with MaxKeys keys in debt.", &c.PolicyHitsUncharged},
		{"ringlimit_fence_waits_total", "Checks that waited for their key's backup to be acknowledged before the owner decided them.", &c.FenceWaits},
		{"ringlimit_fence_timeouts_total", "Checks that waited for their key's backup in vain and went to the partition policy.", &c.FenceTimeouts},
		{"ringlimit_deposed_keys_total", "Owned states dropped on the return from a minority side (the majority decided them meanwhile).", &c.DeposedKeys},
		{"ringlimit_late_view_hits_total", "Hits a new owner charged from a survivor's late view of a failed owner's state: what the view showed consumed beyond the state the key was taken over from.", &c.LateViewHits},
		{"ringlimit_drained_starts_total", "Keys a node started into a running cluster (Joining) began to own drained as of its start under fail-closed: no member sent their state.", &c.DrainedStarts},
		{"ringlimit_takeovers_unconfirmed_total", "Membership changes that gave this node a failed member's partitions, decided as owner only once a majority is heard from.", &c.TakeoversUnconfirmed},
		{"ringlimit_unconfirmed_checks_total", "Checks of keys taken over from a failed member not decided as owner while no majority was heard from since.", &c.UnconfirmedChecks},
		{"ringlimit_owner_lease_echo_requests_total", "Echo requests sent to peers to renew this node's ownership lease (a majority's echo of its clock within OwnerLeaseTTL).", &c.LeaseEchoRequests},
		{"ringlimit_owner_lease_waits_total", "Checks that found this node without its ownership lease and waited for its renewal.", &c.LeaseWaits},
		{"ringlimit_flood_capped_total", "Entries not kept, or folded, because a structure outside the key budget held MaxKeys (keys handed to a joiner's open marks, states a leaving node keeps for no owner, lease grants of keys with no owned record): their keys stay on the safe side (waiting, or capped).", &c.FloodCapped},
	}
}

// coreCollectors exports the coordination core's counters, its key count
// and its decisions.
func coreCollectors(c *rlsync.Metrics) []prometheus.Collector {
	counters := coreCounters(c)
	out := make([]prometheus.Collector, 0, len(counters)+3)
	for _, k := range counters {
		v := k.v
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: k.name, Help: k.help},
			func() float64 { return float64(v.Load()) }))
	}
	out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlimit_keys", Help: "Keys stored by this node, owned and cached.",
	}, func() float64 { return float64(c.Keys.Load()) }))
	out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlimit_key_bytes", Help: "Memory charged for the keys stored, the backups held for other owners and the hand-offs not yet acknowledged, in bytes (bounded by --max-key-bytes).",
	}, func() float64 { return float64(c.KeyBytes.Load()) }))
	out = append(out, coreDecisions{c})
	out = append(out, clockCollectors(c)...)
	return out
}

// registerDriver registers on reg the counters of the client checks the
// core's driver did not decide: skipped (their caller had stopped waiting
// before the core reached them) and shed (refused, too many queued); and
// the driver's own metrics (its queue's waits and bytes).
func registerDriver(reg prometheus.Registerer, d *peer.Driver) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringlimit_checks_skipped_total",
			Help: "Check calls not decided because their caller had stopped waiting (timed out) before the core reached them."},
			func() float64 { return float64(d.ChecksSkipped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringlimit_checks_shed_total",
			Help: "Check calls refused (Unavailable) because the checks queued in front of the core held too many items."},
			func() float64 { return float64(d.ChecksShed()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for _, c := range d.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// registerHotKeys registers on reg the gauge of the core's hottest keys,
// read from hot (rlsync.Node.HotKeys) at scrape time.
func registerHotKeys(reg prometheus.Registerer, hot func(int) []rlsync.HotKey) error {
	return reg.Register(hotKeys(hot))
}

// hotKeysExported is how many of the hottest keys the metrics list.
const hotKeysExported = 10

// hotKeys exports the core's hottest keys (rlsync.Node.HotKeys) as a gauge
// of their rate, labelled by key and whether this node owns it. The list is
// bounded, so the label's cardinality is too.
type hotKeys func(int) []rlsync.HotKey

var hotKeyDesc = prometheus.NewDesc("ringlimit_hot_key_rate",
	"Decayed demand in hits per second of this node's hottest keys (for an owned key the whole cluster's, for another this node's), sampled by the core's sweep.",
	[]string{"key", "owned"}, nil)

// Describe implements prometheus.Collector.
func (h hotKeys) Describe(ch chan<- *prometheus.Desc) { ch <- hotKeyDesc }

// Collect implements prometheus.Collector.
func (h hotKeys) Collect(ch chan<- prometheus.Metric) {
	for _, k := range h(hotKeysExported) {
		owned := "false"
		if k.Owned {
			owned = "true"
		}
		ch <- prometheus.MustNewConstMetric(hotKeyDesc, prometheus.GaugeValue, k.Rate, k.Key, owned)
	}
}

// coreDecisions exports rlsync.Metrics.Decisions: every request the core
// decided, those forwarded to this node by others included.
type coreDecisions struct{ m *rlsync.Metrics }

var coreDecisionsDesc = prometheus.NewDesc("ringlimit_core_decisions_total",
	"Requests decided by this node's coordination core (forwarded ones included), by mode and outcome.",
	[]string{"mode", "outcome"}, nil)

var outcomeLabels = [3]string{"allowed", "rejected", "error"}

// Describe implements prometheus.Collector.
func (c coreDecisions) Describe(ch chan<- *prometheus.Desc) { ch <- coreDecisionsDesc }

// Collect implements prometheus.Collector.
func (c coreDecisions) Collect(ch chan<- prometheus.Metric) {
	for mode := range c.m.Decisions {
		for outcome := range c.m.Decisions[mode] {
			v := c.m.Decisions[mode][outcome].Load()
			if v == 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(coreDecisionsDesc, prometheus.CounterValue, float64(v),
				check.Mode(mode).String(), outcomeLabels[outcome])
		}
	}
}

// Decision counts one answered item (api.Observer).
func (m *metrics) Decision(alg, reqMode int64, r *check.Response) {
	const maxMode = int64(check.ModeLeased)
	switch {
	case alg == 0:
		alg = int64(bucket.TokenBucket)
	case alg < 0 || alg > int64(bucket.SmoothWarmingUp):
		alg = 0
	}
	mode := int64(r.Mode)
	if mode == 0 && reqMode >= 0 && reqMode <= maxMode {
		mode = reqMode
	}
	if mode < 0 || mode > maxMode {
		mode = 0
	}
	st := 2
	if r.Err == nil {
		st = 1
		if r.Allowed {
			st = 0
		}
	}
	cell := &m.cells[alg][mode][st]
	cell.once.Do(func() {
		algName := "invalid"
		if alg != 0 {
			algName = bucket.Algorithm(alg).String()
		}
		cell.c = m.decisions.WithLabelValues(algName, check.Mode(mode).String(), statusLabels[st])
	})
	cell.c.Inc()
}

// Call records one public call (api.Observer).
func (m *metrics) Call(a api.API, items int, d time.Duration) {
	m.batchItems[a].Observe(float64(items))
	m.callDuration[a].Observe(d.Seconds())
}

// slogPrinter adapts a *slog.Logger to promhttp's error logger.
type slogPrinter struct{ l *slog.Logger }

// Println implements promhttp.Logger.
func (p slogPrinter) Println(v ...any) {
	p.l.Error("metrics", "error", v)
}

// The outcomes of a rules reload, as indexes of rulesMetrics.reloads.
const (
	reloadOK     = 0
	reloadFailed = 1
)

// rulesMetrics are the metrics of the rules file.
type rulesMetrics struct {
	reloads [2]prometheus.Counter // by reloadOK, reloadFailed
}

// newRulesMetrics registers on reg the reload counter and the gauge of the
// rules in force, which reads count at scrape time.
func newRulesMetrics(reg prometheus.Registerer, count func() float64) (*rulesMetrics, error) {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_rules_reloads_total",
		Help: "Reloads of the rules file: result ok (new rules in force, or a forced reload of valid rules) or failed (rejected; the old rules stay).",
	}, []string{"result"})
	m := &rulesMetrics{reloads: [2]prometheus.Counter{
		reloadOK:     reloads.WithLabelValues("ok"),
		reloadFailed: reloads.WithLabelValues("failed"),
	}}
	for _, c := range []prometheus.Collector{reloads, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlimit_rules",
		Help: "Rules in force, from the rules file (0 without one).",
	}, count)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
