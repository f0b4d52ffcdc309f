package sync

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/internal/cputime"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// benchNet is the leanest driver of a cluster of cores: one queue of
// messages in the order they fall due (each is sent at the network's now
// and delivered a fixed latency later, so the queue stays sorted), no
// counting, no faults. A benchmark on it measures the cores, not a network.
type benchNet struct {
	now     time.Time
	latency time.Duration
	queue   []benchMsg
	head    int
	nodes   map[string]*Node
	// sent counts the messages sent.
	sent int
}

type benchMsg struct {
	at  time.Time
	to  string
	env *peerv1.Envelope
}

// benchSender is one node's Transport on a benchNet.
type benchSender struct{ net *benchNet }

// Send implements Transport.
func (s benchSender) Send(to string, env *peerv1.Envelope) {
	nw := s.net
	nw.sent++
	if len(nw.queue) == cap(nw.queue) && nw.head > 0 {
		// Full: move what is not delivered yet to the front rather than
		// grow. Checks never stop arriving, so the queue is never empty
		// and would otherwise grow by every message of the run.
		k := copy(nw.queue, nw.queue[nw.head:])
		clear(nw.queue[k:])
		nw.queue, nw.head = nw.queue[:k], 0
	}
	nw.queue = append(nw.queue, benchMsg{at: nw.now.Add(nw.latency), to: to, env: env})
}

// deliverUntil steps every message due by t into its receiver.
func (nw *benchNet) deliverUntil(t time.Time) {
	for nw.head < len(nw.queue) && !nw.queue[nw.head].at.After(t) {
		m := nw.queue[nw.head]
		nw.queue[nw.head] = benchMsg{}
		nw.head++
		nw.now = m.at
		if n := nw.nodes[m.to]; n != nil {
			n.Step(m.at, m.env)
		}
	}
	if nw.head == len(nw.queue) {
		nw.queue, nw.head = nw.queue[:0], 0
	}
	nw.now = t
}

// BenchmarkCoreUniform measures the cores' CPU per decision in the
// simulator's worst case, without the simulator: 5 nodes, checks of one hit
// on keys drawn uniformly from 100,000 (almost every check meets a key its
// node has not seen lately), 100,000 checks per simulated second spread
// over the nodes in turn, every node ticked every 5 ms, messages delivered
// after 1 ms. One op is one decision and everything it costs the cluster:
// the check, its forwards, flushes, pushes, acks, leases and ticks. Figures
// in docs/bench.md (issue #14: at most 1 µs per decision).
func BenchmarkCoreUniform(b *testing.B) {
	benchCoreUniform(b, 5, 100_000)
}

// BenchmarkCoreCompareShape is BenchmarkCoreUniform in the shape of make
// compare's 100-check calls (docs/comparison.md): 3 nodes, 10,000 keys,
// 100,000 checks per simulated second (make compare's calls carried
// 78,000 to 145,000 checks/s in its recorded runs).
func BenchmarkCoreCompareShape(b *testing.B) {
	benchCoreUniform(b, 3, 10_000)
}

// benchCoreUniform runs BenchmarkCoreUniform's workload on nodes nodes
// with checks of keys keys drawn uniformly, in each mode.
func benchCoreUniform(b *testing.B, nodes, keys int) {
	for _, mode := range []check.Mode{check.ModeOwner, check.ModeCached, check.ModeLeased} {
		b.Run(mode.String(), func(b *testing.B) {
			const (
				gap       = 10 * time.Microsecond // 100k checks per second
				tickEvery = 5 * time.Millisecond
			)
			names := make([]string, nodes)
			for i := range names {
				names[i] = fmt.Sprintf("n%d", i+1)
			}
			nw := &benchNet{now: t0, latency: time.Millisecond, nodes: map[string]*Node{}}
			for _, name := range names {
				cfg := DefaultConfig()
				cfg.Self, cfg.HandoffWait, cfg.Mode = name, 0, mode
				n, err := NewNode(cfg, benchSender{nw})
				if err != nil {
					b.Fatal(err)
				}
				nw.nodes[name] = n
			}
			for _, name := range names {
				nw.nodes[name].SetMembers(t0, names)
			}
			// A request's key is made when the request is read, as a
			// driver decodes it: a fresh string, in cache, where a table of
			// prepared keys would charge the core a cache miss
			// production does not pay. Its text is user:%07d.
			keyBuf := []byte("user:0000000")
			rng := rand.New(rand.NewPCG(1, 2))
			reqs := []check.Request{{Hits: 1, Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1000, Period: time.Second}}}
			resps := make([]check.Response, 1)
			done := func() {}
			at, nextTick := t0, t0
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, sent0 := cputime.Process(), nw.sent
			for i := 0; b.Loop(); i++ {
				at = at.Add(gap)
				for !nextTick.After(at) {
					nw.deliverUntil(nextTick)
					for _, name := range names {
						nw.nodes[name].Tick(nextTick)
					}
					nextTick = nextTick.Add(tickEvery)
				}
				nw.deliverUntil(at)
				for k, d := rng.IntN(keys), len(keyBuf)-1; d >= len("user:"); k, d = k/10, d-1 {
					keyBuf[d] = byte('0' + k%10)
				}
				reqs[0].Key = string(keyBuf)
				nw.nodes[names[i%nodes]].Check(at, reqs, resps, done)
			}
			// CPU time per decision, which the machine's other load does not
			// inflate as it does ns/op (wall time).
			if cpu := cputime.Process() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
			b.ReportMetric(float64(nw.sent-sent0)/float64(b.N), "msgs/op")
		})
	}
}
