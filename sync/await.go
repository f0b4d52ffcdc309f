package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// awaitFrom marks a partition this node has just gained from a member that
// is still alive: that member holds the partition's states and is about to
// hand them off. (When the previous owner left without handing off, the
// member marked is the one that holds its backup of the partition, see
// backup.go.) Until then, a check of a key this node holds no state for
// is sent to that previous owner rather than decided on a fresh bucket: the
// previous owner either still sees itself as owner and answers
// authoritatively, or answers "not owner", by which time its hand-off has
// arrived (one queue per peer keeps the two in order, and a hand-off this
// node dropped before it knew the previous owner is sent again ahead of
// the answer, see resendHandoffs) and the key is decided here on the
// handed-off state. This is what keeps a restarted or newly
// joined owner from starting a spent key at a full bucket.
type awaitFrom struct {
	from  string
	until time.Time
	// also, when set, is a second member whose hand-off may come instead
	// (deposed, quorum.go: the key's backup holder, which took the key over
	// if anyone did): a "not owner" from from then leaves the check parked
	// until the state comes or the wait is over.
	also string
}

// awaitsAlso reports whether key's partition awaits, at now, a hand-off
// from a member other than p (awaitFrom.also) and this node holds no
// state for key.
func (n *Node) awaitsAlso(now time.Time, v *view, key, p string) bool {
	if v.ring == nil || len(v.await) == 0 {
		return false
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	return ok && a.also != "" && a.also != p && now.Before(a.until) && !n.heldLocally(key)
}

// gainedPartitions returns the partitions that move to this node between
// before and after from a member still in after, marked until now plus the
// await window, with the still-running marks of old carried over. before is
// nil on the first membership (or holds only this node, just started, with
// standIns, the stand-ins of SetExpected on it, if it had not joined): then
// the previous owners are those of the ring without this node, which is
// what the rest of the cluster used.
func (n *Node) gainedPartitions(now time.Time, old map[int]awaitFrom, before, after *ring.Ring, standIns []string) map[int]awaitFrom {
	if n.cfg.HandoffWait == 0 {
		return nil
	}
	for _, s := range standIns {
		// The stand-ins of a node that had not joined owned nothing that
		// anyone used: without them, before is this node alone.
		if before != nil && before.Has(s) {
			if b, err := before.WithoutMember(s); err == nil {
				before = b
			}
		}
	}
	if before == nil || (before.Len() == 1 && before.Has(n.cfg.Self)) {
		// A node alone on its ring has just started: nothing was handed to
		// it, and the rest of the cluster used the ring without it.
		var err error
		if before, err = after.WithoutMember(n.cfg.Self); err != nil || before.Len() == 0 {
			return nil
		}
	}
	marks := make(map[int]awaitFrom)
	for id, a := range old {
		if now.Before(a.until) && after.Has(a.from) {
			if o, err := after.PartitionOwner(id); err == nil && o == n.cfg.Self {
				marks[id] = a
			}
		}
	}
	moves, err := ring.Diff(before, after)
	if err != nil {
		return marks
	}
	// holders caches, per member that left, the ring without it: its owners
	// hold that member's backups (backup.go).
	holders := map[string]*ring.Ring{}
	for _, m := range moves {
		if m.To != n.cfg.Self || m.From == "" || m.From == n.cfg.Self {
			continue
		}
		if after.Has(m.From) {
			marks[m.Partition] = awaitFrom{from: m.From, until: now.Add(n.cfg.HandoffWait)}
			continue
		}
		if _, announced := n.dur.departed[m.From]; announced {
			continue // it left gracefully: its hand-off came before its leave
		}
		// m.From left without handing off (a crash): its backup of the
		// partition is held by the partition's owner on the ring without it.
		// When that is this node, the backup is restored in this very
		// change; when it is another live member, ask it.
		h, ok := holders[m.From]
		if !ok {
			if h, err = before.WithoutMember(m.From); err != nil {
				h = nil
			}
			holders[m.From] = h
		}
		if h == nil {
			continue
		}
		if b, err := h.PartitionOwner(m.Partition); err == nil && b != n.cfg.Self && after.Has(b) {
			marks[m.Partition] = awaitFrom{from: b, until: now.Add(n.cfg.HandoffWait)}
		}
	}
	if len(marks) == 0 {
		return nil
	}
	return marks
}

// awaitingOwner returns the previous owner to ask about key, if key's
// partition awaits its hand-off at now and this node holds no state for it.
// The check is then sent to it as a probe (fwdItem.here); a probe that
// cannot be sent or is not answered waits for the hand-off (parkCheck).
func (n *Node) awaitingOwner(now time.Time, v *view, key string) (string, bool) {
	if len(v.await) == 0 || n.awaitOver(now, v) {
		return "", false
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	if !ok || !now.Before(a.until) {
		return "", false
	}
	// Even when the previous owner cannot be asked now (unreachable, or
	// left), the check waits for the hand-off (parkCheck).
	if n.heldLocally(key) {
		return "", false
	}
	return a.from, true
}

// parkedCheck is a probe (fwdItem.here) that got no answer, waiting for
// the key's hand-off until until.
type parkedCheck struct {
	it    *fwdItem
	until time.Time
}

// heldLocally reports whether this node holds state for key.
func (n *Node) heldLocally(key string) bool {
	s := n.st.shardOf(key)
	held := n.st.lookup(s, key) != nil
	return held
}

// parkCheck keeps a probe whose previous owner did not answer (it timed
// out, is unreachable, or left) while the key's partition still awaits its
// hand-off and this node holds no state for the key: the previous owner
// may simply not know this node yet (a node that has just restarted is
// unknown to the others until gossip reaches them, and they drop what it
// sends), and hands the key off as soon as it does. tickParked
// decides it once the state has come or the wait is over; a probe relayed
// for another node waits at most RequestTimeout/2, less than that node
// waits for its answer. It reports false when the check is to be decided
// now.
func (n *Node) parkCheck(now time.Time, v *view, it *fwdItem) bool {
	if v.ring == nil || len(v.await) == 0 {
		return false
	}
	a, ok := v.await[v.ring.PartitionOf(it.req.Key)]
	if !ok || !now.Before(a.until) || n.heldLocally(it.req.Key) {
		return false
	}
	until := a.until
	if it.relay {
		until = minTime(until, now.Add(n.cfg.RequestTimeout/2))
	}
	n.addParked(parkedCheck{it: it, until: until})
	return true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// tickParked decides the parked probes whose key's state has come,
// or whose wait is over: on the state this node holds (the handed-off one,
// or a fresh bucket). A relayed probe whose wait is over without the state
// is answered not-owner: the node that forwarded it applies its partition
// policy, rather than this node answering from a fresh bucket.
func (n *Node) tickParked(now time.Time, v *view) {
	d := &n.dur
	if len(d.parked) == 0 || !n.parkedDue(now) {
		return
	}
	c := coarse(now)
	keep := d.parked[:0]
	var done []*fwdItem
	for _, pc := range d.parked {
		held := n.heldLocally(pc.it.req.Key)
		if !held && now.Before(pc.until) {
			keep = append(keep, pc)
			continue
		}
		if !held && pc.it.relay {
			pc.it.resp.Err = ErrNotOwner
			done = append(done, pc.it)
			continue
		}
		n.decideHere(now, c, v, pc.it)
	}
	clear(d.parked[len(keep):])
	d.parked = keep
	n.parkedPassed()
	for _, it := range done {
		n.completeForward(it)
	}
}
