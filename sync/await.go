package sync

import (
	"strings"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
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
	// open, when set, is the mark's state for closed checks (closedAwait):
	// they wait past until, for the key's hand-off or from's "not owner".
	open *awaitOpen
}

// awaitOpen is what a mark (awaitFrom) has learned for closed checks:
// checks of policy fail-closed in owner and leased mode. HandoffWait is a
// timing assumption ("gossip convergence plus one hand-off round trip"):
// with gossip slower than it, the previous owner, not knowing this node
// yet, went on admitting on the key while this node, the wait over,
// decided it on a fresh or drained bucket (the fault checker's owner seeds
// 44 and 272 with -notify 2.5s: +19.8 and +2.0 over the envelope). So a
// closed check of a key of a marked partition is decided here only once
// the previous owner has handed the key off (handed), or has answered
// "not owner" for a key of the partition (done: it knows a ring that does
// not give it the partition, and handed its keys off before, on the same
// queue), or has failed: then the mark turns to the member holding its
// backups (holder), and the partition waits as a takeover does
// (confirm.go: a majority heard since, and OwnerLeaseTTL, by which time
// the failed owner's lease has lapsed) before that member's state is
// fetched. Until then a closed check is sent to the previous owner as a
// probe, as within the wait, and when that brings no answer it goes by
// the policy: rejected, never decided on a fresh or drained bucket.
// Other checks keep the timed wait (until).
type awaitOpen struct {
	// done: from answered "not owner" for a key of the partition.
	done bool
	// handed holds the keys from (or also) handed off since the mark.
	handed map[string]bool
	// holder is the member that holds from's backups of the partition
	// (from's successor on the ring without this node), "" when none.
	holder string
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
// what the rest of the cluster used. A mark that is open (awaitOpen) and
// not resolved is carried over past its wait while its member is on the
// ring, and turned to that member's backup holder when it failed.
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
		if o, err := after.PartitionOwner(id); err != nil || o != n.cfg.Self {
			continue
		}
		switch {
		case now.Before(a.until) && after.Has(a.from):
			marks[id] = a
		case a.open == nil || a.open.done:
		case after.Has(a.from):
			marks[id] = a // closed checks wait on (awaitOpen)
		case a.open.holder != "" && a.open.holder != n.cfg.Self && after.Has(a.open.holder):
			if _, announced := n.dur.departed[a.from]; announced {
				continue // it left gracefully: its hand-off came before its leave
			}
			// from failed before it handed the partition off: its backups
			// are with the holder, whose state is fetched once the
			// takeover is confirmed (unconfirmedTakeovers).
			marks[id] = awaitFrom{from: a.open.holder, until: now.Add(n.cfg.HandoffWait), open: &awaitOpen{handed: a.open.handed}}
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
			a := awaitFrom{from: m.From, until: now.Add(n.cfg.HandoffWait), open: &awaitOpen{}}
			if h := holderOf(holders, before, m.From, m.Partition); h != m.From {
				a.open.holder = h
			}
			marks[m.Partition] = a
			continue
		}
		if _, announced := n.dur.departed[m.From]; announced {
			continue // it left gracefully: its hand-off came before its leave
		}
		// m.From left without handing off (a crash): its backup of the
		// partition is held by the partition's owner on the ring without it.
		// When that is this node, the backup is restored in this very
		// change; when it is another live member, ask it.
		if b := holderOf(holders, before, m.From, m.Partition); b != "" && b != n.cfg.Self && after.Has(b) {
			marks[m.Partition] = awaitFrom{from: b, until: now.Add(n.cfg.HandoffWait), open: &awaitOpen{}}
		}
	}
	if len(marks) == 0 {
		return nil
	}
	return marks
}

// holderOf returns the owner of partition id on before without from (the
// member holding from's backups of it, backup.go), "" when none; holders
// caches the rings without each member.
func holderOf(holders map[string]*ring.Ring, before *ring.Ring, from string, id int) string {
	h, ok := holders[from]
	if !ok {
		var err error
		if h, err = before.WithoutMember(from); err != nil {
			h = nil
		}
		holders[from] = h
	}
	if h == nil {
		return ""
	}
	o, err := h.PartitionOwner(id)
	if err != nil {
		return ""
	}
	return o
}

