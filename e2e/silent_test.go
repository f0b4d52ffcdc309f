//go:build e2e && fenced

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// A silent partition drops packets instead of refusing them, as a switch
// that dies or a firewall rule does: docker network disconnect takes the
// interface away, so a sender learns at once that the peer is unreachable;
// here nothing answers, and a node notices only through its timeouts and
// failure detection. The rules are iptables DROP rules inside each node
// container's network namespace, entered from the host with nsenter (the
// image is FROM scratch: it has no iptables of its own). That needs root
// on the host (CAP_SYS_ADMIN to enter the namespace, CAP_NET_ADMIN for the
// rules), which CI has (.ci/run runs make e2e as root).

const modeLeased = ringlimitv1.Mode_MODE_LEASED

// The limit of the keys the silent scenarios measure: the 50 per
// 5 s (capacity 50, refill 10 a second), asked about 100 times a second.
const (
	envLimit  = 50
	envPeriod = 5 * time.Second
)

// dropRule is one iptables rule added in a node's network namespace.
type dropRule struct {
	pid  string // the container's process: its namespace
	args []string
}

// silentPartition is the set of DROP rules of one silent cut.
type silentPartition struct {
	c     *cluster
	rules []dropRule
}

// pid returns the host PID of node i's container process.
func (c *cluster) pid(i int) string {
	c.t.Helper()
	out, err := docker(context.Background(), "inspect", "-f", "{{.State.Pid}}", c.nodes[i].container)
	if err != nil || out == "" || out == "0" {
		c.t.Fatalf("the PID of %s: %q, %v", c.nodes[i].name, out, err)
	}
	return out
}

// addrs returns every address of node i: on each home network and on the
// client network.
func (c *cluster) addrs(i int) []netip.Addr {
	out := []netip.Addr{c.nodes[i].clientIP}
	for _, h := range c.homes {
		out = append(out, c.ipOn(h, i))
	}
	return out
}

// nsIptables runs iptables in the network namespace of process pid.
func nsIptables(pid string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", pid, "-n", "iptables"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nsenter -t %s -n iptables %s: %w: %s (silent partitions need root on the host, with nsenter and iptables)",
			pid, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// silentCut separates the groups silently: in each node's namespace, every
// packet from an address of a node of another group is dropped on input,
// so nothing crosses the cut either way and no sender is told. The
// test still reaches every node (from the host, through the gateway). It
// returns the rules, for heal, and how long adding them took.
func (c *cluster) silentCut(groups ...[]int) (*silentPartition, time.Duration) {
	return c.silentCutWay(false, groups...)
}

// silentCutWay is silentCut; with oneWay, only the second group drops what
// the first sends: the first group's packets to it are lost, its packets
// to the first group arrive (an asymmetric partition).
func (c *cluster) silentCutWay(oneWay bool, groups ...[]int) (*silentPartition, time.Duration) {
	c.t.Helper()
	start := time.Now()
	sp := &silentPartition{c: c}
	c.t.Cleanup(func() { sp.heal() }) // the containers go too; this is for a test that fails in between
	for g, idx := range groups {
		for _, i := range idx {
			pid := c.pid(i)
			for h, other := range groups {
				if h == g || (oneWay && (g != 1 || h != 0)) {
					continue
				}
				for _, j := range other {
					for _, a := range c.addrs(j) {
						// INPUT only: a packet dropped on OUTPUT fails the
						// sender's send at once (EPERM), which is not
						// silent. Each side drops what the other sends.
						args := []string{"INPUT", "-s", a.String(), "-j", "DROP"}
						if err := nsIptables(pid, append([]string{"-I"}, args...)...); err != nil {
							c.t.Fatal(err)
						}
						sp.rules = append(sp.rules, dropRule{pid: pid, args: args})
					}
				}
			}
		}
	}
	return sp, time.Since(start)
}

// heal deletes the rules, and returns how long that took.
func (sp *silentPartition) heal() time.Duration {
	start := time.Now()
	for _, r := range sp.rules {
		if err := nsIptables(r.pid, append([]string{"-D"}, r.args...)...); err != nil {
			sp.c.t.Errorf("healing: %v", err)
		}
	}
	sp.rules = nil
	return time.Since(start)
}

// envelopeFig is how far one family's keys went over the token bucket's
// envelope.
type envelopeFig struct {
	Family string `json:"family"`
	Keys   int    `json:"keys"`
	// Worst is the largest excess of one key over the envelope of any span
	// of its admissions, counted conservatively: a span runs from the first
	// call's start to the latest end of its calls, so a call's time in
	// flight never counts as over. WorstKey and WorstSpan say where.
	Worst     float64 `json:"worst"`
	WorstKey  string  `json:"worst_key"`
	WorstSpan string  `json:"worst_span"`
	// Split is the most one key admitted between the cut and the heal (its
	// calls sent then), against capacity + refill over that time.
	Split      int64   `json:"split_admitted"`
	SplitBound float64 `json:"split_bound"`
}

// envelopeOf measures family fam (one hit per item, limit envLimit per
// envPeriod) in recs.
func envelopeOf(recs []callRec, items []*ringlimitv1.CheckItem, fam string, cutAt, healAt time.Time) envelopeFig {
	f := envelopeFig{Family: fam, Worst: -envLimit}
	rate := float64(envLimit) / envPeriod.Seconds()
	type adm struct{ start, end time.Time }
	byKey := map[string][]adm{}
	for k := range recs { // sorted by start
		r := &recs[k]
		for j, res := range r.res {
			if items[j].Name == fam && res.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				byKey[items[j].UniqueKey] = append(byKey[items[j].UniqueKey], adm{r.start, r.end})
			}
		}
	}
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	}) {
		as := byKey[key]
		f.Keys++
		var split int64
		for i := range as {
			if !as[i].start.Before(cutAt) && as[i].start.Before(healAt) {
				split++
			}
			end := as[i].end
			for j := i; j < len(as); j++ {
				if as[j].end.After(end) {
					end = as[j].end
				}
				over := float64(j-i+1) - (envLimit + rate*end.Sub(as[i].start).Seconds())
				if over > f.Worst {
					f.Worst, f.WorstKey = over, key
					f.WorstSpan = fmt.Sprintf("%s..%s (%d admitted)", as[i].start.Format("15:04:05.000"), end.Format("15:04:05.000"), j-i+1)
				}
			}
		}
		f.Split = max(f.Split, split)
	}
	f.Worst = round2(f.Worst)
	f.SplitBound = round2(envLimit + rate*healAt.Sub(cutAt).Seconds())
	return f
}

