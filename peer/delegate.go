package peer

import (
	"fmt"
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
	// name is this node's name.
	name string
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
	// conflict is the last merge refused because the other side holds this
	// node's name at another address, live (see NotifyMerge); nil if none.
	conflict *nameConflict
}

// nameConflict is a member met in a join that holds this node's name at
// another gossip address.
type nameConflict struct {
	addr  string
	state memberlist.NodeStateType
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
	_ memberlist.MergeDelegate    = (*delegate)(nil)
)

func newDelegate(l *slog.Logger, name string, meta []byte) *delegate {
	return &delegate{
		log: l, name: name, now: time.Now, changed: make(chan struct{}, 1), meta: meta, byName: make(map[string]Member),
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

// NotifyConflict implements memberlist.ConflictDelegate: an alive message
// names a member this node knows at another address. memberlist keeps the
// first; NotifyMerge refuses most such nodes before they get this far.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.log.Error("two nodes claim one name; keeping the first", "member", existing.Name,
		"existing", existing.Address(), "other", other.Address())
}

// NotifyMerge implements memberlist.MergeDelegate. memberlist calls it on
// both sides of a join (the joining node with the seed's member list, the
// seed with the joining node's), before either merges anything, and cancels
// the join when it returns an error. It refuses a list that names, alive or
// suspect, a member this node knows live at another gossip address: two
// processes claiming one name would each own that name's keys, each with a
// bucket of its own. When the name is this node's own, it records the
// conflict for the join loop (Cluster.join), which tells a node that is
// joining (the newcomer: it must not take the name) from one that was
// joined (it keeps its name; the newcomer is refused on both sides).
// Members that left or died do not conflict: a restarted node takes its
// name back.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range peers {
		if p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect {
			continue
		}
		known, ok := d.gossip[p.Name]
		if !ok || known == p.Address() {
			continue
		}
		if p.Name == d.name {
			d.conflict = &nameConflict{addr: p.Address(), state: p.State}
		}
		d.log.Warn("refusing a join: two nodes claim one name", "member", p.Name, "known", known, "other", p.Address())
		return fmt.Errorf("%w: %q is at %s, not %s", ErrNameTaken, p.Name, known, p.Address())
	}
	return nil
}

// takeConflict returns and clears the conflict NotifyMerge recorded last.
func (d *delegate) takeConflict() *nameConflict {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.conflict
	d.conflict = nil
	return c
}
