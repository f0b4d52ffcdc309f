package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// loadResult is what one load run admitted, against a single bucket fed the
// merged arrival stream (the ideal).
type loadResult struct {
	checks, admitted, ideal int64
	// worstWindow is the largest over-admission (admitted - ideal) over any
	// aligned window of length window.
	worstWindow int64
	perNode     map[string]int64
	messages    int
	bytes       int
}

func (r loadResult) over() float64 {
	return float64(r.admitted-r.ideal) / float64(r.ideal) * 100
}

// runLoad drives nodes with rate checks per second of one key, spread evenly
// (round robin) over every node, for d of virtual time, and feeds the same
// arrivals to an ideal single bucket.
//
// With on < every, the load is bursty: on for on at the start of every
// period of length every, idle the rest (nodes keep ticking).
func runLoad(t testing.TB, nw *testNet, mode check.Mode, l bucket.Limit, rate int, d, window, on, every time.Duration) loadResult {
	return runLoadOn(t, nw, nw.names, mode, l, rate, d, window, on, every)
}

// runLoadOn is runLoad with the checks spread over the nodes clients only.
func runLoadOn(t testing.TB, nw *testNet, clients []string, mode check.Mode, l bucket.Limit, rate int, d, window, on, every time.Duration) loadResult {
	t.Helper()
	key := "user:42"
	ideal, err := bucket.New(l, nw.now)
	if err != nil {
		t.Fatal(err)
	}
	res := loadResult{perNode: map[string]int64{}}
	gap := time.Second / time.Duration(rate)
	start := nw.now
	end := start.Add(d)
	tickEvery := nw.nodes[nw.names[0]].cfg.TickInterval
	nextTick := start
	var winAdm, winIdeal int64
	winEnd := start.Add(window)
	reqs := []check.Request{{Key: key, Hits: 1, Limit: l, Mode: mode}}
	i := 0
	msgs0, bytes0 := 0, nw.bytes
	for _, c := range nw.sent {
		msgs0 += c
	}
	for at := start; at.Before(end); at = at.Add(gap) {
		for !nextTick.After(at) {
			nw.deliver(nextTick)
			nw.tick()
			nextTick = nextTick.Add(tickEvery)
		}
		nw.deliver(at)
		if at.Sub(start)%every >= on {
			continue
		}
		if !at.Before(winEnd) {
			res.worstWindow = max(res.worstWindow, winAdm-winIdeal)
			winAdm, winIdeal = 0, 0
			winEnd = winEnd.Add(window)
		}
		name := clients[i%len(clients)]
		i++
		resps := make([]check.Response, 1)
		nw.nodes[name].Check(at, reqs, resps, func() {
			if resps[0].Err != nil {
				t.Fatalf("check at %v on %s: %v", at.Sub(start), name, resps[0].Err)
			}
			if resps[0].Allowed {
				res.admitted++
				winAdm++
				res.perNode[name]++
			}
		})
		res.checks++
		if d, _ := ideal.Take(at, 1); d.Allowed {
			res.ideal++
			winIdeal++
		}
	}
	nw.settle()
	res.worstWindow = max(res.worstWindow, winAdm-winIdeal)
	for _, c := range nw.sent {
		res.messages += c
	}
	res.messages -= msgs0
	res.bytes = nw.bytes - bytes0
	return res
}

// TestCachedOverAdmission is the accuracy scenario of docs/consistency.md:
// three nodes, one key, 1000 per minute, 9000 checks a second spread evenly,
// 100ms flush interval, 1ms latency. The cluster admits within 2% of a
// single bucket fed the merged stream; leased mode never admits more.
func TestCachedOverAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario")
	}
	for _, tc := range []struct {
		mode    check.Mode
		rate    int
		maxOver float64
	}{
		{check.ModeCached, 9000, 2},
		{check.ModeCached, 3700, 2},
		{check.ModeLeased, 9000, 0},
		{check.ModeOwner, 9000, 0.05},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.mode, tc.rate), func(t *testing.T) {
			nw := newTestNet(t, nil, "a", "b", "c")
			r := runLoad(t, nw, tc.mode, perMinute(1000), tc.rate, 3*time.Minute, time.Minute, time.Minute, time.Minute)
			t.Logf("%v %d/s: checks %d admitted %d ideal %d over %+.2f%% worst minute %+d; per node %v; %d msgs %d bytes (%.4f msgs, %.3f bytes per decision)",
				tc.mode, tc.rate, r.checks, r.admitted, r.ideal, r.over(), r.worstWindow, r.perNode,
				r.messages, r.bytes, float64(r.messages)/float64(r.checks), float64(r.bytes)/float64(r.checks))
			if r.over() > tc.maxOver {
				t.Errorf("over-admission %.2f%% > %.2f%%", r.over(), tc.maxOver)
			}
		})
	}
}

