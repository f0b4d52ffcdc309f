package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// answer is one call of one hit on the hot key to one node.
type answer struct {
	failed    bool  // no decision: the call failed, or the item carries an error
	degraded  bool  // decided by the partition policy, the owner unreachable (ringlimit's degraded flag)
	admitted  bool  // allowed: by the limiter, or by the partition policy when degraded
	remaining int64 // as the answer reports it
}

// bad reports whether the limiter itself did not decide the call: it
// failed, or the partition policy decided it. The outage of an owner kill
// lasts until the last bad answer.
func (a answer) bad() bool { return a.failed || a.degraded }

// nodeCaller asks node i for hits on the hot key. owner returns the index of
// the node that owns the key.
type nodeCaller interface {
	call(ctx context.Context, node int, hits int64) answer
	owner(ctx context.Context) (int, error)
}

// ringlimitNode calls ringlimit nodes in one mode.
type ringlimitNode struct {
	c    *cluster
	cs   *conns
	item *ringlimitv1.CheckItem // the template; UniqueKey is the hot key
}

func newRinglimitNode(c *cluster, cs *conns, name string, mode ringlimitv1.Mode, limit int64, period time.Duration) *ringlimitNode {
	return &ringlimitNode{c: c, cs: cs, item: &ringlimitv1.CheckItem{Name: name, UniqueKey: "hot", Limit: limit,
		Period: durationpb.New(period), Algorithm: ringlimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Mode: mode}}
}

func (r *ringlimitNode) check(ctx context.Context, node int, hits int64) (*ringlimitv1.CheckResponse, error) {
	t := r.item // a fresh message per call: calls run concurrently
	it := &ringlimitv1.CheckItem{Name: t.Name, UniqueKey: t.UniqueKey, Hits: proto.Int64(hits), Limit: t.Limit, Period: t.Period,
		Algorithm: t.Algorithm, Mode: t.Mode}
	return ringlimitv1.NewRateLimiterClient(r.cs.cc[node]).Check(ctx, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{it}})
}

func (r *ringlimitNode) call(ctx context.Context, node int, hits int64) answer {
	resp, err := r.check(ctx, node, hits)
	if err != nil || len(resp.GetItems()) != 1 {
		return answer{failed: true}
	}
	return ringlimitAnswer(resp.Items[0])
}

// ringlimitAnswer reads one item's answer. A degraded item is an answer of
// the partition policy (proto: "the owner could not be reached and the
// partition policy decided"); its status says whether the policy allowed
// it, and what it allowed counts against the key's bucket as any other
// admission.
func ringlimitAnswer(it *ringlimitv1.CheckResult) answer {
	a := answer{degraded: it.GetDegraded(), remaining: it.GetRemaining()}
	switch it.GetStatus() {
	case ringlimitv1.Status_STATUS_UNDER_LIMIT:
		a.admitted = true
	case ringlimitv1.Status_STATUS_OVER_LIMIT:
	default: // an error, or a status this tool does not know
		a.failed = true
	}
	return a
}

func (r *ringlimitNode) owner(ctx context.Context) (int, error) {
	resp, err := r.check(ctx, 0, 0)
	if err != nil {
		return -1, fmt.Errorf("compare: owner of the hot key: %w", err)
	}
	if len(resp.GetItems()) != 1 {
		return -1, errNoAnswer
	}
	i := r.c.indexOf(resp.Items[0].GetOwner())
	if i < 0 {
		return -1, fmt.Errorf("compare: owner %q of the hot key: not a node started here", resp.Items[0].GetOwner())
	}
	return i, nil
}

// gubernatorNode calls Gubernator daemons with one behavior.
type gubernatorNode struct {
	c   *cluster
	cs  *conns
	req *gubernator.RateLimitReq // the template; UniqueKey is the hot key
}

func newGubernatorNode(c *cluster, cs *conns, name string, behavior gubernator.Behavior, limit int64, period time.Duration) *gubernatorNode {
	return &gubernatorNode{c: c, cs: cs, req: &gubernator.RateLimitReq{Name: name, UniqueKey: "hot", Limit: limit,
		Duration: period.Milliseconds(), Algorithm: gubernator.Algorithm_TOKEN_BUCKET, Behavior: behavior}}
}

func (g *gubernatorNode) get(ctx context.Context, node int, hits int64) (*gubernator.RateLimitResp, error) {
	r := &gubernator.RateLimitReq{Name: g.req.Name, UniqueKey: g.req.UniqueKey, Limit: g.req.Limit,
		Duration: g.req.Duration, Algorithm: g.req.Algorithm, Behavior: g.req.Behavior, Hits: hits}
	resp, err := gubernator.NewV1Client(g.cs.cc[node]).GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{r}})
	if err != nil {
		return nil, err
	}
	if len(resp.GetResponses()) != 1 {
		return nil, errNoAnswer
	}
	return resp.Responses[0], nil
}

