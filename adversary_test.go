package ringlimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// TestAdversaryConcurrentFirstSight: small limits (1, 2, 5 a minute) on
// fresh keys, every check of a key sent at the same instant (a barrier)
// through all three nodes, so that several nodes see the key for the first
// time at once, 3 x limit x nodes checks per key. Owner and cached mode
// admit exactly the limit (never more, and no check refused while the key
// had tokens: there is more demand than the limit); leased mode at most
// the limit and at least one (it may hold tokens in a lease, by design).
// No answer is degraded on a healthy cluster.
func TestAdversaryConcurrentFirstSight(t *testing.T) {
	nodes := startCluster(t, 3, patientTimeouts)
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	for _, mode := range []ringlimitv1.Mode{ringlimitv1.Mode_MODE_CACHED, ringlimitv1.Mode_MODE_OWNER, ringlimitv1.Mode_MODE_LEASED} {
		for _, limit := range []int64{1, 2, 5} {
			for k := range 3 {
				key := fmt.Sprintf("burst-%v-%d-%d", mode, limit, k)
				item := &ringlimitv1.CheckItem{Name: "first", UniqueKey: key, Hits: proto.Int64(1), Limit: limit,
					Period: durationpb.New(time.Minute), Mode: mode}
				calls := 3 * int(limit) * len(nodes)
				var admitted, degraded atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make(chan error, calls)
				for i := range calls {
					wg.Go(func() {
						<-start
						via := i % len(nodes)
						resp, err := clients[via].Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{item}})
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
							errs <- fmt.Errorf("call %d via %s: %v %s", i, nodes[via].Name(), r.Status, r.Error)
						}
						if r.Degraded {
							degraded.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("%v limit %d key %s: %v", mode, limit, key, err)
				}
				got := admitted.Load()
				switch {
				case got > limit:
					t.Errorf("%v limit %d/min key %s: %d of %d simultaneous checks admitted, above the limit", mode, limit, key, got, calls)
				case mode != ringlimitv1.Mode_MODE_LEASED && got != limit:
					t.Errorf("%v limit %d/min key %s: %d of %d simultaneous checks admitted, want exactly %d (a check refused while the key had tokens)", mode, limit, key, got, calls, limit)
				case got < 1:
					t.Errorf("%v limit %d/min key %s: nothing admitted of %d checks", mode, limit, key, calls)
				}
				if degraded.Load() != 0 {
					t.Errorf("%v limit %d key %s: %d answers degraded on a healthy cluster", mode, limit, key, degraded.Load())
				}
				t.Logf("%v limit %d/min key %s: %d of %d simultaneous checks admitted", mode, limit, key, got, calls)
			}
		}
	}
}

// TestAdversaryLeaveUnderConcurrentClients: the graceful-leave twin of
// TestJoinUnderConcurrentClients. 32 goroutines check keys of 500 an hour
// owned by n4, round robin through all four nodes, while n4 leaves
// gracefully (Shutdown: drain, hand off, leave) mid-spend; the keys move to
// the three others. Checks through n4 once its leave started may fail
// (Unavailable); they are not counted. Owner and leased mode admit at most
// the limit, cached mode at most the limit plus its drift bound
// (f·C + N·h = 10 + 4, and 2 for the round trip), under fail-closed and
// local-share. Every key ends spent, less what the modes document they
// may lose: owner mode up to one reserve (10% of the capacity: the new
// owner restores the leaving owner's backup with its reserve drained,
// docs/consistency.md, "Fencing"), at least 450; leased mode by design
// more (tokens held in leases), at least 350 here. Measured on 2026-11-26,
// 2 runs: owner 457 to 474, leased 413 to 445, cached 499 to 500.
//
// The same with keys owned by the three others (the leaver a non-owner
// holding views, pending hits and leases, which its leave flushes and
// returns): measured (2 runs) owner 500, leased 468 to 489, cached 499
// to 501; with n4 the owner (2 more runs): owner 450 to 469, leased 420
// to 457, cached 499 to 501.
func TestAdversaryLeaveUnderConcurrentClients(t *testing.T) {
	for _, pol := range []ringlimitv1.Policy{ringlimitv1.Policy_POLICY_FAIL_CLOSED, ringlimitv1.Policy_POLICY_LOCAL_SHARE} {
		t.Run(pol.String(), func(t *testing.T) { leaveUnderConcurrentClients(t, pol, true) })
		t.Run(pol.String()+"/non-owner", func(t *testing.T) { leaveUnderConcurrentClients(t, pol, false) })
	}
}