// overAdmissions replays key's admissions in family fam through a token
// bucket of the envelope (full at the first, refilled up to each call's
// end: the generous side) and describes each admission it finds no token
// for, with the node called and the node that decided (the answer's owner):
// on a failure, which deciders went over, and when.
func overAdmissions(recs []callRec, items []*ringlimitv1.CheckItem, fam, key string) []string {
	rate := float64(envLimit) / envPeriod.Seconds()
	type adm struct {
		end  time.Time
		line string
	}
	var as []adm
	for k := range recs {
		r := &recs[k]
		for j, res := range r.res {
			if items[j].Name == fam && items[j].UniqueKey == key && res.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
				as = append(as, adm{r.end, fmt.Sprintf("%s..%s via %s decided by %s (degraded %v)",
					r.start.Format("15:04:05.000"), r.end.Format("15:04:05.000"), fmt.Sprintf("n%d", r.node+1), res.GetOwner(), res.GetDegraded())})
			}
		}
	}
	slices.SortStableFunc(as, func(a, b adm) int { return a.end.Compare(b.end) })
	var out []string
	tokens, last := float64(envLimit), time.Time{}
	for i, a := range as {
		if i > 0 {
			tokens = min(envLimit, tokens+rate*a.end.Sub(last).Seconds())
		}
		last = a.end
		if tokens -= 1; tokens < -0.5 {
			out = append(out, a.line)
			tokens = 0
		}
	}
	return out
}

// timeline returns key's admissions in family fam per 500 ms of send
// time, each as "hh:mm:ss.s n1=3 n4=2": who decided how many, when.
func timeline(recs []callRec, items []*ringlimitv1.CheckItem, fam, key string) string {
	type slot struct {
		at time.Time
		by map[string]int
	}
	var slots []*slot
	for k := range recs { // sorted by start
		r := &recs[k]
		at := r.start.Truncate(500 * time.Millisecond)
		for j, res := range r.res {
			if items[j].Name != fam || items[j].UniqueKey != key || res.Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
				continue
			}
			if len(slots) == 0 || !slots[len(slots)-1].at.Equal(at) {
				slots = append(slots, &slot{at: at, by: map[string]int{}})
			}
			slots[len(slots)-1].by[res.GetOwner()]++
		}
	}
	var b strings.Builder
	for _, s := range slots {
		fmt.Fprintf(&b, "\n  %s", s.at.Format("15:04:05.0"))
		for _, o := range slices.Sorted(func(yield func(string) bool) {
			for o := range s.by {
				if !yield(o) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, " %s=%d", o, s.by[o])
		}
	}
	return b.String()
}

// silentFault is the fault a silent scenario injects: how the groups are
// cut, for how long, and how often.
type silentFault struct {
	// oneWay cuts only what the first group sends to the second.
	oneWay bool
	// cutFor is the fault's whole length; with every > 0 the groups are
	// cut for every, joined for every, and again (flapping).
	cutFor, every time.Duration
}

