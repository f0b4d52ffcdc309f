package sync

import (
	"fmt"
	"runtime"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// queueTransport queues envelopes for a driver goroutine; Send never
// blocks.
type queueTransport struct {
	from string
	mu   *stdsync.Mutex
	q    *[]*netMsg
}

func (t *queueTransport) Send(to string, env *peerv1.Envelope) {
	t.mu.Lock()
	*t.q = append(*t.q, &netMsg{from: t.from, to: to, env: env})
	t.mu.Unlock()
}

// TestConcurrentUse drives three nodes from several goroutines at once, as
// a real node does (checks from many goroutines, Step and Tick from
// others), on a virtual clock: run with -race. Only invariants are checked:
// every done runs exactly once, nothing panics or deadlocks.
func TestConcurrentUse(t *testing.T) {
	names := []string{"a", "b", "c"}
	var (
		mu    stdsync.Mutex
		queue []*netMsg
		clock atomic.Int64
	)
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	nodes := map[string]*Node{}
	for _, name := range names {
		cfg := DefaultConfig()
		cfg.Self = name
		cfg.Incarnation = 1
		n, err := NewNode(cfg, &queueTransport{from: name, mu: &mu, q: &queue})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	for _, n := range nodes {
		n.SetMembers(now(), names)
	}
	stop := make(chan struct{})
	var driver stdsync.WaitGroup
	driver.Add(1)
	go func() { // the network and the ticker
		defer driver.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			clock.Add(int64(time.Millisecond))
			mu.Lock()
			q := queue
			queue = nil
			mu.Unlock()
			for _, m := range q {
				nodes[m.to].Step(now(), m.env)
			}
			for _, name := range names {
				nodes[name].Tick(now())
			}
			if i == 300 {
				nodes["c"].Unreachable(now(), "a")
			}
		}
	}()
	var workers stdsync.WaitGroup
	var doneCount, want atomic.Int64
	modes := []Mode{ModeCached, ModeOwner, ModeLeased, ModeLocal}
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 2000 {
				reqs := []Request{
					{Key: fmt.Sprintf("k%d", i%17), Hits: 1, Limit: perMinute(500), Mode: modes[(i+w)%4]},
					{Key: "hot", Hits: 1, Limit: perMinute(1000), Mode: modes[i%4]},
				}
				resps := make([]Response, len(reqs))
				var once atomic.Int32
				want.Add(1)
				nodes[names[(i+w)%3]].Check(now(), reqs, resps, func() {
					if once.Add(1) != 1 {
						t.Error("done called twice")
					}
					doneCount.Add(1)
				})
			}
		}()
	}
	workers.Wait()
	// Let the owners answer what is still in flight (timeouts included).
	for doneCount.Load() < want.Load() && clock.Load() < t0.Add(time.Hour).UnixNano() {
		runtime.Gosched()
	}
	nodes["a"].Leave(now())
	for !nodes["a"].HandedOff() && clock.Load() < t0.Add(2*time.Hour).UnixNano() {
		runtime.Gosched()
	}
	close(stop)
	driver.Wait()
	if got := doneCount.Load(); got != want.Load() {
		t.Errorf("%d of %d checks completed", got, want.Load())
	}
	if !nodes["a"].HandedOff() {
		t.Error("a did not finish leaving")
	}
	_ = nodes["a"].HotKeys(3)
}