func leaveUnderConcurrentClients(t *testing.T, pol ringlimitv1.Policy, ownedByLeaver bool) {
	nodes := startCluster(t, 4, patientTimeouts)
	const limit, keysPerMode = 500, 3
	before, err := ring.New(DefaultConfig().Sync.Ring, "n1", "n2", "n3", "n4")
	if err != nil {
		t.Fatal(err)
	}
	keys := trackedKeys(before, "leave", fmt.Sprintf("leave-%v", pol), keysPerMode, limit, pol,
		[]modeBounds{{ringlimitv1.Mode_MODE_OWNER, 0, 450}, {ringlimitv1.Mode_MODE_CACHED, 16, 100}, {ringlimitv1.Mode_MODE_LEASED, 0, 350}},
		func(owner string) bool { return (owner == "n4") == ownedByLeaver })
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	var (
		wg              sync.WaitGroup
		calls, stopAt   atomic.Int64
		leaving         atomic.Bool
		viaLeaverFailed atomic.Int64
	)
	errs := make(chan error, 64)
	stopAt.Store(400000)
	start := time.Now()
	for w := range 32 {
		wg.Go(func() {
			for i := w; ; i++ {
				if calls.Add(1) > stopAt.Load() {
					return
				}
				k := keys[i%len(keys)]
				via := i % len(clients)
				if via == 3 && leaving.Load() {
					via = i % 3
				}
				wasLeaving := leaving.Load()
				resp, err := clients[via].Check(t.Context(), &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{k.item}})
				if err != nil {
					if via == 3 && (wasLeaving || leaving.Load()) {
						viaLeaverFailed.Add(1)
						continue
					}
					errs <- fmt.Errorf("via %s: %w", nodes[via].Name(), err)
					return
				}
				if resp.Items[0].Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
					k.admitted.Add(1)
				}
			}
		})
	}
	// The leave starts once about a fifth of the keys' tokens are spent.
	waitFor(t, 30*time.Second, "load under way", func() bool { return calls.Load() > int64(len(keys))*limit/5 })
	leaving.Store(true)
	atLeave := calls.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err = nodes[3].Shutdown(ctx)
	cancel()
	if err != nil {
		t.Errorf("n4's graceful leave: %v", err)
	}
	waitMembers(t, nodes[:3], []string{"n1", "n2", "n3"})
	afterLeave := calls.Load()
	// Enough calls after the leave to spend every key.
	stopAt.Store(afterLeave + int64(len(keys))*limit*2)
	wg.Wait()
	span := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkTracked(t, keys, limit, span, fmt.Sprintf("n4's leave (n4 owns the keys: %v)", ownedByLeaver))
	t.Logf("leave started after %d calls, membership settled after %d, %d calls in all; %d calls through n4 failed during its leave",
		atLeave, afterLeave, calls.Load(), viaLeaverFailed.Load())
}

