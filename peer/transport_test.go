package peer

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// t0 is the instant of the tests' fixed clock.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// recorder is a Handler that records what it is given.
type recorder struct {
	mu          sync.Mutex
	envs        []*peerv1.Envelope
	stepTimes   []time.Time
	unreachable []string
}

func (r *recorder) Step(now time.Time, env *peerv1.Envelope) {
	r.mu.Lock()
	r.envs = append(r.envs, env)
	r.stepTimes = append(r.stepTimes, now)
	r.mu.Unlock()
}

func (r *recorder) Unreachable(now time.Time, peer string) {
	r.mu.Lock()
	r.unreachable = append(r.unreachable, peer)
	r.mu.Unlock()
}

// got returns the incarnations of the envelopes received from from.
func (r *recorder) got(from string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, e := range r.envs {
		if e.GetFrom() == from {
			out = append(out, e.GetIncarnation())
		}
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.envs)
}

func (r *recorder) unreachableOf(peer string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.unreachable {
		if p == peer {
			n++
		}
	}
	return n
}

// tnode is a Transport served by its own gRPC server on loopback.
type tnode struct {
	*Transport
	h    *recorder
	addr string
}

// serve starts a gRPC server on an OS-chosen loopback port with register's
// services; it is stopped when the test ends.
func serve(t *testing.T, register func(grpc.ServiceRegistrar)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String()
}