func (g *gubernatorNode) call(ctx context.Context, node int, hits int64) answer {
	r, err := g.get(ctx, node, hits)
	if err != nil || r.GetError() != "" {
		return answer{failed: true}
	}
	return answer{admitted: r.GetStatus() == gubernator.Status_UNDER_LIMIT, remaining: r.GetRemaining()}
}

// owner asks node 0: an answer forwarded from the owner names it in its
// metadata; an answer without that name was decided by node 0 itself.
func (g *gubernatorNode) owner(ctx context.Context) (int, error) {
	probe := *g
	probe.req = &gubernator.RateLimitReq{Name: g.req.Name, UniqueKey: g.req.UniqueKey, Limit: g.req.Limit,
		Duration: g.req.Duration, Algorithm: g.req.Algorithm, Behavior: gubernator.Behavior_BATCHING}
	r, err := probe.get(ctx, 0, 0)
	if err != nil {
		return -1, fmt.Errorf("compare: owner of the hot key: %w", err)
	}
	o, ok := r.GetMetadata()["owner"]
	if !ok {
		return 0, nil
	}
	i := g.c.indexOf(o)
	if i < 0 {
		return -1, fmt.Errorf("compare: owner %q of the hot key: not a node started here", o)
	}
	return i, nil
}

// killSpec is one owner-kill run: one hot key of limit hits per period,
// called at rate calls per second round robin over the live nodes; the
// key's owner is SIGKILLed when killAt hits have been admitted. The run
// ends once the system has answered good calls for settle after its last
// bad answer, or wait after the kill, whichever comes first; it never makes
// more than maxCalls calls.
type killSpec struct {
	limit    int64
	period   time.Duration
	killAt   int64
	rate     int
	settle   time.Duration
	wait     time.Duration
	maxCalls int
	timeout  time.Duration // of each call
}

// killResult is what an owner kill showed. Every admitted answer falls in
// exactly one of AdmittedBefore, AdmittedDegraded and AdmittedAfter, and
// Admitted is their sum.
type killResult struct {
	Owner            string  `json:"owner"`
	Recovered        bool    `json:"recovered"`            // good answers for settle before the run ended
	OutageSec        float64 `json:"outage_s"`             // from the kill to the end of the last bad answer (0: none): the time until answered again
	BadAnswers       int     `json:"bad_answers"`          // after the kill: failed or degraded
	Failed           int     `json:"failed"`               // after the kill: the call failed, or the item carries an error
	AdmittedBefore   int64   `json:"admitted_before_kill"` // admitted, not degraded, answered before the kill
	AdmittedDegraded int64   `json:"admitted_degraded"`    // degraded answers that allowed the hit: admitted by the partition policy
	DeniedDegraded   int64   `json:"denied_degraded"`      // degraded answers that denied it
	AdmittedAfter    int64   `json:"admitted_after_kill"`  // admitted, not degraded, answered after the kill: by the new owner (owner mode) or a survivor's cached view (cached mode)
	State            string  `json:"state"`                // "kept" (one bucket in all), "reset" (over, from the first good answer), "reset later" (over, though the first good answer looked kept) or "unknown"
	RemainingAt      int64   `json:"remaining_at"`         // remaining in the first good answer after the outage
	ExpectedAt       int64   `json:"expected_at"`          // limit minus the hits admitted (degraded ones included) before that answer
	Admitted         int64   `json:"admitted"`             // over the whole run, degraded admissions included
	Bucket           int64   `json:"bucket"`               // what one bucket admits over the run: limit + refill over RunSec
	Excess           int64   `json:"excess"`               // Admitted beyond Bucket, at least 0
	Calls            int     `json:"calls"`                // made
	Skipped          int     `json:"skipped"`              // not sent: 32 calls were already in flight
	RunSec           float64 `json:"run_s"`                // whole run
	AfterKillSec     float64 `json:"after_kill_s"`         // run time after the kill
	Note             string  `json:"note,omitempty"`       // why the run ended early, if it did
}

// callRecord is one call of a kill run.
type callRecord struct {
	start, end time.Time
	answer
}

