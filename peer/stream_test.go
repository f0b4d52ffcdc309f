package peer

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// scriptedPeer is a Peer server whose Stream and Deliver record what they
// receive; breakFirst makes the first stream fail after its first batch.
type scriptedPeer struct {
	peerv1.UnimplementedPeerServer
	noStream   bool // Stream answers Unimplemented
	noHeader   bool // Stream never sends its header and waits for the caller
	breakFirst bool

	mu       sync.Mutex
	streams  int
	delivers int
	seqs     []uint64
}

func (p *scriptedPeer) record(envs []*peerv1.Envelope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range envs {
		p.seqs = append(p.seqs, e.GetIncarnation())
	}
}

func (p *scriptedPeer) snapshot() (streams, delivers int, seqs []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams, p.delivers, slices.Clone(p.seqs)
}

func (p *scriptedPeer) Deliver(_ context.Context, req *peerv1.DeliverRequest) (*peerv1.DeliverResponse, error) {
	p.mu.Lock()
	p.delivers++
	p.mu.Unlock()
	p.record(req.GetEnvelopes())
	return &peerv1.DeliverResponse{}, nil
}

func (p *scriptedPeer) Stream(st peerv1.Peer_StreamServer) error {
	if p.noStream {
		return status.Error(codes.Unimplemented, "method Stream not implemented")
	}
	if p.noHeader {
		<-st.Context().Done()
		return st.Context().Err()
	}
	p.mu.Lock()
	p.streams++
	first := p.streams == 1
	p.mu.Unlock()
	if err := st.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&peerv1.DeliverResponse{})
		}
		if err != nil {
			return err
		}
		p.record(req.GetEnvelopes())
		if first && p.breakFirst {
			return status.Error(codes.Unavailable, "scripted: stream broken")
		}
	}
}

// startScripted starts a transport "a" sending to a scripted peer "p".
func startScripted(t *testing.T, p *scriptedPeer, edit func(*TransportConfig)) *tnode {
	t.Helper()
	addr := serve(t, func(s grpc.ServiceRegistrar) { peerv1.RegisterPeerServer(s, p) })
	a := newTNode(t, "a", edit)
	a.SetPeers(append(membersOf(a), Member{Name: "p", GRPCAddr: addr}))
	a.start(t)
	return a
}

// numbered returns an envelope from a to p whose incarnation numbers it.
func numbered(i uint64) *peerv1.Envelope { return &peerv1.Envelope{From: "a", To: "p", Incarnation: i} }

// TestTransportStreams: batches to a peer that serves Stream all travel on
// one stream, in order, and no Deliver call is made.
func TestTransportStreams(t *testing.T) {
	p := &scriptedPeer{}
	a := startScripted(t, p, nil)
	for i := uint64(1); i <= 50; i++ {
		a.Send("p", numbered(i))
		if i%10 == 0 { // let each burst go before the next, so there are several batches
			waitFor(t, 5*time.Second, "the burst delivered", func() bool { _, _, s := p.snapshot(); return len(s) == int(i) })
		}
	}
	streams, delivers, got := p.snapshot()
	if streams != 1 || delivers != 0 {
		t.Errorf("streams %d, delivers %d; want 1 stream, no Deliver", streams, delivers)
	}
	if !slices.Equal(got, seqs(1, 50)) {
		t.Errorf("received %v, want 1..50 in order", got)
	}
	if n := a.h.unreachableOf("p"); n != 0 {
		t.Errorf("p reported unreachable %d times", n)
	}
}

// TestTransportFallsBackToDeliver: a peer without Stream gets every batch by
// Deliver; the batch that found it out is not lost.
func TestTransportFallsBackToDeliver(t *testing.T) {
	p := &scriptedPeer{noStream: true}
	a := startScripted(t, p, nil)
	for i := uint64(1); i <= 5; i++ {
		a.Send("p", numbered(i))
	}
	waitFor(t, 5*time.Second, "all five delivered", func() bool { _, _, s := p.snapshot(); return len(s) == 5 })
	_, delivers, got := p.snapshot()
	if delivers == 0 || !slices.Equal(got, seqs(1, 5)) {
		t.Errorf("delivers %d, received %v; want Deliver calls carrying 1..5", delivers, got)
	}
	if n := a.h.unreachableOf("p"); n != 0 {
		t.Errorf("p reported unreachable %d times", n)
	}
}

// TestTransportStreamReopens: when a stream breaks, the peer is reported
// unreachable once and the next batch opens a new stream.
func TestTransportStreamReopens(t *testing.T) {
	p := &scriptedPeer{breakFirst: true}
	a := startScripted(t, p, nil)
	a.Send("p", numbered(1))
	waitFor(t, 5*time.Second, "the first batch received", func() bool { _, _, s := p.snapshot(); return len(s) == 1 })
	// The stream is broken now; keep sending until a batch fails on it and a
	// later one arrives on a new stream.
	next := uint64(2)
	waitFor(t, 5*time.Second, "a second stream", func() bool {
		a.Send("p", numbered(next))
		next++
		streams, _, _ := p.snapshot()
		return streams == 2 && a.h.unreachableOf("p") == 1
	})
	sent := next
	a.Send("p", numbered(sent))
	waitFor(t, 5*time.Second, "a batch on the new stream", func() bool {
		_, _, s := p.snapshot()
		return len(s) > 0 && s[len(s)-1] == sent
	})
	if n := a.h.unreachableOf("p"); n != 1 {
		t.Errorf("p reported unreachable %d times, want 1", n)
	}
}

// TestTransportStreamWatchdog: a peer that accepts the stream but never
// answers is reported unreachable once RPCTimeout has passed.
func TestTransportStreamWatchdog(t *testing.T) {
	const timeout = 300 * time.Millisecond
	p := &scriptedPeer{noHeader: true}
	a := startScripted(t, p, func(c *TransportConfig) { c.RPCTimeout = timeout })
	sent := time.Now()
	a.Send("p", numbered(1))
	waitFor(t, 5*time.Second, "p reported unreachable", func() bool { return a.h.unreachableOf("p") == 1 })
	if took := time.Since(sent); took < timeout {
		t.Errorf("reported after %v, before the %v timeout", took, timeout)
	}
	if got := counterValue(t, a.metrics.dropped.WithLabelValues(dropRPCError)); got != 1 {
		t.Errorf("dropped{rpc_error} = %v, want 1", got)
	}
}
