//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// loadSpec is a steady load: each target node gets a Check call of items
// every interval, from a goroutine of its own. A call is not waited for
// before the next is sent (up to maxInFlight per node), so one stalled call
// does not delay the others; the time a call was sent is therefore the time
// the fault found it.
type loadSpec struct {
	targets  []int
	interval time.Duration
	items    []*ringlimitv1.CheckItem
	// timeout bounds each call. Default 3s (the node answers within its
	// check timeout, 2s).
	timeout time.Duration
	// limit bounds the whole load: it stops by itself after this long.
	// Default 3m.
	limit time.Duration
}

// maxInFlight bounds the calls in flight to one node.
const maxInFlight = 64

// callRec is one Check call the load made.
type callRec struct {
	node       int // index of the node called
	start, end time.Time
	err        error                      // nil when the call was answered
	res        []*ringlimitv1.CheckResult // answers, one per item, when answered
}

// load is a running steady load.
type load struct {
	c      *cluster
	spec   loadSpec
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex // guards the fields below
	recs    []callRec
	skipped int // calls not sent: maxInFlight reached
}

// startLoad starts spec's load; stop ends it (and the test's cleanup does,
// should the test end first).
func startLoad(t *testing.T, c *cluster, spec loadSpec) *load {
	if spec.timeout == 0 {
		spec.timeout = 3 * time.Second
	}
	if spec.limit == 0 {
		spec.limit = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.limit)
	l := &load{c: c, spec: spec, cancel: cancel}
	req := &ringlimitv1.CheckRequest{Items: spec.items}
	maxCalls := int(spec.limit/spec.interval) + 1
	for _, i := range spec.targets {
		l.wg.Go(func() { l.drive(ctx, i, req, maxCalls) })
	}
	t.Cleanup(func() {
		l.stop()
		if l.skipped > 0 {
			t.Logf("load: %d calls not sent: %d already in flight to the node", l.skipped, maxInFlight)
		}
	})
	return l
}

// drive sends node i a call every interval until ctx ends or maxCalls were
// sent, then waits for the calls in flight.
func (l *load) drive(ctx context.Context, i int, req *ringlimitv1.CheckRequest, maxCalls int) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	sem := make(chan struct{}, maxInFlight)
	tick := time.NewTicker(l.spec.interval)
	defer tick.Stop()
	api := l.c.nodes[i].api
	for range maxCalls {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		r := proto.Clone(req).(*ringlimitv1.CheckRequest)
		inflight.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(context.Background(), l.spec.timeout)
			defer cancel()
			rec := callRec{node: i, start: time.Now()}
			resp, err := api.Check(cctx, r)
			rec.end = time.Now()
			switch {
			case err != nil:
				rec.err = err
			case len(resp.Items) != len(r.Items):
				rec.err = fmt.Errorf("%d answers to %d items", len(resp.Items), len(r.Items))
			default:
				rec.res = resp.Items
			}
			l.mu.Lock()
			l.recs = append(l.recs, rec)
			l.mu.Unlock()
		})
	}
}

// stop ends the load, waits for the calls in flight and returns every call,
// sorted by the time it was sent.
func (l *load) stop() []callRec {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		l.mu.Lock()
		slices.SortFunc(l.recs, func(a, b callRec) int { return a.start.Compare(b.start) })
		l.mu.Unlock()
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs
}

// newItem returns a one-hit check of key in family fam (the item's name).
func newItem(fam, key string, mode ringlimitv1.Mode, pol ringlimitv1.Policy, limit int64, period time.Duration) *ringlimitv1.CheckItem {
	return &ringlimitv1.CheckItem{Name: fam, UniqueKey: key, Hits: proto.Int64(1), Limit: limit,
		Period: durationpb.New(period), Mode: mode, Policy: pol}
}

// family returns items of family fam for each key.
func family(fam string, keys []string, mode ringlimitv1.Mode, pol ringlimitv1.Policy, limit int64, period time.Duration) []*ringlimitv1.CheckItem {
	var out []*ringlimitv1.CheckItem
	for _, k := range keys {
		out = append(out, newItem(fam, k, mode, pol, limit, period))
	}
	return out
}

// keysOwnedBy returns n keys of family fam, with tmpl's limit, that node
// owner owns, asking node via (owner-mode peeks report the owner).
func (c *cluster) keysOwnedBy(tmpl *ringlimitv1.CheckItem, owner, via, n int) []string {
	c.t.Helper()
	want := c.nodes[owner].name
	var out []string
	for base := 0; len(out) < n; base += 200 {
		if base > 20000 {
			c.t.Fatalf("no %d keys of %s owned by %s among %d", n, tmpl.Name, want, base)
		}
		req := &ringlimitv1.CheckRequest{}
		for k := base; k < base+200; k++ {
			it := proto.Clone(tmpl).(*ringlimitv1.CheckItem)
			it.UniqueKey = fmt.Sprintf("%s-%d", tmpl.Name, k)
			it.Hits = proto.Int64(0)
			it.Mode = ringlimitv1.Mode_MODE_OWNER
			req.Items = append(req.Items, it)
		}
		resp, err := c.call(via, req)
		if err != nil {
			c.t.Fatalf("probing owners: %v", err)
		}
		for k, r := range resp.Items {
			if r.Owner == want && len(out) < n {
				out = append(out, req.Items[k].UniqueKey)
			}
		}
	}
	return out
}

// call makes one Check call to node i, bounded by 5s.
func (c *cluster) call(i int, req *ringlimitv1.CheckRequest) (*ringlimitv1.CheckResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.nodes[i].api.Check(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.nodes[i].name, err)
	}
	for k, r := range resp.Items {
		if r.Status == ringlimitv1.Status_STATUS_ERROR {
			return nil, fmt.Errorf("%s: item %d (%s/%s): %s", c.nodes[i].name, k, req.Items[k].Name, req.Items[k].UniqueKey, r.Error)
		}
	}
	return resp, nil
}

// exhaust spends items (one hit each, a long period) by calling the nodes
// of via in turn, until every node has rejected every item in two rounds in
// a row. It returns the hits admitted per key.
func (c *cluster) exhaust(items []*ringlimitv1.CheckItem, via []int) map[string]int64 {
	c.t.Helper()
	admitted := map[string]int64{}
	req := &ringlimitv1.CheckRequest{Items: items}
	var maxLimit int64
	for _, it := range items {
		maxLimit = max(maxLimit, it.Limit)
	}
	quiet := 0 // rounds in a row in which everything was rejected
	for round := 0; quiet < 2; round++ {
		if round > int(2*maxLimit)+20 {
			c.t.Fatalf("keys not exhausted after %d rounds: %v", round, admitted)
		}
		any := false
		for _, i := range via {
			resp, err := c.call(i, req)
			if err != nil {
				c.t.Fatalf("exhausting: %v", err)
			}
			for k, r := range resp.Items {
				if r.Status == ringlimitv1.Status_STATUS_UNDER_LIMIT {
					admitted[items[k].UniqueKey]++
					any = true
				}
			}
		}
		if any {
			quiet = 0
		} else {
			quiet++
			time.Sleep(300 * time.Millisecond) // let flushes and pushes settle
		}
	}
	return admitted
}