// TestAdversaryParametersAcrossNodes: a key spent at its owner stays spent
// whatever parameters checks through the other nodes name, in owner mode
// and in cached mode (a small key, whose checks go to the owner, and a
// large one, decided on the non-owners' views): a limit of 10^18 per
// nanosecond, a burst of 10^18, hits of 2^63-1, a peek under another
// period followed by a check, the token bucket named explicitly. Then 20
// plain checks through each node: nothing is admitted.
func TestAdversaryParametersAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3, patientTimeouts)
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	for _, tc := range []struct {
		mode  ringlimitv1.Mode
		limit int64
	}{{ringlimitv1.Mode_MODE_OWNER, 5}, {ringlimitv1.Mode_MODE_CACHED, 5}, {ringlimitv1.Mode_MODE_CACHED, 1000}, {ringlimitv1.Mode_MODE_LEASED, 5}} {
		t.Run(fmt.Sprintf("%v-%d", tc.mode, tc.limit), func(t *testing.T) {
			key := fmt.Sprintf("param-%v-%d", tc.mode, tc.limit)
			plain := &ringlimitv1.CheckItem{Name: "param", UniqueKey: key, Hits: proto.Int64(1), Limit: tc.limit,
				Period: durationpb.New(time.Hour), Mode: tc.mode}
			owner, err := nodes[0].Owner("param", key)
			if err != nil {
				t.Fatal(err)
			}
			oi := int(owner[1] - '1')
			// Spend the key at its owner, in owner mode (exact).
			spend := proto.Clone(plain).(*ringlimitv1.CheckItem)
			spend.Hits, spend.Mode = proto.Int64(tc.limit), ringlimitv1.Mode_MODE_OWNER
			if r := checkOne(t, clients[oi], spend); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
				t.Fatalf("spending %s at its owner %s: %v", key, owner, r)
			}
			// Every node's view shows it spent (a peek syncs a view).
			peek := proto.Clone(plain).(*ringlimitv1.CheckItem)
			peek.Hits = proto.Int64(0)
			for i, c := range clients {
				waitFor(t, 10*time.Second, fmt.Sprintf("%s's view of %s spent", nodes[i].Name(), key), func() bool {
					return checkOne(t, c, peek).Remaining == 0
				})
			}
			variants := map[string]func(*ringlimitv1.CheckItem){
				"limit 10^18 per ns": func(it *ringlimitv1.CheckItem) {
					it.Limit, it.Period = 1_000_000_000_000_000_000, durationpb.New(time.Nanosecond)
				},
				"burst 10^18": func(it *ringlimitv1.CheckItem) { it.Burst = 1_000_000_000_000_000_000 },
				"period 1ns":  func(it *ringlimitv1.CheckItem) { it.Period = durationpb.New(time.Nanosecond) },
				"limit 10^18 per ns, burst 10^18, token bucket named": func(it *ringlimitv1.CheckItem) {
					it.Limit, it.Period, it.Burst = 1_000_000_000_000_000_000, durationpb.New(time.Nanosecond), 1_000_000_000_000_000_000
					it.Algorithm = ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET
				},
				"hits 2^63-1": func(it *ringlimitv1.CheckItem) { it.Hits = proto.Int64(math.MaxInt64) },
			}
			admitted := 0
			for name, edit := range variants {
				for i, c := range clients {
					it := proto.Clone(plain).(*ringlimitv1.CheckItem)
					edit(it)
					p := proto.Clone(it).(*ringlimitv1.CheckItem)
					p.Hits = proto.Int64(0)
					checkOne(t, c, p) // a peek first, under the same parameters
					for range 3 {
						r := checkOne(t, c, it)
						if r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
							admitted++
							t.Errorf("%s via %s: admitted on a spent key: %v", name, nodes[i].Name(), r)
						}
						if r.Reconfigured {
							t.Errorf("%s via %s: a spent key reconfigured: %v", name, nodes[i].Name(), r)
						}
					}
				}
			}
			for i, c := range clients {
				for range 20 {
					if r := checkOne(t, c, plain); r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
						admitted++
						t.Errorf("plain check via %s after the attempts: admitted: %v", nodes[i].Name(), r)
					}
				}
			}
			t.Logf("%v key of %d an hour spent at %s: %d admitted after %d attempts and 60 plain checks", tc.mode, tc.limit, owner, admitted, len(variants)*3*3)
		})
	}
}

