package main

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// config is one load run.
type config struct {
	targets     []string      // gRPC addresses
	route       string        // routeRoundRobin or routeOwner
	partitions  int           // of the cluster's ring, for routeOwner
	concurrency int           // calls in flight
	keys        int           // distinct unique keys
	dist        string        // "uniform" or "zipf"
	zipfS       float64       // zipf exponent, > 1
	seed        int64         // seeds the key choice of every worker
	items       int           // items per call
	duration    time.Duration // the run stops after this long ...
	maxCalls    int64         // ... or after this many calls
	mode        ringlimitv1.Mode
	algorithm   ringlimitv1.Algorithm
	limit       int64
	period      time.Duration
	hits        int64
	name        string
	callTimeout time.Duration
	json        bool
	cpuProfile  string
	baseline    bool // drive an in-process baseline server instead of targets
}

// class is how an item was answered, as the load generator sees it.
const (
	classOwner     = 0 // the node called owns the key
	classForwarded = 1 // another node owns it: forwarded (owner mode) or from its cache
	classes        = 2
)

// stats are one worker's counts, merged at the end.
type stats struct {
	calls, rpcErrors int64
	items            [classes]int64
	status           [4]int64 // by ringlimitv1.Status
	callLat          hist     // every successful call
	classLat         [classes]hist
	errCodes         map[string]int64
}

func (s *stats) merge(o *stats) {
	s.calls += o.calls
	s.rpcErrors += o.rpcErrors
	for c := range classes {
		s.items[c] += o.items[c]
		s.classLat[c].merge(&o.classLat[c])
	}
	for i := range s.status {
		s.status[i] += o.status[i]
	}
	s.callLat.merge(&o.callLat)
	for k, v := range o.errCodes {
		s.errCodes[k] += v
	}
}

// keyChooser returns the index of the next key.
type keyChooser func() int

// newChooser returns the key distribution of cfg, driven by rng.
func newChooser(cfg *config, rng *rand.Rand) (keyChooser, error) {
	switch cfg.dist {
	case "uniform":
		return func() int { return rng.Intn(cfg.keys) }, nil
	case "zipf":
		z := rand.NewZipf(rng, cfg.zipfS, 1, uint64(cfg.keys-1))
		if z == nil {
			return nil, fmt.Errorf("--zipf-s %v: must be greater than 1", cfg.zipfS)
		}
		return func() int { return int(z.Uint64()) }, nil
	}
	return nil, fmt.Errorf("--dist %q: want uniform or zipf", cfg.dist)
}

// run drives the targets as cfg says and returns the merged stats and the
// elapsed time.
func run(ctx context.Context, cfg *config) (*stats, time.Duration, error) {
	clients := make([]ringlimitv1.RateLimiterClient, len(cfg.targets))
	for i, t := range cfg.targets {
		cc, err := grpc.NewClient(t, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, 0, fmt.Errorf("target %s: %w", t, err)
		}
		defer cc.Close()
		clients[i] = ringlimitv1.NewRateLimiterClient(cc)
	}
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var (
		budget = cfg.maxCalls // calls left, shared
		next   atomic.Uint64  // round-robin over targets
		route  *ownerRoute    // with --route owner
		wg     sync.WaitGroup
		all    = make([]*stats, cfg.concurrency)
	)
	if cfg.route == routeOwner {
		route = newOwnerRoute(len(clients), cfg.partitions)
	}
	start := time.Now()
	for w := range cfg.concurrency {
		rng := rand.New(rand.NewSource(cfg.seed + int64(w)))
		choose, err := newChooser(cfg, rng)
		if err != nil {
			return nil, 0, err
		}
		st := &stats{errCodes: map[string]int64{}}
		all[w] = st
		wg.Go(func() { worker(ctx, cfg, clients, route, &next, &budget, keys, choose, st) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := &stats{errCodes: map[string]int64{}}
	for _, s := range all {
		total.merge(s)
	}
	return total, elapsed, nil
}

// worker makes calls until ctx ends or the budget is spent. Each call goes
// to its keys' owner when route knows it, else to the next target.
func worker(ctx context.Context, cfg *config, clients []ringlimitv1.RateLimiterClient, route *ownerRoute,
	next *atomic.Uint64, budget *int64, keys []string, choose keyChooser, st *stats) {
	period := durationpb.New(cfg.period)
	req := &ringlimitv1.CheckRequest{Items: make([]*ringlimitv1.CheckItem, cfg.items)}
	for i := range req.Items {
		req.Items[i] = &ringlimitv1.CheckItem{Name: cfg.name, Hits: proto.Int64(cfg.hits), Limit: cfg.limit, Period: period,
			Algorithm: cfg.algorithm, Mode: cfg.mode}
	}
	var seen [classes]bool
	for ctx.Err() == nil && atomic.AddInt64(budget, -1) >= 0 {
		for _, it := range req.Items {
			it.UniqueKey = keys[choose()]
		}
		target := -1
		if route != nil {
			target = route.pick(req)
		}
		if target < 0 {
			target = int(next.Add(1) % uint64(len(clients)))
		}
		client := clients[target]
		cctx, cancel := context.WithTimeout(ctx, cfg.callTimeout)
		t0 := time.Now()
		resp, err := client.Check(cctx, req)
		lat := time.Since(t0)
		cancel()
		if ctx.Err() != nil || (err != nil && runOver(ctx)) {
			// The run ended during the call: do not count it. (The call's
			// own context, which shares the run's deadline, may report it
			// an instant before the run's context does.)
			return
		}
		st.calls++
		if err != nil {
			st.rpcErrors++
			st.errCodes[status.Code(err).String()]++
			continue
		}
		st.callLat.record(lat)
		if route != nil {
			route.learn(target, req, resp)
		}
		seen = [classes]bool{}
		for _, r := range resp.Items {
			c := classOwner
			if r.Owner != resp.Node {
				c = classForwarded
			}
			seen[c] = true
			st.items[c]++
			if s := int(r.Status); s >= 0 && s < len(st.status) {
				st.status[s]++
			}
		}
		for c := range classes {
			if seen[c] {
				st.classLat[c].record(lat)
			}
		}
	}
}

// runOver reports whether the run's deadline has passed.
func runOver(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
