package peer

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. It keeps the live members with
// decodable metadata, and the members that departed, failed or left, with
// their gossip addresses, and signals the Cluster's goroutine on every
// change. memberlist calls it with its own locks held, so none of its
// methods blocks: each takes d.mu briefly and signals through a channel of
// capacity one.
type delegate struct {
	log *slog.Logger
	// now is the clock departures are stamped with.
	now func() time.Time
	// changed holds a token when the member map changed since the Cluster's
	// goroutine last read it.
	changed chan struct{}

	mu sync.Mutex // guards the fields below
	// meta is this node's gossip metadata.
	meta []byte
	// byName holds the live members by name.
	byName map[string]Member
	// leaving marks the live members whose metadata says they are leaving.
	leaving map[string]bool
	// gossip holds the gossip address of every live member, usable
	// metadata or not. memberlist rewrites a member's address in place, so
	// it may be read only from the event callbacks, under memberlist's own
	// lock: the *memberlist.Node of Memberlist.Members must not be read
	// afterwards (hashicorp/memberlist#306).
	gossip map[string]string
	// failed and left hold the members that departed, by name: failed (no
	// leave announced: a crash, or out of reach) or left gracefully. An
	// entry goes when the member is live again or when prune forgets it.
	failed, left map[string]departed
}

// departed is a member that went away: its gossip address and when.
type departed struct {
	addr string
	at   time.Time
}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func newDelegate(l *slog.Logger, meta []byte) *delegate {
	return &delegate{
		log: l, now: time.Now, changed: make(chan struct{}, 1), meta: meta, byName: make(map[string]Member),
		leaving: map[string]bool{}, gossip: map[string]string{}, failed: map[string]departed{}, left: map[string]departed{},
	}
}

// signal leaves a token in d.changed unless one is there already.
func (d *delegate) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *delegate) setMeta(meta []byte) {
	d.mu.Lock()
	d.meta = meta
	d.mu.Unlock()
}

// members returns the live members sorted by name.
func (d *delegate) members() []Member {
	ms, _ := d.snapshot()
	return ms
}

// snapshot returns the live members sorted by name and the names of the
// members that failed, sorted, taken together.
func (d *delegate) snapshot() ([]Member, []string) {
	d.mu.Lock()
	ms := make([]Member, 0, len(d.byName))
	for _, m := range d.byName {
		ms = append(ms, m)
	}
	failed := slices.Sorted(maps.Keys(d.failed))
	d.mu.Unlock()
	sortMembers(ms)
	return ms, failed
}

// liveGossipAddrs returns the gossip addresses of the live members.
func (d *delegate) liveGossipAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Collect(maps.Values(d.gossip))
}

// departures returns copies of the failed and left members.
func (d *delegate) departures() (failed, left map[string]departed) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.failed), maps.Clone(d.left)
}

// prune forgets the departures older than ttl at now, signalling if a failed
// member was forgotten (the Cluster then reports it no more).
func (d *delegate) prune(now time.Time, ttl time.Duration) {
	d.mu.Lock()
	changed := false
	for name, x := range d.failed {
		if now.Sub(x.at) >= ttl {
			delete(d.failed, name)
			changed = true
		}
	}
	maps.DeleteFunc(d.left, func(_ string, x departed) bool { return now.Sub(x.at) >= ttl })
	d.mu.Unlock()
	if changed {
		d.signal()
	}
}

// setLeaving marks this node's own metadata as leaving.
func (d *delegate) setLeaving() {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := decodeWireMeta(d.meta)
	if err != nil {
		return // unreachable: the Cluster encodes its own metadata
	}
	m.Leaving = true
	d.meta = encodeWireMeta(m)
}

// upsert records n as live, or drops it if its metadata cannot be used.
func (d *delegate) upsert(n *memberlist.Node) {
	m, err := decodeWireMeta(n.Meta)
	d.mu.Lock()
	delete(d.failed, n.Name)
	delete(d.left, n.Name)
	d.gossip[n.Name] = n.Address()
	if err != nil {
		delete(d.byName, n.Name)
		delete(d.leaving, n.Name)
	} else {
		d.byName[n.Name] = Member{Name: n.Name, GRPCAddr: m.GRPC, Protocol: m.V, GossipAddr: n.Address(), Incarnation: m.Inc}
		d.leaving[n.Name] = m.Leaving
	}
	d.mu.Unlock()
	if err != nil {
		d.log.Warn("ignoring a member with unusable metadata", "member", n.Name, "gossip", n.Address(), "err", err)
	}
	d.signal()
}

// NodeMeta implements memberlist.Delegate: this node's metadata.
func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil // Validate bounds it by memberlist.MetaMaxSize; memberlist asks for that
	}
	return d.meta
}

// NotifyMsg implements memberlist.Delegate: no user messages are gossiped.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate: nothing to broadcast.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate: no state to push or pull.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate: no state to merge.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin implements memberlist.EventDelegate.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.upsert(n) }

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.upsert(n) }

// NotifyLeave implements memberlist.EventDelegate: n left or failed. It
// left if its metadata said it was leaving: memberlist (v0.7) does not set
// n.State for the event delegate, so the leave is announced in the metadata
// first (Cluster.Leave).
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	x := departed{addr: n.Address(), at: d.now()}
	d.mu.Lock()
	if d.leaving[n.Name] || n.State == memberlist.StateLeft {
		d.left[n.Name] = x
		delete(d.failed, n.Name)
	} else {
		d.failed[n.Name] = x
	}
	delete(d.byName, n.Name)
	delete(d.leaving, n.Name)
	delete(d.gossip, n.Name)
	d.mu.Unlock()
	d.signal()
}

// NotifyConflict implements memberlist.ConflictDelegate: two nodes claim one
// name. memberlist keeps the first; the operator must rename one.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.log.Error("two nodes claim one name; keeping the first", "member", existing.Name,
		"existing", existing.Address(), "other", other.Address())
}
