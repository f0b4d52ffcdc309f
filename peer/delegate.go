package peer

import (
	"log/slog"
	"sync"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. It keeps the live members with
// decodable metadata and signals the Cluster's goroutine on every change.
// memberlist calls it with its own locks held, so none of its methods blocks:
// each takes d.mu briefly and signals through a channel of capacity one.
type delegate struct {
	log *slog.Logger
	// changed holds a token when the member map changed since the Cluster's
	// goroutine last read it.
	changed chan struct{}

	mu sync.Mutex // guards the fields below
	// meta is this node's gossip metadata.
	meta []byte
	// byName holds the live members by name.
	byName map[string]Member
}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func newDelegate(l *slog.Logger, meta []byte) *delegate {
	return &delegate{log: l, changed: make(chan struct{}, 1), meta: meta, byName: make(map[string]Member)}
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
	d.mu.Lock()
	ms := make([]Member, 0, len(d.byName))
	for _, m := range d.byName {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	sortMembers(ms)
	return ms
}

// upsert records n as live, or drops it if its metadata cannot be used.
func (d *delegate) upsert(n *memberlist.Node) {
	protocol, grpcAddr, err := decodeMeta(n.Meta)
	d.mu.Lock()
	if err != nil {
		delete(d.byName, n.Name)
	} else {
		d.byName[n.Name] = Member{Name: n.Name, GRPCAddr: grpcAddr, Protocol: protocol, GossipAddr: n.Address()}
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

// NotifyLeave implements memberlist.EventDelegate: n left or failed.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.mu.Lock()
	delete(d.byName, n.Name)
	d.mu.Unlock()
	d.signal()
}

// NotifyConflict implements memberlist.ConflictDelegate: two nodes claim one
// name. memberlist keeps the first; the operator must rename one.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.log.Error("two nodes claim one name; keeping the first", "member", existing.Name,
		"existing", existing.Address(), "other", other.Address())
}