// TestAdversaryViewFloodResetsCachedKey, real nodes: a key of 1000 an
// hour (large enough for cached mode's shares at 3 nodes) is spent at its
// owner, and both non-owners' views show it spent. Then, five rounds: a
// non-owner (alternating the two) is flooded with 3 calls of 1000 fresh
// local-mode keys, past its MaxKeys of 512, which evicts its view; one call
// of 1000 one-hit cached checks through it; wait until its view shows the
// key spent again. Each
// round's view used to start fresh (views were not marked on eviction)
// and admit the first-sight share C/N = 333 before the owner's answer:
// 1665 admitted on top of the spent 1000 in 89 ms, for a bound of one
// bucket + cached mode's drift, about 1000 + 23. Now a view evicted is
// marked, and the key's checks go to the owner until its answer syncs
// the view again (sync/evicted.go, viewMarked): 0 more (3 runs).
//
//	go test -count=1 -run TestAdversaryViewFloodResetsCachedKey -v .
func TestAdversaryViewFloodResetsCachedKey(t *testing.T) {
	nodes := startCluster(t, 3, func(c *Config) {
		patientTimeouts(c)
		c.Sync.MaxKeys = 512
	})
	var clients []ringlimitv1.RateLimiterClient
	for _, n := range nodes {
		clients = append(clients, dial(t, n))
	}
	const limit = 1000
	key := "victim"
	plain := &ringlimitv1.CheckItem{Name: "vflood", UniqueKey: key, Hits: proto.Int64(1), Limit: limit,
		Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_CACHED}
	owner, err := nodes[0].Owner("vflood", key)
	if err != nil {
		t.Fatal(err)
	}
	oi := int(owner[1] - '1')
	var others []int
	for i := range nodes {
		if i != oi {
			others = append(others, i)
		}
	}
	spend := proto.Clone(plain).(*ringlimitv1.CheckItem)
	spend.Hits, spend.Mode = proto.Int64(limit), ringlimitv1.Mode_MODE_OWNER
	if r := checkOne(t, clients[oi], spend); r.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
		t.Fatalf("spending at the owner %s: %v", owner, r)
	}
	peek := proto.Clone(plain).(*ringlimitv1.CheckItem)
	peek.Hits = proto.Int64(0)
	// The non-owners have seen the key (a peek): their views show it spent.
	// A first sight admits C/N before the owner's answer, the documented
	// rule; what follows are views that existed and were evicted.
	// synced waits until every flush x sent was answered, and more than
	// after were (a view with nothing to flush and nothing in flight can
	// be evicted; a check or a peek makes it dirty until its next flush).
	synced := func(x int, after float64) float64 {
		var acked float64
		waitFor(t, 10*time.Second, nodes[x].Name()+"'s flushes answered", func() bool {
			acked = gatherValue(t, nodes[x], "ringlimit_flushes_acked_total")
			return acked > after && acked == gatherValue(t, nodes[x], "ringlimit_flushes_sent_total")
		})
		return acked
	}
	acked := make([]float64, len(nodes))
	for _, x := range others {
		if r := checkOne(t, clients[x], peek); r.Status == ringlimitv1.Status_STATUS_ERROR {
			t.Fatal(r)
		}
		acked[x] = synced(x, 0)
	}
	start := time.Now()
	total := 0
	for round := range 5 {
		x := others[round%len(others)]
		ev := gatherValue(t, nodes[x], "ringlimit_evicted_total")
		// The flood's keys sort after the victim's: of keys last used in
		// the same coarse instant (16.7 ms), the eviction takes the
		// smallest first, so the view goes whatever the timing.
		for c := range 3 {
			req := &ringlimitv1.CheckRequest{}
			for k := range 1000 {
				req.Items = append(req.Items, &ringlimitv1.CheckItem{Name: "zflood", UniqueKey: fmt.Sprintf("r%d-c%d-k%d", round, c, k),
					Hits: proto.Int64(1), Limit: 100, Period: durationpb.New(time.Hour), Mode: ringlimitv1.Mode_MODE_LOCAL})
			}
			if _, err := clients[x].Check(t.Context(), req); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("round %d: %s evicted %v keys", round, nodes[x].Name(), gatherValue(t, nodes[x], "ringlimit_evicted_total")-ev)
		resp, err := clients[x].Check(t.Context(), batchOf(key, plain, 1000))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, r := range resp.Items {
			if r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				got++
			}
		}
		total += got
		t.Logf("round %d via %s (non-owner; owner %s): %d of 1000 admitted", round, nodes[x].Name(), owner, got)
		// Now the view's checks go to the owner until its answer syncs the
		// view (they were decided on a fresh view, and flushed, before):
		// whatever x flushed was answered.
		acked[x] = synced(x, -1)
	}
	for _, x := range others {
		if r := checkOne(t, clients[x], peek); r.Remaining != 0 {
			t.Errorf("%s's view after the rounds: %d remaining, want the key spent", nodes[x].Name(), r.Remaining)
		}
	}
	elapsed := time.Since(start)
	bound := 0.02*limit + float64(limit)/3600*(elapsed.Seconds()+0.2) + 3
	t.Logf("a spent key of %d an hour: %d more admitted in %v through non-owners flooded between bursts; drift bound %.1f",
		limit, total, elapsed.Round(time.Millisecond), bound)
	if float64(total) > bound {
		t.Errorf("%d admitted on a spent key of %d an hour, above cached mode's drift bound %.1f", total, limit, bound)
	}
}

