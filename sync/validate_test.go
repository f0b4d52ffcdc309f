package sync

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// TestValidation: an invalid item gets its error, the others in the same
// Check are still answered.
func TestValidation(t *testing.T) {
	nw := newTestNet(t, nil, "a")
	a := nw.nodes["a"]
	l := perMinute(10)
	reqs := []check.Request{
		{Key: "", Hits: 1, Limit: l},
		{Key: strings.Repeat("k", 1025), Hits: 1, Limit: l},
		{Key: "k", Hits: 1, Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 0, Period: time.Second}},
		{Key: "k", Hits: 1, Limit: l, Mode: check.Mode(9)},
		{Key: "k", Hits: 1, Limit: l, Policy: check.Policy(9)},
		{Key: "k", Hits: -1, Limit: l},
		{Key: "ok", Hits: 1, Limit: l},
	}
	resps := make([]check.Response, len(reqs))
	done := 0
	a.Check(t0, reqs, resps, func() { done++ })
	if done != 1 {
		t.Fatalf("done called %d times, want 1", done)
	}
	var le *bucket.LimitError
	for i, want := range []func(error) bool{
		func(err error) bool { return errors.Is(err, check.ErrEmptyKey) },
		func(err error) bool { return errors.Is(err, check.ErrKeyTooLong) },
		func(err error) bool { return errors.As(err, &le) && le.Field == "limit" },
		func(err error) bool { return errors.Is(err, check.ErrUnknownMode) },
		func(err error) bool { return errors.Is(err, check.ErrUnknownPolicy) },
		func(err error) bool { return errors.Is(err, bucket.ErrNegativeHits) },
		func(err error) bool { return err == nil },
	} {
		if !want(resps[i].Err) || resps[i].Err != nil && resps[i].Allowed {
			t.Errorf("item %d: %+v", i, resps[i])
		}
	}
	if !resps[6].Allowed {
		t.Errorf("valid item: %+v, want allowed", resps[6])
	}
	if got := a.Metrics().Decisions[check.ModeCached][2].Load(); got != 5 {
		t.Errorf("cached errors %d, want 5 (all but the unknown mode)", got)
	}
	// Shorter resps: only the first items are answered, no panic.
	a.Check(t0, reqs, resps[:2], func() { done++ })
	if done != 2 {
		t.Errorf("done not called for short resps")
	}
}

// TestNoMembers: before SetMembers, checks that need an owner fail.
func TestNoMembers(t *testing.T) {
	n, err := NewNode(func() Config { c := DefaultConfig(); c.Self = "a"; return c }(), discard{})
	if err != nil {
		t.Fatal(err)
	}
	r := checkSync(t, n, t0, check.Request{Key: "k", Hits: 1, Limit: perMinute(1)})
	if !errors.Is(r.Err, check.ErrNoMembers) || r.Allowed {
		t.Errorf("got %+v, want ErrNoMembers", r)
	}
	if r := checkSync(t, n, t0, check.Request{Key: "k", Hits: 1, Limit: perMinute(1), Mode: check.ModeLocal}); !r.Allowed {
		t.Errorf("local mode without members: %+v, want allowed", r)
	}
}

// TestConfigValidate: NewNode rejects an invalid Config.
func TestConfigValidate(t *testing.T) {
	for _, tweak := range []func(*Config){
		func(c *Config) { c.Self = "" },
		func(c *Config) { c.Mode = check.ModeDefault },
		func(c *Config) { c.Policy = check.Policy(7) },
		func(c *Config) { c.FlushInterval = 0 },
		func(c *Config) { c.SyncFraction = 0 },
		func(c *Config) { c.MaxBatch = 0 },
		func(c *Config) { c.SweepInterval = 0 },
		func(c *Config) { c.Ring.PartitionCount = 0 },
	} {
		c := DefaultConfig()
		c.Self = "a"
		tweak(&c)
		if _, err := NewNode(c, discard{}); err == nil {
			t.Errorf("NewNode(%+v) accepted", c)
		}
	}
}

