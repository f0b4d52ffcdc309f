package ring

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Holder holds the current Ring of a node and replaces it on membership
// changes. Readers call Load (or Owner) without any lock: one atomic load,
// so the request path scales with cores and never waits for a rebuild.
// Writers are serialised by a mutex, so concurrent changes never lose one
// another. A Holder is safe for concurrent use; it must not be copied.
type Holder struct {
	mu  sync.Mutex // serialises writers; readers never take it
	cur atomic.Pointer[Ring]
}

// Change describes one membership change made through a Holder.
type Change struct {
	// Before and After are the rings before and after the change. They are
	// the same ring if the change was a no-op.
	Before, After *Ring
	// Joined and Left are the members added and removed, sorted.
	Joined, Left []string
}

// Changed reports whether the membership changed.
func (c Change) Changed() bool { return c.Before != c.After }

// Moves returns the partitions that changed owner, as Diff(c.Before, c.After).
func (c Change) Moves() []PartitionMove {
	if !c.Changed() {
		return nil
	}
	return diff(c.Before, c.After)
}

// NewHolder returns a Holder whose current ring is New(cfg, members...).
func NewHolder(cfg Config, members ...string) (*Holder, error) {
	r, err := New(cfg, members...)
	if err != nil {
		return nil, err
	}
	h := &Holder{}
	h.cur.Store(r)
	return h, nil
}

// Load returns the current ring. Keep the result for the duration of one
// operation to see a single membership throughout.
func (h *Holder) Load() *Ring { return h.cur.Load() }

// Owner returns the owner of key in the current ring: Load().Owner(key).
func (h *Holder) Owner(key string) (string, error) { return h.cur.Load().Owner(key) }

// Version returns the version of the current ring.
func (h *Holder) Version() uint64 { return h.cur.Load().Version() }

// SetMembers makes members the current membership and reports what changed.
// On error the current ring is left as it was and the Change is empty.
func (h *Holder) SetMembers(members []string) (Change, error) {
	return h.update(func(r *Ring) (*Ring, error) { return r.WithMembers(members) })
}

// Add adds member name. Adding a present member is a no-op.
func (h *Holder) Add(name string) (Change, error) {
	return h.update(func(r *Ring) (*Ring, error) { return r.WithMember(name) })
}

// Remove removes member name. Removing an absent member is a no-op.
func (h *Holder) Remove(name string) (Change, error) {
	return h.update(func(r *Ring) (*Ring, error) { return r.WithoutMember(name) })
}

// update derives a new ring from the current one and publishes it.
func (h *Holder) update(derive func(*Ring) (*Ring, error)) (Change, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := h.cur.Load()
	after, err := derive(before)
	if err != nil {
		return Change{}, err
	}
	c := Change{Before: before, After: after}
	if after != before {
		h.cur.Store(after)
		c.Joined, c.Left = memberDiff(before.members, after.members)
	}
	return c, nil
}

// memberDiff returns the names in after but not before (joined) and in
// before but not after (left); both inputs and outputs are sorted.
func memberDiff(before, after []string) (joined, left []string) {
	for _, n := range after {
		if _, ok := slices.BinarySearch(before, n); !ok {
			joined = append(joined, n)
		}
	}
	for _, n := range before {
		if _, ok := slices.BinarySearch(after, n); !ok {
			left = append(left, n)
		}
	}
	return joined, left
}
