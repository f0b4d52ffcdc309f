package peer

import (
	"fmt"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// floodFlush is a flush of items new keys, as a node flooded with new keys
// sends each owner: every key with its limit, one hit.
func floodFlush(from, to string, seq uint64, items int) *peerv1.Envelope {
	f := &peerv1.Flush{Seq: seq}
	for k := range items {
		f.Items = append(f.Items, &peerv1.FlushItem{Key: fmt.Sprintf("flood\x00k%08d", int(seq)*items+k),
			Limit: &peerv1.Limit{Algorithm: 1, Limit: 100, PeriodNs: 3600e9}, Hits: 1, Demand: 1, Rate: 1})
	}
	return &peerv1.Envelope{From: from, To: to, Incarnation: 1, Body: &peerv1.Envelope_Flush{Flush: f}}
}

// liveHeap returns the live heap after a collection, in bytes.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSendQueueBytesBounded: a peer that takes nothing (its sender not
// running, as when it is stuck) is sent 600 flushes of 333 new keys each
// (8 MiB encoded, the flushes of 200k keys of a flood to one owner). Its
// queue keeps at most half of MaxQueueBytes of them, encoded, and the
// heap they hold stays within 8 times that; the rest is dropped and
// counted (queue_bytes). Before the bound the queue (4096 envelopes) kept
// all 600: 54 MiB of heap.
func TestSendQueueBytesBounded(t *testing.T) {
	a := newTNode(t, "a", nil)
	a.SetPeers([]Member{{Name: "a", GRPCAddr: a.addr}, {Name: "b", GRPCAddr: "127.0.0.1:1"}})
	const sends, items = 600, 333
	before := liveHeap()
	encoded := 0
	for i := range sends {
		env := floodFlush("a", "b", uint64(i), items)
		encoded += proto.Size(env)
		a.Send("b", env) // queued, or garbage
	}
	held := liveHeap() - before
	share := a.cfg.MaxQueueBytes / 2
	queued := a.queued.Load()
	dropped := counterValue(t, a.metrics.dropped.WithLabelValues(dropQueueBytes))
	t.Logf("sent %d envelopes, %d bytes encoded; queued %d bytes encoded, %d envelopes dropped; heap held %.1f MiB (%.1f per encoded byte queued)",
		sends, encoded, queued, int(dropped), float64(held)/(1<<20), float64(held)/float64(max(queued, 1)))
	if queued > share {
		t.Errorf("queued %d bytes encoded, want at most MaxQueueBytes/2 = %d", queued, share)
	}
	if held > 8*share {
		t.Errorf("the queue holds %d bytes of heap, want at most 8 x %d", held, share)
	}
	if dropped == 0 || int(dropped) != sends-len(a.peers["b"].queue) {
		t.Errorf("dropped{queue_bytes} = %v, want %d (sent %d, queued %d)", dropped, sends-len(a.peers["b"].queue), sends, len(a.peers["b"].queue))
	}
	runtime.KeepAlive(a)
}