// TestBurstAfterIdle: the key idles long enough to refill between bursts of
// 9000 checks a second, so at each burst every node's view shows a full
// bucket. This is where a naive non-owner (deciding on its view alone)
// over-admits up to N times the burst within a flush interval; the share
// rule holds each node to its share.
func TestBurstAfterIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario")
	}
	for _, tc := range []struct {
		mode    check.Mode
		maxOver float64
	}{
		{check.ModeCached, 2},
		{check.ModeLeased, 0},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			nw := newTestNet(t, nil, "a", "b", "c")
			// 2s bursts every 70s: a burst window sees 1000 + 2s of refill.
			r := runLoad(t, nw, tc.mode, perMinute(1000), 9000, 5*70*time.Second, 70*time.Second, 2*time.Second, 70*time.Second)
			t.Logf("%v bursts: checks %d admitted %d ideal %d over %+.2f%% worst burst %+d; per node %v; %d msgs",
				tc.mode, r.checks, r.admitted, r.ideal, r.over(), r.worstWindow, r.perNode, r.messages)
			if r.over() > tc.maxOver {
				t.Errorf("over-admission %.2f%% > %.2f%%", r.over(), tc.maxOver)
			}
		})
	}
}

// TestCachedDriftGrid logs cached mode's over-admission for 3 and 10 nodes
// at 1ms and 20ms latency, steady (9000/s for 2 minutes) and bursty (2s
// bursts at 9000/s after 68s idle, 3 bursts): the table of
// docs/consistency.md. It asserts the 2% bound where the bound's
// assumption (a round trip well under the flush interval) holds.
func TestCachedDriftGrid(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario")
	}
	for _, nodes := range []int{3, 10} {
		for _, lat := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
			names := make([]string, nodes)
			for i := range names {
				names[i] = fmt.Sprintf("n%d", i)
			}
			nw := newTestNet(t, nil, names...)
			nw.latency = lat
			steady := runLoad(t, nw, check.ModeCached, perMinute(1000), 9000, 2*time.Minute, time.Minute, time.Minute, time.Minute)
			nw = newTestNet(t, nil, names...)
			nw.latency = lat
			bursts := runLoad(t, nw, check.ModeCached, perMinute(1000), 9000, 3*70*time.Second, 70*time.Second, 2*time.Second, 70*time.Second)
			t.Logf("N=%2d latency %4v: steady %+.2f%% (worst minute %+d, %.4f msgs/decision) | bursts %+.2f%% (worst burst %+d of %d)",
				nodes, lat, steady.over(), steady.worstWindow, float64(steady.messages)/float64(steady.checks),
				bursts.over(), bursts.worstWindow, bursts.ideal/3)
			if lat == time.Millisecond && (steady.over() > 2 || bursts.over() > 2) {
				t.Errorf("N=%d: over-admission above 2%%", nodes)
			}
		}
	}
}

// TestLeasedUnderAdmission measures what leased mode gives up for never
// exceeding the limit: all the traffic lands on the two non-owners, so every
// admission is spent from a lease (the owner admits nothing itself).
func TestLeasedUnderAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario")
	}
	for _, rate := range []int{9000, 100} {
		nw := newTestNet(t, nil, "a", "b", "c")
		key := "user:42"
		owner := nw.nodes["a"].view.owner(key)
		var clients []string
		for _, n := range nw.names {
			if n != owner {
				clients = append(clients, n)
			}
		}
		r := runLoadOn(t, nw, clients, check.ModeLeased, perMinute(1000), rate, 3*time.Minute, time.Minute, time.Minute, time.Minute)
		t.Logf("leased %d/s on non-owners only: admitted %d ideal %d (%+.2f%%); per node %v; %d msgs",
			rate, r.admitted, r.ideal, r.over(), r.perNode, r.messages)
		if r.admitted > r.ideal {
			t.Errorf("leased admitted %d > ideal %d", r.admitted, r.ideal)
		}
		if r.over() < -5 {
			t.Errorf("leased under-admitted %.2f%%, want within 5%%", r.over())
		}
	}
}
