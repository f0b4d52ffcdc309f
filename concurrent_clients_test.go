package ringlimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/api"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Many clients on one key, as production has them: 64 goroutines call three
// real nodes over gRPC, round robin, on one key of 1000 per minute, 5000
// calls in all. Every mode must stay within what it documents: owner and
// leased mode within one bucket (capacity + refill over the run), cached
// mode within one bucket plus its drift bound (docs/consistency.md, "The
// drift bound": f·C + r·(F+δ) + N·h, about 25 hits here; 40 allows for the
// round trip of a loaded machine).
//
// Before the core took its inputs in one order, the cached run admitted up
// to 1131 (a check decided on state another goroutine changed under it).
func TestConcurrentClientsOneKeyEachMode(t *testing.T) {
	nodes := startCluster(t, 3, patientTimeouts)
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	const (
		limit   = 1000
		calls   = 5000
		workers = 64
	)
	for _, tc := range []struct {
		mode  ringlimitv1.Mode
		slack float64 // hits allowed above one bucket
	}{
		{ringlimitv1.Mode_MODE_OWNER, 0},
		{ringlimitv1.Mode_MODE_LEASED, 0},
		{ringlimitv1.Mode_MODE_CACHED, 40},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			item := perMinute("clients-"+tc.mode.String(), limit, tc.mode)
			var next, admitted, degraded atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			start := time.Now()
			for range workers {
				wg.Go(func() {
					req := &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item}}
					for i := next.Add(1) - 1; i < calls; i = next.Add(1) - 1 {
						via := i % int64(len(nodes))
						resp, err := clients[via].Check(t.Context(), req)
						if err != nil {
							errs <- fmt.Errorf("call %d via %s: %w", i, nodes[via].Name(), err)
							return
						}
						r := resp.Items[0]
						switch r.Status {
						case ringlimitv1.Status_STATUS_UNDER_LIMIT:
							admitted.Add(1)
						case ringlimitv1.Status_STATUS_OVER_LIMIT:
						default:
							errs <- fmt.Errorf("call %d via %s: status %v (%s)", i, nodes[via].Name(), r.Status, r.Error)
							return
						}
						if r.Degraded {
							degraded.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			ideal := float64(limit) + float64(limit)/60*elapsed.Seconds()
			t.Logf("%v: %d of %d admitted in %v; one bucket admits %.1f; degraded %d",
				tc.mode, admitted.Load(), calls, elapsed.Round(time.Millisecond), ideal, degraded.Load())
			if degraded.Load() != 0 {
				t.Errorf("%d answers decided without the owner on a healthy cluster", degraded.Load())
			}
			if got := float64(admitted.Load()); got > ideal+tc.slack {
				t.Errorf("%v: admitted %d, above one bucket (%.1f) + %.0f", tc.mode, admitted.Load(), ideal, tc.slack)
			}
			if got := float64(admitted.Load()); got < float64(limit)*0.95 {
				t.Errorf("%v: admitted %d, under 95%% of the capacity %d: the key was starved", tc.mode, admitted.Load(), limit)
			}
		})
	}
}

// The zombie owner through real nodes: 32 goroutines hammer keys of 100 per
// hour through every node while a fourth node joins and becomes their owner.
// Each key moves from one of the first three to the newcomer; whatever
// order the nodes learn of the join in, the cluster admits at most the
// limit in owner and leased mode, and at most the limit plus cached mode's
// drift bound in cached mode. (Before the core took its
// inputs in one order, a check that read the ring before its node's
// membership change and decided after it resurrected the old owner's
// bucket: 198 for 100.)
//
// It runs with both fail-closed and the default policy, local-share, and in
// leased mode too. Before every admission was charged once (issue #15) and
// ownership was fenced, local-share admitted up to 106 for 100 in owner mode
// and 124 in cached mode here, and leased mode 103 once under make race;
// on 2026-11-26, 16 runs (8 per policy) admitted exactly 100 on every owner
// and leased key and 100 to 103 on the cached ones.
func TestJoinUnderConcurrentClients(t *testing.T) {
	for _, pol := range []ringlimitv1.Policy{ringlimitv1.Policy_POLICY_FAIL_CLOSED, ringlimitv1.Policy_POLICY_LOCAL_SHARE} {
		t.Run(pol.String(), func(t *testing.T) { joinUnderConcurrentClients(t, pol) })
	}
}

func joinUnderConcurrentClients(t *testing.T, pol ringlimitv1.Policy) {
	nodes := startCluster(t, 3, patientTimeouts)
	const keysPerMode = 4
	after := []string{"n1", "n2", "n3", "n4"}
	future, err := ring.New(DefaultConfig().Sync.Ring, after...)
	if err != nil {
		t.Fatal(err)
	}
	// Owner mode spends the key; cached mode's non-owners can stay on
	// their first-sight share (limit / members) through a join's ring
	// disagreement, an under-admission.
	keys := trackedKeys(future, "join", "join", keysPerMode, 100, pol,
		[]modeBounds{{ringlimitv1.Mode_MODE_OWNER, 0, 90}, {ringlimitv1.Mode_MODE_CACHED, 8, 20}, {ringlimitv1.Mode_MODE_LEASED, 0, 90}},
		func(owner string) bool { return owner == "n4" })
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	// The load runs until stopAt calls were made: first a bound, then, once
	// every node sees the newcomer, 2000 calls more.
	var calls, stopAt atomic.Int64
	stopAt.Store(200000)
	start := time.Now()
	for w := range 32 {
		wg.Go(func() {
			for i := w; ; i++ {
				if calls.Add(1) > stopAt.Load() {
					return
				}
				k := keys[i%len(keys)]
				resp, err := clients[i%len(clients)].Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{k.item}})
				if err != nil {
					errs <- err
					return
				}
				if resp.Items[0].Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
					k.admitted.Add(1)
				}
			}
		})
	}
	// The join happens while the load runs.
	cfg := testConfig("n4", nodes[0].GossipAddr())
	patientTimeouts(&cfg)
	n4 := startNode(t, cfg)
	waitMembers(t, append(nodes, n4), after)
	stopAt.Store(calls.Load() + 2000)
	wg.Wait()
	span := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkTracked(t, keys, 100, span, "n4's join")
	t.Logf("%d calls across the join", calls.Load())
}