// newTNode returns a transport for name, served but not started.
func newTNode(t *testing.T, name string, edit func(*TransportConfig)) *tnode {
	t.Helper()
	cfg := DefaultTransportConfig()
	cfg.Self = name
	cfg.Clock = fixedClock{t0}
	if edit != nil {
		edit(&cfg)
	}
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatalf("NewTransport(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return &tnode{Transport: tr, h: &recorder{}, addr: serve(t, tr.RegisterServer)}
}

func (n *tnode) start(t *testing.T) {
	t.Helper()
	if err := n.Start(context.Background(), n.h); err != nil {
		t.Fatal(err)
	}
}

func membersOf(nodes ...*tnode) []Member {
	var ms []Member
	for _, n := range nodes {
		ms = append(ms, Member{Name: n.cfg.Self, GRPCAddr: n.addr, Protocol: ProtocolVersion})
	}
	return ms
}

func env(from, to string, seq uint64) *peerv1.Envelope {
	return &peerv1.Envelope{From: from, To: to, Incarnation: seq}
}

func seqs(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func histogramCountSum(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestTransportDelivers sends envelopes every way between three nodes: each
// receiver gets every envelope, in order, at the clock's instant.
func TestTransportDelivers(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newTNode(t, "a", func(c *TransportConfig) { c.Registerer = reg })
	b, c := newTNode(t, "b", nil), newTNode(t, "c", nil)
	nodes := []*tnode{a, b, c}
	for _, n := range nodes {
		n.SetPeers(membersOf(nodes...))
		n.start(t)
	}
	const per = 200
	for i := uint64(1); i <= per; i++ {
		for _, from := range nodes {
			for _, to := range nodes {
				if from != to {
					from.Send(to.cfg.Self, env(from.cfg.Self, to.cfg.Self, i))
				}
			}
		}
	}
	waitFor(t, 10*time.Second, "every envelope delivered", func() bool {
		return a.h.count() == 2*per && b.h.count() == 2*per && c.h.count() == 2*per
	})
	for _, to := range nodes {
		for _, from := range nodes {
			if from == to {
				continue
			}
			if got := to.h.got(from.cfg.Self); !slices.Equal(got, seqs(1, per)) {
				t.Errorf("%s got from %s %v, want 1..%d in order", to.cfg.Self, from.cfg.Self, got, per)
			}
		}
		for _, at := range to.h.stepTimes {
			if !at.Equal(t0) {
				t.Fatalf("%s: Step at %v, want the clock's %v", to.cfg.Self, at, t0)
			}
		}
	}
	// The sender counts after its RPC returns, maybe after the receiver's Step.
	// Counters are updated after the RPC returns, or after the last Step.
	waitFor(t, 5*time.Second, "a counts 400 envelopes sent and 400 received", func() bool {
		return counterValue(t, a.metrics.sent) == 2*per && counterValue(t, a.metrics.received) == 2*per
	})
	rpcs, _ := histogramCountSum(t, a.metrics.batchSize)
	t.Logf("a sent %d envelopes in %d Deliver RPCs", 2*per, rpcs)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) == 0 {
		t.Errorf("nothing registered with the Registerer")
	}
}

// TestTransportBatches: envelopes queued before Start go out in batches
// bounded by MaxBatch and MaxBatchBytes, in order.
func TestTransportBatches(t *testing.T) {
	size := protoSize(env("a", "b", 10)) // every envelope below has this size
	tests := []struct {
		name               string
		maxBatch, maxBytes int
		n                  uint64
		wantRPCs           uint64
	}{
		{"by count: 4+4+2", 4, 1 << 20, 10, 3},
		{"by bytes: 2+2+1", 100, 2*size + size/2, 5, 3},
		{"one oversized each", 100, 1, 3, 3},
		{"all in one", 100, 1 << 20, 10, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTNode(t, "a", func(c *TransportConfig) { c.MaxBatch, c.MaxBatchBytes = tt.maxBatch, tt.maxBytes })
			b := newTNode(t, "b", nil)
			for _, n := range []*tnode{a, b} {
				n.SetPeers(membersOf(a, b))
			}
			b.start(t)
			for i := uint64(1); i <= tt.n; i++ {
				a.Send("b", env("a", "b", 10+i-1)) // 10..: one varint byte
			}
			a.start(t)
			waitFor(t, 10*time.Second, "b receives everything and a counts it sent", func() bool {
				return b.h.count() == int(tt.n) && counterValue(t, a.metrics.sent) == float64(tt.n)
			})
			if got := b.h.got("a"); !slices.Equal(got, seqs(10, 10+tt.n-1)) {
				t.Errorf("b got %v, want 10..%d in order", got, 10+tt.n-1)
			}
			if rpcs, sum := histogramCountSum(t, a.metrics.batchSize); rpcs != tt.wantRPCs || sum != float64(tt.n) {
				t.Errorf("%d RPCs carrying %v envelopes, want %d carrying %d", rpcs, sum, tt.wantRPCs, tt.n)
			}
		})
	}
}

// TestTransportRejects: the server hands the Handler only envelopes from
// current members addressed to this node, of an acceptable size, and
// authorised.
func TestTransportRejects(t *testing.T) {
	big := env("a", "b", 1<<62) // the largest here by far
	b := newTNode(t, "b", func(c *TransportConfig) {
		c.MaxEnvelopeBytes = protoSize(big) - 1
		c.MaxRecvEnvelopes = 8
		c.Authorize = func(_ context.Context, from string) error {
			if from == "mallory" {
				return errors.New("no")
			}
			return nil
		}
	})
	client := peerClient(t, b.addr)
	deliver := func(envs ...*peerv1.Envelope) error {
		_, err := client.Deliver(context.Background(), &peerv1.DeliverRequest{Envelopes: envs})
		return err
	}
	if err := deliver(env("a", "b", 1)); status.Code(err) != codes.Unavailable {
		t.Errorf("Deliver before Start = %v, want Unavailable", err)
	}
	b.SetPeers([]Member{{Name: "a", GRPCAddr: "127.0.0.1:1"}, {Name: "b", GRPCAddr: b.addr}, {Name: "mallory", GRPCAddr: "127.0.0.1:1"}})
	b.start(t)

	tests := []struct {
		name   string
		env    *peerv1.Envelope
		reason string // "" accepted
	}{
		{"member to self", env("a", "b", 1), ""},
		{"non-member", env("eve", "b", 2), rejectUnknownSender},
		{"from self", env("b", "b", 3), rejectUnknownSender},
		{"to another node", env("a", "c", 4), rejectWrongRecipient},
		{"too large", big, rejectTooLarge},
		{"unauthorised", env("mallory", "b", 5), rejectUnauthorized},
		{"member again", env("a", "b", 6), ""},
	}
	for _, tt := range tests {
		before := counterValue(t, b.metrics.rejected.WithLabelValues(orAccepted(tt.reason)))
		if tt.reason == "" {
			before = counterValue(t, b.metrics.received)
		}
		if err := deliver(tt.env); err != nil {
			t.Fatalf("%s: Deliver = %v, want success (rejection is per envelope)", tt.name, err)
		}
		after := counterValue(t, b.metrics.rejected.WithLabelValues(orAccepted(tt.reason)))
		if tt.reason == "" {
			after = counterValue(t, b.metrics.received)
		}
		if after != before+1 {
			t.Errorf("%s: counter %q went %v -> %v, want +1", tt.name, orAccepted(tt.reason), before, after)
		}
	}
	if got := b.h.got("a"); !slices.Equal(got, []uint64{1, 6}) {
		t.Errorf("Handler got from a %v, want [1 6]", got)
	}
	if got := b.h.count(); got != 2 {
		t.Errorf("Handler got %d envelopes, want 2", got)
	}
	tooMany := make([]*peerv1.Envelope, 9)
	for i := range tooMany {
		tooMany[i] = env("a", "b", 1)
	}
	if err := deliver(tooMany...); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Deliver of 9 envelopes (max 8) = %v, want InvalidArgument", err)
	}
}

