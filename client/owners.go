package client

import (
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// DefaultPartitionCount is the number of ring partitions of a node with the
// default configuration (ring.DefaultConfig().PartitionCount). GET
// /v1/cluster reports a node's in ring.partition_count.
const DefaultPartitionCount = 1021

// OwnerTable predicts which node owns a key, from what the nodes said in
// earlier answers: every answer names the owner of each item's key. The
// cluster's ring cuts the key space into partitions (a key's partition is
// xxhash(name NUL key) mod the partition count, package ring) and each
// partition has one owner, so one answer about a key teaches the owner of
// every key of its partition: after a few thousand checks of varied keys
// the table knows the whole ring.
//
// A prediction is a guess: it is stale after a membership change until an
// answer corrects it, and wrong for every key if the table's partition
// count is not the cluster's. A wrong guess only sends a check to a node
// that does not own the key, which forwards it to the owner (or answers from
// its cache, by the item's mode): it costs time, never a wrong answer.
//
// The table holds one entry per partition, whatever the number of keys. It
// is safe for concurrent use; Owner takes no lock and does not allocate.
type OwnerTable struct {
	owner []atomic.Pointer[string] // by partition; nil: not yet learned
}

// NewOwnerTable returns an empty table for a ring of partitions partitions;
// zero or less means DefaultPartitionCount.
func NewOwnerTable(partitions int) *OwnerTable {
	if partitions <= 0 {
		partitions = DefaultPartitionCount
	}
	return &OwnerTable{owner: make([]atomic.Pointer[string], partitions)}
}

// Partitions returns the table's partition count.
func (t *OwnerTable) Partitions() int { return len(t.owner) }

// Partition returns the ring partition of the bucket (name, key) in a ring
// of t's partition count: the partition that ring.Ring.PartitionOf gives for
// the bucket's ring key, name NUL key.
func (t *OwnerTable) Partition(name, key string) int {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(name)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(key)
	return int(d.Sum64() % uint64(len(t.owner)))
}

// Owner returns the node that owned (name, key) when an answer last named
// the owner of a key of its partition, and false when none has yet.
func (t *OwnerTable) Owner(name, key string) (string, bool) {
	if p := t.owner[t.Partition(name, key)].Load(); p != nil {
		return *p, true
	}
	return "", false
}

// Learn records that node owner owns (name, key), as an answer said. An
// empty owner is ignored.
func (t *OwnerTable) Learn(name, key, owner string) {
	if owner == "" {
		return
	}
	slot := &t.owner[t.Partition(name, key)]
	if p := slot.Load(); p != nil && *p == owner {
		return
	}
	slot.Store(&owner)
}

// NodeIndex maps node names to the index of the address each last answered
// at (a client's list of node addresses), as learned from the answers,
// which name the node that gave them. It is safe for concurrent use; Lookup
// takes no lock and does not allocate.
type NodeIndex struct {
	m  atomic.Pointer[map[string]int] // replaced, never modified
	mu sync.Mutex                     // serialises the replacements
}

// NewNodeIndex returns an empty index.
func NewNodeIndex() *NodeIndex {
	x := &NodeIndex{}
	x.m.Store(&map[string]int{})
	return x
}

// Lookup returns the index of the address node name answered at last.
func (x *NodeIndex) Lookup(name string) (int, bool) {
	i, ok := (*x.m.Load())[name]
	return i, ok
}

// Set records that node name answers at address i, and no other name does
// (a node restarted under another name, or the address now leads to
// another node). An empty name is ignored.
func (x *NodeIndex) Set(name string, i int) {
	if j, ok := x.Lookup(name); name == "" || ok && j == i {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	old := *x.m.Load()
	m := make(map[string]int, len(old)+1)
	for n, j := range old {
		if j != i {
			m[n] = j
		}
	}
	m[name] = i
	x.m.Store(&m)
}