// silentScenario cuts a cluster of n nodes silently into groups under
// load, as f says, heals it, and measures keys of 50 per 5 s in leased and
// owner mode with policy fail-closed, owned on every side: issue #15 item
// 3's promise is that none leaves the token bucket's envelope.
func silentScenario(t *testing.T, name string, n int, groups [][]int, f silentFault) {
	c := startCluster(t, clusterSpec{nodes: n})
	var items []*ringlimitv1.CheckItem
	var fams []string
	for _, m := range []struct {
		name string
		mode ringlimitv1.Mode
	}{{"leased", modeLeased}, {"owner", modeOwner}} {
		for g, idx := range groups {
			fam := fmt.Sprintf("%s-closed-g%d", m.name, g)
			ks := c.keysOwnedBy(newItem(fam, "", m.mode, polFailClosed, envLimit, envPeriod), idx[0], 0, 2)
			items = append(items, family(fam, ks, m.mode, polFailClosed, envLimit, envPeriod)...)
			fams = append(fams, fam)
		}
	}
	l := startLoad(t, c, loadSpec{targets: c.all(), interval: hotInterval, items: items})
	start := time.Now()
	time.Sleep(8 * time.Second)

	cutAt := time.Now()
	var cutCmd, healCmd, split time.Duration
	var views string
	if f.every == 0 {
		sp, d := c.silentCutWay(f.oneWay, groups...)
		cutCmd = d
		if !f.oneWay {
			split = viewsSettle(t, c, groups, cutAt)
		}
		views = watchViews(c, cutAt.Add(f.cutFor))
		healCmd = sp.heal()
	} else {
		for k := 0; time.Since(cutAt) < f.cutFor; k++ {
			sp, d := c.silentCutWay(f.oneWay, groups...)
			cutCmd += d
			time.Sleep(time.Until(cutAt.Add(time.Duration(2*k+1) * f.every)))
			healCmd += sp.heal()
			time.Sleep(time.Until(cutAt.Add(time.Duration(2*k+2) * f.every)))
		}
		views = "flapping (not sampled)"
	}
	healAt := time.Now()
	healed, err := c.waitMembers(c.all(), c.names(c.all()), healTimeout)
	if err != nil {
		t.Errorf("the cluster did not heal: %v", err)
	} else {
		ringsAgree(t, c)
	}
	time.Sleep(time.Until(healAt.Add(20 * time.Second)))
	recs := l.stop()
	end := time.Now()
	nfail, ex := failures(c, recs, anytime)
	if degraded := degradedIn(recs, cutAt, healAt); degraded == 0 {
		// A cut that nothing noticed measured nothing: the rules did not
		// take (a wrong address, a netfilter that ignores them).
		t.Errorf("no answer to a call sent during the fault was degraded: the fault had no effect")
	} else {
		t.Logf("%d answers to calls sent during the fault were degraded (decided by the policy)", degraded)
	}

	var figs []envelopeFig
	phases := []phase{{"before", start, cutAt}, {"fault", cutAt, healAt}, {"after", healAt, end}}
	ideal := map[string][]phaseFig{}
	over := false
	for _, fam := range fams {
		fig := envelopeOf(recs, items, fam, cutAt, healAt)
		figs = append(figs, fig)
		ideal[fam] = compareIdeal(recs, items, fam, phases)
		if fig.Worst > 0 {
			t.Errorf("%s: key %s went %+.2f tokens over the envelope (capacity %d + %d per %v x span), in %s; during the fault a key admitted at most %d for %.1f",
				fam, fig.WorstKey, fig.Worst, envLimit, envLimit, envPeriod, fig.WorstSpan, fig.Split, fig.SplitBound)
			for _, line := range overAdmissions(recs, items, fam, fig.WorstKey) {
				t.Logf("%s: beyond the envelope: %s", fig.WorstKey, line)
			}
			t.Logf("%s: admissions by decider, per 500 ms by send time (cut %s, heal %s): %s", fig.WorstKey,
				cutAt.Format("15:04:05.000"), healAt.Format("15:04:05.000"), timeline(recs, items, fam, fig.WorstKey))
			over = true
		}
	}
	if over {
		c.dumpNodes(t) // the nodes' view of it: without their logs, a failure cannot be traced
	}
	var gs [][]string
	for _, g := range groups {
		gs = append(gs, c.names(g))
	}
	t.Logf("silent %s %v (one way %v, every %v) from %s to %s (rules added in %v, removed in %v); load: %d calls of %d items, every %v to each node; %d failed %v",
		name, gs, f.oneWay, f.every, cutAt.Format("15:04:05.000"), healAt.Format("15:04:05.000"), cutCmd.Round(time.Millisecond), healCmd.Round(time.Millisecond),
		len(recs), len(items), hotInterval, nfail, ex)
	t.Logf("membership: groups after %v; views during the fault: %s; healed %v after the rules went", split.Round(time.Millisecond), views, healed.Round(time.Millisecond))
	for _, fig := range figs {
		t.Logf("%s: worst %+.2f tokens over the envelope (key %s, %s); during the fault at most %d admitted for capacity + refill %.1f",
			fig.Family, fig.Worst, fig.WorstKey, fig.WorstSpan, fig.Split, fig.SplitBound)
	}
	logFigs(t, ideal, int(envLimit/envPeriod.Seconds()))
	if stuck := lockedOut(ideal); len(stuck) > 0 {
		t.Errorf("after the heal, %v admitted less than half the ideal over %v: the keys did not come back", stuck, end.Sub(healAt).Round(time.Millisecond))
		if !over {
			c.dumpNodes(t)
		}
	}
	emit(t, name, map[string]any{
		"nodes": n, "groups": gs, "one_way": f.oneWay, "every_s": f.every.Seconds(), "fault_s": healAt.Sub(cutAt).Seconds(),
		"calls": len(recs), "items_per_call": len(items), "failed_calls": nfail, "split_ms": ms(split), "healed_ms": ms(healed),
		"views_during_fault": views, "envelope": figs, "phases": ideal,
	})
}