// closedAwait returns the member to ask about key for a closed check (of
// policy fail-closed, in owner or leased mode), if key's partition has a
// mark not resolved for such checks (awaitOpen): neither handed off nor
// answered "not owner" for by its previous owner. Unlike awaitingOwner it
// does not end with the mark's wait, nor with a state this node holds of
// the key (it may be its own, started drained or fresh).
func (n *Node) closedAwait(v *view, key string) (string, bool) {
	if v.ring == nil || len(v.await) == 0 {
		return "", false
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	if !ok || a.open == nil || a.open.done || a.open.handed[key] {
		return "", false
	}
	return a.from, true
}

// awaitFor returns the member to ask about key for a check, closed or not
// (closedAwait, then awaitingOwner: a mark that is not open, deposed's or
// one of a former orphan's, keeps its timed wait for closed checks too).
func (n *Node) awaitFor(now time.Time, v *view, key string, closed bool) (string, bool) {
	if closed {
		if prev, ok := n.closedAwait(v, key); ok {
			return prev, true
		}
	}
	return n.awaitingOwner(now, v, key)
}

// noteHanded records, on a hand-off of key from p, that key's partition's
// mark has key's state (awaitOpen.handed). The marks of a view record at
// most MaxKeys keys together (issue 15: a member handing off 100,000
// distinct keys of a marked partition grew the map by as many,
// TestHandedMarksBounded): beyond that a key handed is not recorded, and
// a closed check of it waits as it did before its hand-off came (probed
// to the previous owner, whose "not owner" resolves the whole partition,
// or rejected by the fail-closed policy), never decided on a fresh or
// drained bucket. An honest hand-off records at most the keys the store
// holds (MaxKeys): more are evicted as they come anyway.
func (n *Node) noteHanded(v *view, p string, key string) {
	if v.ring == nil || len(v.await) == 0 {
		return
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	if !ok || a.open == nil || a.open.done || (p != a.from && p != a.also) || a.open.handed[key] {
		return
	}
	if n.handedKeys >= int64(n.cfg.MaxKeys) {
		n.metrics.FloodCapped.Add(1)
		return
	}
	if a.open.handed == nil {
		a.open.handed = map[string]bool{}
	}
	a.open.handed[strings.Clone(key)] = true
	n.handedKeys++
}

// countHanded returns the keys the open marks of await record as handed
// (awaitOpen.handed), each map once: Node.handedKeys for a new view.
func countHanded(await map[int]awaitFrom) int64 {
	seen := map[*awaitOpen]bool{}
	var k int64
	for _, a := range await {
		if a.open != nil && !seen[a.open] {
			seen[a.open] = true
			k += int64(len(a.open.handed))
		}
	}
	return k
}

// noteNotOwner records that p answered "not owner" for a probe of key,
// naming owner as the key's owner on its ring (Decision.owner): the mark
// of key's partition is resolved when owner is this node and p is the
// member the mark awaits and no other may hand the key off
// (awaitFrom.also), or p is that other. Another answer (p on a minority
// side, the partition orphaned or a takeover not confirmed at p, or
// owned by a third member on p's ring) leaves the mark as it is: p may
// own the key yet, or its state be on its way through another member.
func (n *Node) noteNotOwner(v *view, p, key, owner string) {
	if v.ring == nil || len(v.await) == 0 || owner != n.cfg.Self {
		return
	}
	a, ok := v.await[v.ring.PartitionOf(key)]
	if !ok || a.open == nil {
		return
	}
	if p == a.from && a.also == "" || a.also != "" && p == a.also {
		a.open.done = true
		// Resolved: closedAwait no longer reads what was handed.
		n.handedKeys -= int64(len(a.open.handed))
		a.open.handed = nil
	}
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

// probeReady reports whether a probe may be decided here: for a closed
// check of a key whose mark is open (awaitOpen), once the mark is resolved
// (closedAwait); otherwise once this node holds state for the key.
func (n *Node) probeReady(v *view, it *fwdItem) bool {
	if it.closed() && v.ring != nil {
		if a, ok := v.await[v.ring.PartitionOf(it.req.Key)]; ok && a.open != nil {
			_, waits := n.closedAwait(v, it.req.Key)
			return !waits
		}
	}
	return n.heldLocally(it.req.Key)
}

// closedWaits reports whether it is a closed check whose key's mark is
// not resolved (closedAwait): it is then not decided here.
func (n *Node) closedWaits(v *view, it *fwdItem) bool {
	if !it.closed() {
		return false
	}
	_, waits := n.closedAwait(v, it.req.Key)
	return waits
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
	if !ok || !now.Before(a.until) || n.probeReady(v, it) {
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
		held := n.probeReady(v, pc.it)
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

// recordState returns the state of key's record here (a cached view, or
// what this node owned of it until the ring moved it), for a not-owner
// answer to a probe that names the prober as the owner (serveForward), nil
// when none, or when the view holds this node's own hits not yet flushed
// (they reach the owner by the flush: merged in as well, they would count
// twice; leased mode's false rejections at a cold start rose from 0.098%
// to 0.105% in sim's TestColdStartNotDegraded).
func (n *Node) recordState(key string) *peerv1.KeyState {
	r := n.st.lookup(n.st.shardOf(key), key)
	if r == nil {
		return nil
	}
	if ck, ok := r.(*cachedKey); ok && (ck.pending != 0 || ck.inFlight != 0) {
		return nil
	}
	h := headOf(r)
	if h.b == nil {
		return nil
	}
	state, err := h.b.AppendBinary(nil)
	if err != nil {
		return nil
	}
	return &peerv1.KeyState{Key: strings.Clone(key), State: state, Demand: h.dem}
}
