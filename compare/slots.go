package main

import (
	"context"
	"fmt"
	"io"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// The workloads, as the table names them.
const (
	wlSingle32 = "1 check per call, c=32"
	wlSingle1  = "1 check per call, c=1"
	wlBatch    = "100 checks per call, c=8"
	wlRLS3     = "Envoy RLS, c=32, 3 nodes"
	wlRLS1     = "Envoy RLS, c=32, 1 node"
	wlHot      = "hot key, 1000 per hour, hits of 1 over 3 nodes, c=32"
	wlKill     = "owner SIGKILLed at 500 of 1000 hits, 200 calls/s"
)

// The systems (and modes), as the table names them.
const (
	sysBaseline   = "baseline (no limiter)"
	sysRLOwner    = "ringlimit owner"
	sysRLCached   = "ringlimit cached"
	sysRLLeased   = "ringlimit leased"
	sysGubBatch   = "Gubernator BATCHING"
	sysGubGlobal  = "Gubernator GLOBAL"
	sysLyft       = "Lyft + Redis"
	hotLimit      = 1000
	hotPeriod     = time.Hour // long: refill is negligible over a run
	throughputLim = 1000      // per key per second: the load never reaches it
)

// newCallerFunc builds worker w's caller over cs.
type newCallerFunc func(cs *conns, w int) caller

// throughput runs one load run against addrs (nodes of c) and records it.
func throughput(ctx context.Context, cfg *config, rep *report, round int, c *cluster, addrs []string,
	workload, system string, conc int, nc newCallerFunc) error {
	cs, err := dial(addrs)
	if err != nil {
		return err
	}
	defer cs.close()
	la := loadAvg()
	cpu0 := c.procs.cpuTicks()
	res := runLoad(ctx, loadSpec{concurrency: conc, maxCalls: cfg.maxCalls, duration: cfg.duration, callTimeout: cfg.callTimeout},
		func(w int) caller { return nc(cs, w) })
	cpu := time.Duration(c.procs.cpuTicks()-cpu0) * clockTick
	rec := runRecord{Round: round, Workload: workload, System: system, Nodes: len(addrs), LoadAvg: la, LoadAvgAfter: loadAvg(), Load: &res}
	if ok := res.Calls - res.RPCErrors; ok > 0 {
		rec.ServerCPUPerCallUs = float64(cpu.Microseconds()) / float64(ok)
	}
	rep.add(rec)
	if err := ctx.Err(); err != nil {
		return err
	}
	if res.Calls == res.RPCErrors {
		return fmt.Errorf("%s, %s: no call succeeded (%d failed)", workload, system, res.RPCErrors)
	}
	return nil
}

// warmUp runs one unrecorded second of single checks, so that connections
// and caches are set up before the first recorded run.
func warmUp(ctx context.Context, cfg *config, addrs []string, nc newCallerFunc) error {
	cs, err := dial(addrs)
	if err != nil {
		return err
	}
	defer cs.close()
	runLoad(ctx, loadSpec{concurrency: cfg.conc, maxCalls: cfg.maxCalls, duration: min(time.Second, cfg.duration), callTimeout: cfg.callTimeout},
		func(w int) caller { return nc(cs, w) })
	return ctx.Err()
}

// checkWorkloads are the three workloads of single and batched checks.
func checkWorkloads(cfg *config) []struct {
	name        string
	conc, items int
} {
	return []struct {
		name        string
		conc, items int
	}{
		{wlSingle32, cfg.conc, 1},
		{wlSingle1, 1, 1},
		{wlBatch, cfg.batchConc, cfg.batchItems},
	}
}

// seedOf gives every worker of every run its own key sequence.
func seedOf(round, w int) uint64 { return uint64(round)<<32 | uint64(w) }

func runBaselineSlot(ctx context.Context, cfg *config, round int, rep *report, _ io.Writer) error {
	c, err := startBaseline(ctx, cfg, 3)
	if err != nil {
		return err
	}
	defer c.stop()
	check := func(wl workload) newCallerFunc {
		return func(cs *conns, w int) caller {
			return ringlimitCaller(cs, wl, ringlimitv1.Mode_MODE_DEFAULT, seedOf(round, w))
		}
	}
	if err := warmUp(ctx, cfg, c.addrs, check(workload{name: "warm", items: 1, keys: cfg.keys, limit: throughputLim, period: time.Second})); err != nil {
		return err
	}
	for _, w := range checkWorkloads(cfg) {
		wl := workload{name: runName(round, "baseline", w.name), items: w.items, keys: cfg.keys, limit: throughputLim, period: time.Second}
		if err := throughput(ctx, cfg, rep, round, c, c.addrs, w.name, sysBaseline, w.conc, check(wl)); err != nil {
			return err
		}
	}
	rls := func(cs *conns, w int) caller { return rlsCaller(cs, rlsDomain, cfg.keys, seedOf(round, w)) }
	if err := throughput(ctx, cfg, rep, round, c, c.addrs, wlRLS3, sysBaseline, cfg.conc, rls); err != nil {
		return err
	}
	return throughput(ctx, cfg, rep, round, c, c.addrs[:1], wlRLS1, sysBaseline, cfg.conc, rls)
}

// askMode is one way a system is asked: a ringlimit mode or a Gubernator
// behavior.
type askMode struct {
	system string
	// check returns the callers of a throughput or hot-key run on wl.
	check func(wl workload, round int) newCallerFunc
	// node returns the caller of an owner kill run on the hot key name.
	node func(c *cluster, cs *conns, name string) nodeCaller
	kill bool // whether an owner kill runs in this mode
}

// ringlimitModes are the modes every ringlimit workload runs in.
func ringlimitModes() []askMode {
	m := func(system string, mode ringlimitv1.Mode, kill bool) askMode {
		return askMode{system: system, kill: kill,
			check: func(wl workload, round int) newCallerFunc {
				return func(cs *conns, w int) caller { return ringlimitCaller(cs, wl, mode, seedOf(round, w)) }
			},
			node: func(c *cluster, cs *conns, name string) nodeCaller {
				return newRinglimitNode(c, cs, name, mode, hotLimit, hotPeriod)
			}}
	}
	return []askMode{
		m(sysRLOwner, ringlimitv1.Mode_MODE_OWNER, true),
		m(sysRLCached, ringlimitv1.Mode_MODE_CACHED, true),
		m(sysRLLeased, ringlimitv1.Mode_MODE_LEASED, false),
	}
}

// gubernatorBehaviors are the behaviors every Gubernator workload runs
// with: BATCHING (forward to the owner, batched) and GLOBAL (answer from the
// receiving peer, sync hits to the owner asynchronously).
func gubernatorBehaviors() []askMode {
	m := func(system string, b gubernator.Behavior) askMode {
		return askMode{system: system, kill: true,
			check: func(wl workload, round int) newCallerFunc {
				return func(cs *conns, w int) caller { return gubernatorCaller(cs, wl, b, seedOf(round, w)) }
			},
			node: func(c *cluster, cs *conns, name string) nodeCaller {
				return newGubernatorNode(c, cs, name, b, hotLimit, hotPeriod)
			}}
	}
	return []askMode{m(sysGubBatch, gubernator.Behavior_BATCHING), m(sysGubGlobal, gubernator.Behavior_GLOBAL)}
}

// startFunc starts n nodes of a system.
type startFunc func(ctx context.Context, cfg *config, n int) (*cluster, error)

// clusterSlot runs a 3-node system's turn: after a warm-up in modes[warm],
// the check workloads in every mode, then extra (nil: none), the hot key in
// every mode, and an owner kill in each mode that has one, on a fresh
// cluster each. With cfg.killOnly, only the owner kills.
func clusterSlot(ctx context.Context, cfg *config, round int, rep *report, log io.Writer,
	start startFunc, modes []askMode, warm int, extra func(c *cluster) error) error {
	c, err := start(ctx, cfg, 3)
	if err != nil {
		return err
	}
	defer func() { c.stop() }()
	if !cfg.killOnly {
		if err := loadRuns(ctx, cfg, round, rep, c, modes, warm, extra); err != nil {
			return err
		}
	}
	killed := false
	for _, m := range modes {
		if cfg.noKill || !m.kill {
			continue
		}
		if killed { // the previous kill left a node down: start afresh
			c.stop()
			next, err := start(ctx, cfg, 3)
			if err != nil {
				return err
			}
			c = next
		}
		killed = true
		cs, err := dial(c.addrs)
		if err != nil {
			return err
		}
		err = ownerKill(ctx, cfg, rep, round, c, m.system, m.node(c, cs, runName(round, "kill", m.system)), log)
		cs.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// loadRuns runs, on c, a warm-up in modes[warm], the check workloads in
// every mode, then extra (nil: none) and the hot key in every mode.
func loadRuns(ctx context.Context, cfg *config, round int, rep *report, c *cluster, modes []askMode, warm int, extra func(c *cluster) error) error {
	wl := workload{name: "warm", items: 1, keys: cfg.keys, limit: throughputLim, period: time.Second}
	if err := warmUp(ctx, cfg, c.addrs, modes[warm].check(wl, round)); err != nil {
		return err
	}
	for _, w := range checkWorkloads(cfg) {
		for _, m := range modes {
			wl := workload{name: runName(round, w.name, m.system), items: w.items, keys: cfg.keys, limit: throughputLim, period: time.Second}
			if err := throughput(ctx, cfg, rep, round, c, c.addrs, w.name, m.system, w.conc, m.check(wl, round)); err != nil {
				return err
			}
		}
	}
	if extra != nil {
		if err := extra(c); err != nil {
			return err
		}
	}
	for _, m := range modes {
		wl := workload{name: runName(round, "hot", m.system), items: 1, keys: 1, limit: hotLimit, period: hotPeriod}
		if err := hotKey(ctx, cfg, rep, round, c, m.system, m.check(wl, round)); err != nil {
			return err
		}
	}
	return nil
}

func runRinglimitSlot(ctx context.Context, cfg *config, round int, rep *report, log io.Writer) error {
	rls := func(c *cluster) error {
		for _, d := range []struct{ domain, system string }{{rlsDomain, sysRLCached}, {rlsDomainOwner, sysRLOwner}} {
			nc := func(cs *conns, w int) caller { return rlsCaller(cs, d.domain, cfg.keys, seedOf(round, w)) }
			if err := throughput(ctx, cfg, rep, round, c, c.addrs, wlRLS3, d.system, cfg.conc, nc); err != nil {
				return err
			}
		}
		return nil
	}
	return clusterSlot(ctx, cfg, round, rep, log, startRinglimit, ringlimitModes(), 1, rls)
}

func runGubernatorSlot(ctx context.Context, cfg *config, round int, rep *report, log io.Writer) error {
	return clusterSlot(ctx, cfg, round, rep, log, startGubernator, gubernatorBehaviors(), 0, nil)
}

func runRinglimit1Slot(ctx context.Context, cfg *config, round int, rep *report, _ io.Writer) error {
	return rlsSlot(ctx, cfg, round, rep, startRinglimit, 1, sysRLCached)
}

func runLyftSlot(ctx context.Context, cfg *config, round int, rep *report, n int) error {
	return rlsSlot(ctx, cfg, round, rep, startLyft, n, sysLyft)
}

// rlsSlot runs n nodes of a system (as system) for one RLS run only.
func rlsSlot(ctx context.Context, cfg *config, round int, rep *report, start startFunc, n int, system string) error {
	c, err := start(ctx, cfg, n)
	if err != nil {
		return err
	}
	defer c.stop()
	rls := func(cs *conns, w int) caller { return rlsCaller(cs, rlsDomain, cfg.keys, seedOf(round, w)) }
	if err := warmUp(ctx, cfg, c.addrs, rls); err != nil {
		return err
	}
	wl := wlRLS1
	if n > 1 {
		wl = wlRLS3
	}
	return throughput(ctx, cfg, rep, round, c, c.addrs, wl, system, cfg.conc, rls)
}

// hotKey sends cfg.hotCalls calls of one hit on one key, round robin over
// the nodes of c, and records how many were admitted (one bucket of
// hotLimit allows hotLimit).
func hotKey(ctx context.Context, cfg *config, rep *report, round int, c *cluster, system string, nc newCallerFunc) error {
	cs, err := dial(c.addrs)
	if err != nil {
		return err
	}
	defer cs.close()
	la := loadAvg()
	res := runLoad(ctx, loadSpec{concurrency: cfg.conc, maxCalls: cfg.hotCalls, duration: 60 * time.Second, callTimeout: cfg.callTimeout},
		func(w int) caller { return nc(cs, w) })
	rep.add(runRecord{Round: round, Workload: wlHot, System: system, Nodes: len(c.addrs), LoadAvg: la, LoadAvgAfter: loadAvg(), Load: &res})
	return ctx.Err()
}

// ownerKill runs an owner kill against c and records it.
func ownerKill(ctx context.Context, cfg *config, rep *report, round int, c *cluster, system string, nc nodeCaller, log io.Writer) error {
	la := loadAvg()
	spec := killSpec{limit: hotLimit, period: hotPeriod, killAt: hotLimit / 2, rate: 200, settle: 7500 * time.Millisecond,
		wait: cfg.killWait, maxCalls: 200 * int(cfg.killWait/time.Second+30), timeout: cfg.callTimeout}
	res, err := runKill(ctx, c, nc, spec)
	if err != nil {
		return fmt.Errorf("owner kill, %s: %w", system, err)
	}
	fmt.Fprintf(log, "  owner kill, %s: owner %s, outage %.2fs, state %s, admitted %s (degraded: %d allowed, %d denied), one bucket %d\n",
		system, res.Owner, res.OutageSec, res.State, res.admittedSum(), res.AdmittedDegraded, res.DeniedDegraded, res.Bucket)
	rep.add(runRecord{Round: round, Workload: wlKill, System: system, Nodes: len(c.addrs), LoadAvg: la, LoadAvgAfter: loadAvg(), Kill: &res})
	return nil
}