// TestSilentSplit splits five nodes 3|2 silently (iptables DROP) for 15 s
// under load: leased and owner mode keys with fail-closed, owned on both
// sides, must stay within the token bucket's envelope (issue #15 measured
// +22 to +40 tokens over capacity + refill in leased mode).
func TestSilentSplit(t *testing.T) {
	silentScenario(t, "silent-split", 5, [][]int{{0, 1}, {2, 3, 4}}, silentFault{cutFor: 15 * time.Second})
}

// TestSilentIsolate cuts one node of three off silently for 15 s: the
// same promise for the keys it owns and the others'.
func TestSilentIsolate(t *testing.T) {
	silentScenario(t, "silent-isolate", 3, [][]int{{2}, {0, 1}}, silentFault{cutFor: 15 * time.Second})
}

// TestSilentOneWay loses, for 15 s, every packet one node of three sends
// to the two others, while theirs reach it (a one-way cut, silent).
func TestSilentOneWay(t *testing.T) {
	silentScenario(t, "silent-one-way", 3, [][]int{{2}, {0, 1}}, silentFault{oneWay: true, cutFor: 15 * time.Second})
}

// TestSilentFlap cuts one node of three off silently for 1 s, lets it
// back for 1 s, and again, for 12 s (a flapping link).
func TestSilentFlap(t *testing.T) {
	silentScenario(t, "silent-flap", 3, [][]int{{2}, {0, 1}}, silentFault{cutFor: 12 * time.Second, every: time.Second})
}

// degradedIn counts the answers of recs, to calls sent in [from, to), that
// a node decided by the partition policy (degraded).
func degradedIn(recs []callRec, from, to time.Time) int {
	n := 0
	for k := range recs {
		r := &recs[k]
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		for _, res := range r.res {
			if res.GetDegraded() {
				n++
			}
		}
	}
	return n
}

// lockedOut returns the families of ideal that admitted less than half of
// the ideal limiter's admissions after the heal: a healed cluster must
// decide its keys again (a heal that left one node's keys refused for the
// 20 s measured was seen once, session 12, with the ownership lease).
func lockedOut(ideal map[string][]phaseFig) []string {
	var out []string
	for fam, ph := range ideal {
		after := ph[len(ph)-1]
		if after.Ideal > 0 && 2*after.Admitted < after.Ideal {
			out = append(out, fam)
		}
	}
	slices.Sort(out)
	return out
}

// dumpNodes logs each node's cluster status, its coordination metrics and
// the end of its log: what a failed scenario needs to be traced.
func (c *cluster) dumpNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, n := range c.nodes {
		for _, path := range []string{"/v1/cluster", "/metrics"} {
			body, err := httpGet(ctx, fmt.Sprintf("http://%s:%d%s", n.clientIP, httpPort, path))
			if err != nil {
				t.Logf("n%d %s: %v", i+1, path, err)
				continue
			}
			if path == "/metrics" {
				var keep []string
				for _, line := range strings.Split(body, "\n") {
					if strings.HasPrefix(line, "ringlimit_") && !strings.Contains(line, "_bucket{") {
						keep = append(keep, line)
					}
				}
				body = strings.Join(keep, "\n")
			}
			t.Logf("n%d %s:\n%s", i+1, path, body)
		}
		t.Logf("n%d log:\n%s", i+1, dockerLogs(ctx, n.container, 300))
	}
}