// runKill runs spec against the nodes of c through nc, SIGKILLing the hot
// key's owner on the way. It leaves the other nodes running.
func runKill(ctx context.Context, c *cluster, nc nodeCaller, spec killSpec) (killResult, error) {
	var res killResult
	ownerIdx, err := nc.owner(ctx)
	if err != nil {
		return res, err
	}
	res.Owner = c.ids[ownerIdx]
	var (
		mu       sync.Mutex // guards the fields below
		recs     []callRecord
		admitted int64
		live     []int // the nodes not killed
		killedAt time.Time
		lastBad  time.Time // end of the last bad answer after the kill
		wg       sync.WaitGroup
	)
	for i := range c.nodes {
		live = append(live, i)
	}
	sem := make(chan struct{}, 32)
	tick := time.NewTicker(time.Second / time.Duration(spec.rate))
	defer tick.Stop()
	start := time.Now()
	next := 0
	for calls := 0; calls < spec.maxCalls; {
		select {
		case <-ctx.Done():
			wg.Wait()
			return res, ctx.Err()
		case <-tick.C:
		}
		mu.Lock()
		now := time.Now()
		done := false
		if !killedAt.IsZero() {
			sinceKill, sinceBad := now.Sub(killedAt), now.Sub(lastBad)
			switch {
			case sinceBad >= spec.settle && sinceKill >= spec.settle:
				done, res.Recovered = true, true
			case sinceKill >= spec.wait && sinceBad < time.Second:
				done, res.Note = true, fmt.Sprintf("still failing %v after the kill", spec.wait)
			case sinceKill >= spec.wait+spec.settle:
				done, res.Note = true, fmt.Sprintf("bad answers now and then %v after the kill", spec.wait+spec.settle)
			}
		} else if now.Sub(start) >= spec.wait {
			done, res.Note = true, fmt.Sprintf("%d of %d hits admitted after %v: the owner was not killed", admitted, spec.killAt, spec.wait)
		}
		node := live[next%len(live)]
		next++
		mu.Unlock()
		if done {
			break
		}
		select {
		case sem <- struct{}{}:
		default:
			res.Skipped++
			continue
		}
		calls++
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, spec.timeout)
			t0 := time.Now()
			a := nc.call(cctx, node, 1)
			t1 := time.Now()
			cancel()
			mu.Lock()
			defer mu.Unlock()
			recs = append(recs, callRecord{start: t0, end: t1, answer: a})
			if a.admitted {
				admitted++
			}
			if a.bad() && !killedAt.IsZero() && t1.After(lastBad) { // answers may end out of order
				lastBad = t1
			}
			if killedAt.IsZero() && admitted >= spec.killAt {
				c.nodes[ownerIdx].kill()
				killedAt = time.Now()
				lastBad = killedAt
				live = slices.DeleteFunc(live, func(i int) bool { return i == ownerIdx })
			}
		})
	}
	wg.Wait()
	tallyKill(&res, spec, recs, start, killedAt, lastBad, time.Now())
	return res, nil
}

// oneBucket returns what one token bucket of limit per period admits over
// span: its capacity (limit) and its refill over span, rounded down.
func oneBucket(limit int64, period, span time.Duration) int64 {
	return limit + int64(float64(limit)*span.Seconds()/period.Seconds())
}

// tallyKill fills res from the calls of a run that started at start and
// ended at end, with the owner killed at killedAt (zero: never) and the
// last bad answer ending at lastBad. It sorts recs by end.
func tallyKill(res *killResult, spec killSpec, recs []callRecord, start, killedAt, lastBad, end time.Time) {
	res.RunSec = end.Sub(start).Seconds()
	res.Calls = len(recs)
	slices.SortFunc(recs, func(a, b callRecord) int { return a.end.Compare(b.end) })
	after := func(r callRecord) bool { return !killedAt.IsZero() && r.end.After(killedAt) }
	for _, r := range recs {
		switch {
		case r.degraded && r.admitted:
			res.AdmittedDegraded++
		case r.degraded:
			res.DeniedDegraded++
		case r.admitted && after(r):
			res.AdmittedAfter++
		case r.admitted:
			res.AdmittedBefore++
		}
		if after(r) && r.bad() {
			res.BadAnswers++
			if r.failed {
				res.Failed++
			}
		}
	}
	res.Admitted = res.AdmittedBefore + res.AdmittedDegraded + res.AdmittedAfter
	res.Bucket = oneBucket(spec.limit, spec.period, end.Sub(start))
	res.Excess = max(res.Admitted-res.Bucket, 0)
	res.State = "unknown"
	if killedAt.IsZero() {
		return
	}
	res.AfterKillSec = end.Sub(killedAt).Seconds()
	res.OutageSec = lastBad.Sub(killedAt).Seconds()
	// The first good answer to a call started after the last bad answer:
	// does it remember the hits admitted before it, the partition
	// policy's among them (the new owner is charged with those)?
	for _, r := range recs {
		if !r.start.After(lastBad) || r.bad() {
			continue
		}
		var before int64 // admitted by the answers received before this call
		for _, o := range recs {
			if o.admitted && o.end.Before(r.start) {
				before++
			}
		}
		res.RemainingAt = r.remaining
		res.ExpectedAt = max(spec.limit-before, 0)
		// An owner that kept the state answers about limit - before
		// (minus what calls in flight took); a fresh bucket answers
		// about limit.
		// Kept: no more than one bucket admitted in all (a cached
		// view may answer a stale remaining, so the first answer
		// alone does not decide). Otherwise the first answer tells a
		// fresh bucket from a state forgotten later.
		tol := max(spec.limit/20, 10)
		switch {
		case res.Excess <= tol:
			res.State = "kept"
		case res.RemainingAt > res.ExpectedAt+tol:
			res.State = "reset"
		default:
			res.State = "reset later"
		}
		return
	}
}
