package peer

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Reconnection, in the manner of Serf's reconnect: memberlist probes and
// gossips only with live members (and briefly with the dead), and a Cluster
// joins its seeds only at start, so after a partition that outlasts failure
// detection each side would go on without the other for good. While a seed
// or a member that failed is missing from the membership, the Cluster joins
// it again every ReconnectInterval: the push/pull of a join tells each side
// that the other is alive, and each refutes the other's view that it died.

// reconnectTargets returns, sorted and without duplicates, the gossip
// addresses ("ip:port") to join again at now:
//
//   - every member that failed less than timeout before now;
//   - every seed (each seed given as the addresses it resolves to) none of
//     whose addresses is a live member's;
//
// leaving out the addresses of live members and of members that left
// gracefully less than timeout before now (those are not brought back).
// live holds the live members' gossip addresses, this node's included.
func reconnectTargets(now time.Time, timeout time.Duration, seeds [][]string, live []string, failed, left map[string]departed) []string {
	isLive := make(map[string]bool, len(live))
	for _, a := range live {
		isLive[a] = true
	}
	gone := map[string]bool{}
	for _, x := range left {
		if now.Sub(x.at) < timeout {
			gone[x.addr] = true
		}
	}
	var out []string
	add := func(a string) {
		if a != "" && !isLive[a] && !gone[a] {
			out = append(out, a)
		}
	}
	for _, x := range failed {
		if now.Sub(x.at) < timeout {
			add(x.addr)
		}
	}
	for _, addrs := range seeds {
		if !slices.ContainsFunc(addrs, func(a string) bool { return isLive[a] }) {
			for _, a := range addrs {
				add(a)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// reconnectWait returns the wait before the next attempt: interval drawn
// within ±25% by u in [0, 1).
func reconnectWait(interval time.Duration, u float64) time.Duration {
	return interval*3/4 + time.Duration(u*float64(interval/2))
}

// resolveSeeds returns each seed as the "ip:port" addresses it resolves to
// (port defaults to port). A seed that does not resolve is kept as given:
// joining it reports the error.
func resolveSeeds(ctx context.Context, seeds []string, port int) [][]string {
	out := make([][]string, 0, len(seeds))
	for _, s := range seeds {
		host, p, err := net.SplitHostPort(s)
		if err != nil {
			host, p = s, strconv.Itoa(port)
		}
		if ip := net.ParseIP(host); ip != nil {
			out = append(out, []string{net.JoinHostPort(ip.String(), p)})
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ips, err := net.DefaultResolver.LookupIPAddr(rctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			out = append(out, []string{s})
			continue
		}
		addrs := make([]string, len(ips))
		for i, ip := range ips {
			addrs[i] = net.JoinHostPort(ip.IP.String(), p)
		}
		out = append(out, addrs)
	}
	return out
}

// reconnect joins again, every ReconnectInterval (with jitter), the seeds
// and failed members missing from the membership, until ctx ends. It does
// nothing before the node has joined, nor once it leaves. Each round joins
// every target at once, one goroutine each, and waits for all of them (a
// join takes at most about TCPTimeout per address), so rounds never overlap
// and never loop tightly.
//
// port is the gossip port of this node, the default port of a seed that
// names none. (The caller reads it before starting reconnect: a leave
// rewrites the local node's record while this goroutine runs.)
func (c *Cluster) reconnect(ctx context.Context, ml *memberlist.Memberlist, seeds []string, port int) {
	interval, timeout := c.cfg.reconnectInterval(), c.cfg.reconnectTimeout()
	for {
		t := time.NewTimer(reconnectWait(interval, rand.Float64()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now()
		c.d.prune(now, timeout)
		if !c.ready.Load() || c.gone.Load() {
			continue
		}
		live := c.d.liveGossipAddrs() // not ml.Members(): see delegate.gossip
		failed, left := c.d.departures()
		targets := reconnectTargets(now, timeout, resolveSeeds(ctx, seeds, port), live, failed, left)
		if len(targets) == 0 {
			continue
		}
		var wg sync.WaitGroup
		for _, a := range targets {
			wg.Go(func() {
				if c.gone.Load() {
					return
				}
				if n, err := ml.Join([]string{a}); n > 0 {
					c.log.Info("reconnected to a lost member or seed", "addr", a, "members", ml.NumMembers())
				} else {
					c.log.Debug("reconnect attempt failed", "addr", a, "err", err)
				}
			})
		}
		wg.Wait()
	}
}
