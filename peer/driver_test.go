package peer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	rlsync "github.com/ringlimit/ringlimit/sync"
)

// nopSender is a transport that drops everything (a one-node cluster sends
// nothing anyway).
type nopSender struct{}

func (nopSender) Send(string, *peerv1.Envelope) {}

func newTestDriver(t *testing.T, clock Clock) (*Driver, *rlsync.Node) {
	t.Helper()
	cfg := rlsync.DefaultConfig()
	cfg.Self = "a"
	core, err := rlsync.NewNode(cfg, nopSender{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDriver(core, DriverConfig{Clock: clock, TickInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return d, core
}

// The driver applies inputs in the order they were offered, each whole: a
// membership change queued between two checks is seen by the second and
// not by the first, and every check is answered before a later Do runs.
func TestDriverAppliesInputsInOrder(t *testing.T) {
	clock := &fixedClock{t: time.Unix(1_000_000, 0)}
	d, core := newTestDriver(t, clock)
	d.Start(t.Context())
	defer d.Close()

	req := []check.Request{{Key: "k", Hits: 1, Mode: check.ModeOwner,
		Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 2, Period: time.Minute}}}
	before := make([]check.Response, 1)
	after := make([]check.Response, 1)
	var order []string
	if err := d.Check(req, before, func() { order = append(order, "check before") }); err != nil {
		t.Fatal(err)
	}
	err := d.Do(t.Context(), func(now time.Time) {
		order = append(order, "members")
		core.SetMembers(now, []string{"a"})
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	if err := d.Check(req, after, func() { order = append(order, "check after"); close(ran) }); err != nil {
		t.Fatal(err)
	}
	<-ran
	if want := []string{"check before", "members", "check after"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if !errors.Is(before[0].Err, check.ErrNoMembers) {
		t.Errorf("check before the membership: err %v, want ErrNoMembers", before[0].Err)
	}
	if after[0].Err != nil || !after[0].Allowed || after[0].Owner != "a" {
		t.Errorf("check after the membership: %+v, want allowed by owner a", after[0])
	}
}

// After Close, inputs are refused and Do reports it; Close is idempotent and
// returns at once for a driver never started.
func TestDriverRefusesInputsAfterClose(t *testing.T) {
	d, _ := newTestDriver(t, SystemClock{})
	d.Close() // never started
	d.Close()
	if err := d.Check(nil, nil, func() { t.Error("done of a refused check ran") }); !errors.Is(err, ErrDriverStopped) {
		t.Errorf("Check after Close: %v, want ErrDriverStopped", err)
	}
	if err := d.Do(context.Background(), func(time.Time) { t.Error("Do ran after Close") }); !errors.Is(err, ErrDriverStopped) {
		t.Errorf("Do after Close: %v, want ErrDriverStopped", err)
	}
	d.Step(time.Time{}, &peerv1.Envelope{}) // dropped, no block, no panic
	d.Unreachable(time.Time{}, "b")
}

// Close applies what was queued before it returns.
func TestDriverCloseDrainsTheQueue(t *testing.T) {
	d, core := newTestDriver(t, SystemClock{})
	ctx := t.Context()
	d.Start(ctx)
	if err := d.Do(ctx, func(now time.Time) { core.SetMembers(now, []string{"a"}) }); err != nil {
		t.Fatal(err)
	}
	const n = 100
	answered := 0
	resps := make([]check.Response, n)
	for i := range n {
		req := []check.Request{{Key: "k", Hits: 1,
			Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 1000, Period: time.Minute}}}
		if err := d.Check(req, resps[i:i+1], func() { answered++ }); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	if answered != n {
		t.Errorf("%d of %d queued checks answered by Close", answered, n)
	}
}

func TestNewDriverValidates(t *testing.T) {
	_, core := newTestDriver(t, SystemClock{})
	if _, err := NewDriver(nil, DriverConfig{TickInterval: time.Second}); err == nil {
		t.Error("NewDriver(nil core): no error")
	}
	if _, err := NewDriver(core, DriverConfig{}); err == nil {
		t.Error("NewDriver with no TickInterval: no error")
	}
	if _, err := NewDriver(core, DriverConfig{TickInterval: time.Second, QueueLen: -1}); err == nil {
		t.Error("NewDriver with a negative QueueLen: no error")
	}
	if _, err := NewDriver(core, DriverConfig{TickInterval: time.Second, PassItems: -1}); err == nil {
		t.Error("NewDriver with a negative PassItems: no error")
	}
}
