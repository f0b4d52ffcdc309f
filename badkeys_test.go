package ringlimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// manualClock is a Clock a test moves.
type manualClock struct{ t time.Time }

func (c *manualClock) Now() time.Time { return c.t }

// recordHandler keeps the records logged.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestBadKeysLogAtBoundedRate: a flood of bad keys is counted whole and
// logged once a second per front end, each line saying how many it skipped.
func TestBadKeysLogAtBoundedRate(t *testing.T) {
	clock := &manualClock{t: time.Unix(1000, 0)}
	h := &recordHandler{}
	reg := prometheus.NewRegistry()
	b, err := newBadKeys(reg, slog.New(h), clock)
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("no key")
	steps := []struct {
		name      string
		at        time.Duration
		front     int
		n         int
		wantLines int
	}{
		{"t0: 100 nginx bad keys", 0, frontNginx, 100, 1},
		{"t0+0.5s: 100 more", 500 * time.Millisecond, frontNginx, 100, 1},
		{"t0+0.5s: an envoy one logs on its own", 500 * time.Millisecond, frontEnvoy, 1, 2},
		{"t0+1s: nginx logs again", time.Second, frontNginx, 1, 3},
	}
	for _, s := range steps {
		clock.t = time.Unix(1000, 0).Add(s.at)
		for range s.n {
			b.note(s.front, false, bad)
		}
		if got := len(h.recs); got != s.wantLines {
			t.Errorf("%s: %d log lines, want %d", s.name, got, s.wantLines)
		}
	}
	var skipped int64
	h.recs[2].Attrs(func(a slog.Attr) bool {
		if a.Key == "unlogged_since_last" {
			skipped = a.Value.Int64()
		}
		return true
	})
	if skipped != 199 {
		t.Errorf("the second nginx line reports %d unlogged, want 199", skipped)
	}
	var m dto.Metric
	if err := b.count[frontNginx].Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 201 {
		t.Errorf("nginx bad keys counted %v, want 201", got)
	}
}
