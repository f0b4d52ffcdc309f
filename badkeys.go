package ringlimit

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The front ends whose requests can carry a key that cannot be formed (a
// bad key), as the label "front" of ringlimit_bad_keys_total.
const (
	frontNginx = 0
	frontEnvoy = 1
)

var frontNames = [2]string{frontNginx: "nginx", frontEnvoy: "envoy"}

// badKeyLogEvery is the least time between two log lines about bad keys of
// one front end.
const badKeyLogEvery = time.Second

// badKeys counts the requests of the front ends decided by the bad-key
// policy (their key missing, too long or not UTF-8), and logs them at a
// bounded rate: at most one line per front end per badKeyLogEvery, saying
// how many went unlogged since the last line, so that a flood of bad keys
// is not a flood of logs. It is safe for concurrent use.
type badKeys struct {
	count [2]prometheus.Counter
	log   *slog.Logger
	clock Clock

	mu sync.Mutex // guards the fields below
	// next is when each front end may log again; skipped counts its bad
	// keys not logged since its last line.
	next    [2]time.Time
	skipped [2]int64
}

// newBadKeys returns the counters and logger of bad keys, registering the
// counters on reg.
func newBadKeys(reg prometheus.Registerer, log *slog.Logger, clock Clock) (*badKeys, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_bad_keys_total",
		Help: "Front-end requests whose key could not be formed (missing, too long, not UTF-8), decided by the bad-key policy, by front end.",
	}, []string{"front"})
	if err := reg.Register(vec); err != nil {
		return nil, err
	}
	b := &badKeys{log: log, clock: clock}
	for f, name := range frontNames {
		b.count[f] = vec.WithLabelValues(name)
	}
	return b, nil
}

// note counts one bad key of front, decided allowed or not, and logs it
// unless front logged less than badKeyLogEvery ago. It does not block.
func (b *badKeys) note(front int, allowed bool, err error) {
	b.count[front].Inc()
	now := b.clock.Now()
	b.mu.Lock()
	if now.Before(b.next[front]) {
		b.skipped[front]++
		b.mu.Unlock()
		return
	}
	skipped := b.skipped[front]
	b.next[front], b.skipped[front] = now.Add(badKeyLogEvery), 0
	b.mu.Unlock()
	b.log.Warn("request with a bad key decided by the policy", "front", frontNames[front], "allowed", allowed,
		"err", err, "unlogged_since_last", skipped)
}