func orAccepted(reason string) string {
	if reason == "" {
		return "accepted"
	}
	return reason
}

func peerClient(t *testing.T, addr string) peerv1.PeerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return peerv1.NewPeerClient(conn)
}

// hungServer is a Peer whose Deliver blocks until its caller gives up.
type hungServer struct {
	peerv1.UnimplementedPeerServer
	entered  chan struct{}
	inflight atomic.Int32
}

func (s *hungServer) Deliver(ctx context.Context, _ *peerv1.DeliverRequest) (*peerv1.DeliverResponse, error) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestTransportNoHeadOfLineBlocking: while a call to a hung peer is in
// flight, envelopes to a healthy peer are delivered; the hung call's deadline
// reports the peer Unreachable.
func TestTransportNoHeadOfLineBlocking(t *testing.T) {
	hung := &hungServer{entered: make(chan struct{}, 1)}
	hungAddr := serve(t, func(s grpc.ServiceRegistrar) { peerv1.RegisterPeerServer(s, hung) })
	const timeout = 1500 * time.Millisecond
	a := newTNode(t, "a", func(c *TransportConfig) { c.RPCTimeout = timeout })
	b := newTNode(t, "b", nil)
	ms := append(membersOf(a, b), Member{Name: "h", GRPCAddr: hungAddr})
	a.SetPeers(ms)
	b.SetPeers(ms)
	a.start(t)
	b.start(t)

	sent := time.Now()
	a.Send("h", env("a", "h", 1))
	a.Send("h", env("a", "h", 2)) // queued behind the hung call
	<-hung.entered
	for i := uint64(1); i <= 5; i++ {
		a.Send("b", env("a", "b", i))
	}
	waitFor(t, timeout/2, "b receives while the call to h hangs", func() bool { return b.h.count() == 5 })
	if hung.inflight.Load() != 1 || a.h.unreachableOf("h") != 0 {
		t.Fatalf("the call to h ended before b received; the test proves nothing")
	}
	waitFor(t, 5*time.Second, "h reported unreachable after the deadline", func() bool { return a.h.unreachableOf("h") >= 1 })
	if took := time.Since(sent); took < timeout {
		t.Errorf("h reported unreachable after %v, before the %v deadline", took, timeout)
	}
	if got := a.h.unreachableOf("b"); got != 0 {
		t.Errorf("b reported unreachable %d times", got)
	}
}

// TestTransportUnreachable: a peer that refuses connections is reported
// Unreachable and the batch is dropped, counted.
func TestTransportUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close()
	a := newTNode(t, "a", nil)
	a.SetPeers(append(membersOf(a), Member{Name: "dead", GRPCAddr: deadAddr}))
	a.start(t)
	a.Send("dead", env("a", "dead", 1))
	waitFor(t, 5*time.Second, "dead reported unreachable", func() bool { return a.h.unreachableOf("dead") == 1 })
	if got := counterValue(t, a.metrics.dropped.WithLabelValues(dropRPCError)); got != 1 {
		t.Errorf("dropped{rpc_error} = %v, want 1", got)
	}
	if got := counterValue(t, a.metrics.rpcErrors.WithLabelValues("dead")); got != 1 {
		t.Errorf("deliver_errors{peer=dead} = %v, want 1", got)
	}
}