// patientTimeouts gives a node request timeouts far above what a loaded
// machine (the race detector, other tests) takes for a round trip on
// loopback: the tests that use it look at what the modes admit on a healthy
// cluster, which a timed-out forward would turn into a partition-policy
// decision.
func patientTimeouts(c *Config) {
	c.Sync.RequestTimeout = 5 * time.Second
	c.Sync.OwnerLeaseTTL = 10 * time.Second // at least 2 x RequestTimeout
	c.API.CheckTimeout = 20 * time.Second
}

// trackedKey is a key the clients of a membership-change test check: what
// it admitted, what its mode may admit above the limit (slack), and what
// it must admit at least (least).
type trackedKey struct {
	item         *ringlimitv1.CheckItem
	admitted     atomic.Int64
	slack, least int64
}

// modeBounds is a mode's slack and least for trackedKeys.
type modeBounds struct {
	mode         ringlimitv1.Mode
	slack, least int64
}

// trackedKeys returns perMode keys of each mode of modes, of limit an
// hour under pol, named prefix-<mode>-<i> under rule name, whose owner on
// r satisfies owned.
func trackedKeys(r *ring.Ring, name, prefix string, perMode int, limit int64, pol ringlimitv1.Policy, modes []modeBounds, owned func(string) bool) []*trackedKey {
	var keys []*trackedKey
	for _, m := range modes {
		found := 0
		for i := 0; found < perMode && i < 100000; i++ {
			k := fmt.Sprintf("%s-%v-%d", prefix, m.mode, i)
			if o, _ := r.Owner(api.Key(name, k)); !owned(o) {
				continue
			}
			found++
			keys = append(keys, &trackedKey{item: &ringlimitv1.CheckItem{Name: name, UniqueKey: k, Hits: proto.Int64(1), Limit: limit,
				Period: durationpb.New(time.Hour), Mode: m.mode, Policy: pol}, slack: m.slack, least: m.least})
		}
	}
	return keys
}

// checkTracked fails t for every key that admitted more than its token
// bucket's envelope and its slack across change, or less than its least.
// The keys are limit an hour (trackedKeys), and span is the wall time
// from before the clients' first call to after their last: the envelope
// is the burst, limit, plus the refill over span, limit × span / hour
// (under the race detector a run lasts long enough for a token or two:
// 501 of 500 over 8.7 s was once reported as over the limit).
func checkTracked(t *testing.T, keys []*trackedKey, limit int64, span time.Duration, change string) {
	t.Helper()
	envelope := limit + int64(float64(limit)*span.Hours())
	for _, k := range keys {
		got := k.admitted.Load()
		t.Logf("%v key %s: %d admitted across %s in %v (envelope %d)", k.item.Mode, k.item.UniqueKey, got, change, span.Round(time.Millisecond), envelope)
		if got > envelope+k.slack {
			t.Errorf("%v key %s: %d admitted across %s, limit %d, envelope over %v %d (+%d allowed)", k.item.Mode, k.item.UniqueKey, got, change, limit, span.Round(time.Millisecond), envelope, k.slack)
		}
		if got < k.least {
			t.Errorf("%v key %s: %d admitted, want the key spent (at least %d of %d) by the end", k.item.Mode, k.item.UniqueKey, got, k.least, limit)
		}
	}
}