// TestFloodKeepsConcurrencyPermitsHeld: a concurrency limit of 5 permits
// (lease timeout an hour) held by five holders; a stranger floods the node
// with 5 calls of 1000 fresh keys past its MaxKeys of 512, which evicts
// the key, three times, and five new holders try to acquire after each
// flood. An evicted semaphore restarted with no permit held: 5 more per
// flood, 20 held at once for a limit of 5. It is now marked (evicted.go,
// evictMarkable) and restarts with every permit held until the latest
// expiry: 0 more. (TestEvictedSemaphoreMarkedOnlyWhenHeld, in sync/:
// a semaphore idle when evicted restarts free.)
func TestFloodKeepsConcurrencyPermitsHeld(t *testing.T) {
	for _, mode := range []ringlimitv1.Mode{ringlimitv1.Mode_MODE_OWNER, ringlimitv1.Mode_MODE_LOCAL} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes := startCluster(t, 1, func(c *Config) { c.Sync.MaxKeys = 512 })
			cl := dial(t, nodes[0])
			acquire := func(holder string) bool {
				return checkOne(t, cl, &ringlimitv1.CheckItem{Name: "conns", UniqueKey: "alice", Hits: proto.Int64(1), Limit: 5,
					Period: durationpb.New(time.Hour), Algorithm: ringlimitv1.Algorithm_ALGORITHM_CONCURRENCY, Lease: holder, Mode: mode}).Status == ringlimitv1.Status_STATUS_UNDER_LIMIT
			}
			held := 0
			for i := range 6 {
				if acquire(fmt.Sprintf("a%d", i)) {
					held++
				}
			}
			if held != 5 {
				t.Fatalf("before the flood: %d permits of 5 acquired by 6 holders", held)
			}
			flood := func(round int) {
				for c := range 5 {
					req := &ringlimitv1.CheckRequest{}
					for k := range 1000 {
						req.Items = append(req.Items, &ringlimitv1.CheckItem{Name: "flood", UniqueKey: fmt.Sprintf("r%d-c%d-k%d", round, c, k),
							Hits: proto.Int64(1), Limit: 100, Period: durationpb.New(time.Hour), Mode: mode})
					}
					if _, err := cl.Check(t.Context(), req); err != nil {
						t.Fatal(err)
					}
				}
			}
			for round := range 3 {
				flood(round)
				more := 0
				for i := range 5 {
					if acquire(fmt.Sprintf("r%d-%d", round, i)) {
						more++
					}
				}
				held += more
				t.Logf("flood %d: %d more permits acquired; %d held at once for a limit of 5", round, more, held)
			}
			if held > 5 {
				t.Errorf("%d permits held at once (none released, lease timeout an hour) for a concurrency limit of 5", held)
			}
		})
	}
}