// TestTransportSendDrops: Send never blocks; what it cannot queue it drops
// and counts, by reason.
func TestTransportSendDrops(t *testing.T) {
	a := newTNode(t, "a", func(c *TransportConfig) { c.QueueLen = 2 })
	a.SetPeers([]Member{{Name: "a", GRPCAddr: a.addr}, {Name: "b", GRPCAddr: "127.0.0.1:1"}})
	drops := func(reason string) float64 { return counterValue(t, a.metrics.dropped.WithLabelValues(reason)) }

	for i := uint64(1); i <= 5; i++ { // not started: nothing drains the queue
		a.Send("b", env("a", "b", i))
	}
	a.Send("zed", env("a", "zed", 1))
	a.Send("a", env("a", "a", 1))
	a.Send("b", nil)
	if got := drops(dropQueueFull); got != 3 {
		t.Errorf("dropped{queue_full} = %v, want 3", got)
	}
	if got := drops(dropUnknownPeer); got != 1 {
		t.Errorf("dropped{unknown_peer} = %v, want 1", got)
	}
	if got := drops(dropSelf); got != 1 {
		t.Errorf("dropped{self} = %v, want 1", got)
	}
	a.SetPeers([]Member{{Name: "a", GRPCAddr: a.addr}}) // b leaves with 2 queued
	if got := drops(dropPeerGone); got != 2 {
		t.Errorf("dropped{peer_gone} = %v, want 2", got)
	}
	a.Send("b", env("a", "b", 6))
	if got := drops(dropUnknownPeer); got != 2 {
		t.Errorf("after b left: dropped{unknown_peer} = %v, want 2", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	a.Send("b", env("a", "b", 7))
	if got := drops(dropClosed); got != 1 {
		t.Errorf("dropped{closed} = %v, want 1", got)
	}
	if err := a.Start(context.Background(), a.h); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
}

// TestTransportPeerMoves: a peer that comes back at another address is
// reached there.
func TestTransportPeerMoves(t *testing.T) {
	a := newTNode(t, "a", nil)
	b1, b2 := newTNode(t, "b", nil), newTNode(t, "b", nil)
	for _, n := range []*tnode{a, b1, b2} {
		n.SetPeers(membersOf(a, b1))
		n.start(t)
	}
	a.Send("b", env("a", "b", 1))
	waitFor(t, 5*time.Second, "b1 receives", func() bool { return b1.h.count() == 1 })
	a.SetPeers(membersOf(a, b2))
	a.Send("b", env("a", "b", 2))
	waitFor(t, 5*time.Second, "b2 receives", func() bool { return b2.h.count() == 1 })
	if got := b2.h.got("a"); !slices.Equal(got, []uint64{2}) {
		t.Errorf("b2 got %v, want [2]", got)
	}
}

func TestTransportConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*TransportConfig)
		ok   bool
	}{
		{"default with Self", func(*TransportConfig) {}, true},
		{"no Self", func(c *TransportConfig) { c.Self = "" }, false},
		{"zero queue", func(c *TransportConfig) { c.QueueLen = 0 }, false},
		{"zero batch", func(c *TransportConfig) { c.MaxBatch = 0 }, false},
		{"zero timeout", func(c *TransportConfig) { c.RPCTimeout = 0 }, false},
		{"zero recv envelopes", func(c *TransportConfig) { c.MaxRecvEnvelopes = 0 }, false},
		{"zero envelope bytes", func(c *TransportConfig) { c.MaxEnvelopeBytes = 0 }, false},
	}
	for _, tt := range tests {
		c := DefaultTransportConfig()
		c.Self = "a"
		tt.edit(&c)
		err := c.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if _, err := NewTransport(c); (err == nil) != tt.ok {
			t.Errorf("%s: NewTransport error = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	c := DefaultTransportConfig()
	c.Self = "a"
	tr, _ := NewTransport(c)
	if err := tr.Start(context.Background(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Start(nil Handler) = %v, want ErrInvalidConfig", err)
	}
	if err := tr.Start(context.Background(), &recorder{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background(), &recorder{}); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want ErrAlreadyStarted", err)
	}
	tr.Close()
}

func protoSize(e *peerv1.Envelope) int { return proto.Size(e) }