// TestStepDrops: envelopes from non-members or to another node are dropped
// and counted; malformed items are dropped and counted; nothing panics.
func TestStepDrops(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b")
	a := nw.nodes["a"]
	key := keyOwnedBy(t, "a", "a", "b")
	flush := func(it *peerv1.FlushItem) *peerv1.Envelope {
		return &peerv1.Envelope{From: "b", To: "a", Incarnation: 1, Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1, Items: []*peerv1.FlushItem{it}}}}
	}
	good := limitToWire(perMinute(10))
	for _, env := range []*peerv1.Envelope{
		{From: "x", To: "a", Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{}}},
		{From: "b", To: "c", Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{}}},
		{From: "a", To: "a", Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{}}},
	} {
		a.Step(t0, env)
	}
	if got := a.Metrics().EnvelopesDropped.Load(); got != 3 {
		t.Errorf("EnvelopesDropped %d, want 3", got)
	}
	malformed := []*peerv1.Envelope{
		nil,
		{From: "b", To: "a"},
		flush(&peerv1.FlushItem{Key: key, Limit: nil, Hits: 1}),
		flush(&peerv1.FlushItem{Key: key, Limit: &peerv1.Limit{Algorithm: 300, Limit: 1, PeriodNs: 1}, Hits: 1}),
		flush(&peerv1.FlushItem{Key: key, Limit: good, Hits: -5}),
		flush(&peerv1.FlushItem{Key: "", Limit: good, Hits: 1}),
		flush(&peerv1.FlushItem{Key: key, Limit: good, Hits: 1, View: []byte{1, 2, 3}}),
	}
	for i, env := range malformed {
		if env != nil && env.GetFlush() != nil {
			env.GetFlush().Seq = uint64(i + 1)
		}
		a.Step(t0, env)
	}
	if got := a.Metrics().Malformed.Load(); got != int64(len(malformed)) {
		t.Errorf("Malformed %d, want %d", got, len(malformed))
	}
	// Answers with bad states, pushes with garbage: dropped, counted.
	a.Step(t0, &peerv1.Envelope{From: "b", To: "a", Body: &peerv1.Envelope_Push{Push: &peerv1.Push{Items: []*peerv1.KeyState{
		{Key: keyOwnedBy(t, "b", "a", "b"), State: []byte{0xff}, Share: 1},
		nil,
	}}}})
	a.Step(t0, &peerv1.Envelope{From: "b", To: "a", Body: &peerv1.Envelope_ForwardReply{ForwardReply: &peerv1.ForwardReply{Id: 99}}})
	a.Step(t0, &peerv1.Envelope{From: "b", To: "a", Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Items: []*peerv1.KeyState{{Key: key, State: []byte("x")}, nil}}}})
	a.Step(t0, &peerv1.Envelope{From: "b", To: "a", Body: &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Items: []*peerv1.ForwardItem{nil, {Key: key}}}}})
}

// FuzzStep feeds arbitrary envelopes to a node: it must never panic.
func FuzzStep(f *testing.F) {
	seeds := []*peerv1.Envelope{
		{From: "b", To: "a", Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 1, Items: []*peerv1.FlushItem{{Key: "k", Limit: limitToWire(perMinute(10)), Hits: 3, Demand: 4, Rate: 1, LeaseWant: 2}}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Push{Push: &peerv1.Push{Items: []*peerv1.KeyState{{Key: "k", State: []byte{1, 1, 0, 10, 1, 0, 0, 0, 0, 20, 0, 0}, Share: 0.5}}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 1, Items: []*peerv1.KeyState{{Key: "k"}}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Forward{Forward: &peerv1.Forward{Id: 1, Items: []*peerv1.ForwardItem{{Key: "k", Limit: limitToWire(perMinute(10)), Hits: 1}}}}},
		// The grants one by one and the join hold's fields (wirelimits.go).
		{From: "b", To: "a", Body: &peerv1.Envelope_Flush{Flush: &peerv1.Flush{Seq: 2, Items: []*peerv1.FlushItem{
			{Key: "k", Limit: limitToWire(perMinute(10)), Hits: 1, LeaseReturn: 3, LeaseSettled: t0.Add(time.Second).UnixNano()},
			{Key: "k", Limit: limitToWire(perMinute(10)), LeaseSettled: 1<<63 - 1}}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_FlushAck{FlushAck: &peerv1.FlushAck{Seq: 1, Items: []*peerv1.KeyState{{Key: "k"}}, LeaseGrantIds: []int64{-1, t0.UnixNano()}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 2, Grants: []*peerv1.LeaseGrant{
			{Key: "k", To: "b", Id: t0.Add(500 * time.Millisecond).UnixNano(), Held: 4},
			{Key: "k", To: "a", Id: t0.Add(400 * time.Millisecond).UnixNano(), Held: 1<<63 - 1},
			{Key: "k", To: "z", Id: -1, Held: -1}}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Backup{Backup: &peerv1.Backup{Seq: 1, AskMembers: []string{"a", "a", "z"}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_Handoff{Handoff: &peerv1.Handoff{Seq: 3, DrainedPartitions: []uint32{0, 0, 1020, 1021, 1<<32 - 1}}}},
		{From: "b", To: "a", Body: &peerv1.Envelope_BackupAck{BackupAck: &peerv1.BackupAck{Seq: 1, KnownMembers: []string{"a", "z"}}}},
	}
	for _, s := range seeds {
		b, _ := proto.Marshal(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var env peerv1.Envelope
		if proto.Unmarshal(data, &env) != nil {
			return
		}
		env.From, env.To = "b", "a"
		nw := newTestNet(t, nil, "a", "b")
		a := nw.nodes["a"]
		// A limit large enough for cached mode's shares (smallForShares), so
		// that a's checks are decided on a, whoever owns "k".
		checkSync(t, a, t0, check.Request{Key: "k", Hits: 1, Limit: perMinute(1000)})
		a.Step(t0, &env)
		a.Tick(t0.Add(time.Second))
		checkSync(t, a, t0.Add(time.Second), check.Request{Key: "k", Hits: 1, Limit: perMinute(1000)})
	})
}
