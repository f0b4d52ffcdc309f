package sync

import (
	"errors"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// fwdItem is one owner-mode check waiting for its owner's answer.
type fwdItem struct {
	c    *call
	resp *check.Response
	req  check.Request
	pol  check.Policy
	// here marks a check of a key this node owns, sent to the previous owner
	// while its hand-off is awaited (see awaitFrom): when that owner says it
	// is no longer owner, or does not answer, the check is decided here.
	here bool
	// relay marks a check another node forwarded to this one (see
	// serveForward): its answer goes back to that node, which counts it.
	relay bool
	// rerouted is set once the check was sent again to a new owner (see
	// reroute): it is not sent a third time.
	rerouted bool
	// contestUntil, once set, is when a check its owner refused stops
	// waiting for the rings to agree, and contests counts the refusals
	// (contest.go).
	contestUntil time.Time
	contests     uint8
}

// probe reports whether it goes out as a relayed check (see
// peerv1.ForwardItem.Relayed): a probe of a previous owner, or a check
// passed on for another node.
func (it *fwdItem) probe() bool { return it.here || it.relay }

// failClosed reports whether its policy is fail-closed: the request's
// (ForwardItem.FailClosed), which the receiver's new state of the key then
// follows (lostkey.go). A relayed check's is the one it came with.
func (it *fwdItem) failClosed() bool {
	if it.relay {
		return it.req.Policy == check.PolicyFailClosed
	}
	return it.pol == check.PolicyFailClosed
}

// closed reports whether it is a closed check (await.go, awaitOpen): of
// policy fail-closed, in owner or leased mode.
func (it *fwdItem) closed() bool {
	return it.resp.Mode != check.ModeCached && it.failClosed()
}

// wirePolicy returns the policy a forwarded check it asks its owner to
// start a new state of the key under: fail-closed, or the owner's default.
func wirePolicy(it *peerv1.ForwardItem) check.Policy {
	if it.GetFailClosed() {
		return check.PolicyFailClosed
	}
	return check.PolicyDefault
}

// The lanes of a peer's forward queue. A reply answers a whole batch, so a
// batch is answered when its slowest item is. An ordinary check may wait at
// its owner for a probe of the previous owner (see awaitFrom), while a
// relayed one never waits for anything on the asking node. Sharing batches
// would chain them: just after a cold start, when every node awaits
// hand-offs from the others, node A's batch to B waits for B's probe to A,
// which waits in B's batch to A for A's probe to B, and so on, until the
// checks time out and each side marks the other unreachable. Batches of
// one lane hold that lane's items only.
const (
	laneChecks = iota // ordinary checks of this node's clients
	laneProbes        // relayed checks: probes and checks passed on
	numLanes
)

// laneOf returns the lane of it.
func laneOf(it *fwdItem) int {
	if it.probe() {
		return laneProbes
	}
	return laneChecks
}

// fwdLane is one lane of a peer's forward queue: the checks waiting, queued
// since since, and the number of the lane's batches in flight.
type fwdLane struct {
	q     []*fwdItem
	since time.Time
	out   int
}

// fwdBatch is a Forward message in flight.
type fwdBatch struct {
	id     uint64
	lane   int
	items  []sentItem
	sentAt time.Time
	// msg is the message, kept to be sent again (resendForwards);
	// resentAt is when it last was, unheard whether the receiver had ever
	// sent this node anything by then.
	msg      *peerv1.Forward
	resentAt time.Time
	unheard  bool
}

// sentItem is a check of a batch in flight and its wire form in the
// batch's message: one slab holds both.
type sentItem struct {
	it *fwdItem
	fi peerv1.ForwardItem
}

// fwdSend is a forward batch allocated together with its message and the
// envelope it is sent in: one allocation instead of three per batch.
type fwdSend struct {
	b fwdBatch
	e peerv1.Envelope
	w peerv1.Envelope_Forward
	f peerv1.Forward
}

// limitWire returns the wire form of l, shared with every message
// built since l was last different: a wire limit is never modified once
// made (it belongs to messages sent, see Transport), so most forwards,
// which carry the same few limits, need none of their own.
func (n *Node) limitWire(l bucket.Limit) *peerv1.Limit {
	if n.wireLimit == nil || n.wireLimitOf != l {
		n.wireLimitOf, n.wireLimit = l, limitToWire(l)
	}
	return n.wireLimit
}

// forwardResends is how many times per RequestTimeout a forward to a peer
// that has never been heard from is sent again (see resendForwards).
const forwardResends = 10

// enqueueForwards queues the owner-mode checks of one Check, routed on v,
// on their owners' queues and sends what may go now (see
// sendForwards).
//
// A check routed to a peer that is gone (its leave announcement was
// applied) goes to the key's owner on the current ring, which was handed
// the state first (see reroute); only when there is none is it decided by
// the policy, on the current ring.
func (n *Node) enqueueForwards(now time.Time, v *view, items []*fwdItem) {
	var buf [4]*peer // on the stack for a Check of a few items
	touched := buf[:0]
	c := coarse(now)
	for _, it := range items {
		p := v.peers[it.resp.Owner]
		if p == nil || p.gone {
			if p == nil || !n.reroute(now, c, n.view, p, it) {
				n.degradeForward(now, c, it)
			}
			continue
		}
		if !p.queued() {
			touched = append(touched, p)
		}
		p.enqueue(now, it)
		n.wake(p)
	}
	for _, p := range touched {
		n.sendForwards(now, p, false)
	}
}

// enqueue adds it to its lane of p's forward queue.
func (p *peer) enqueue(now time.Time, it *fwdItem) {
	l := &p.fwd[laneOf(it)]
	if len(l.q) == 0 {
		l.since = now
	}
	l.q = append(l.q, it)
}

// queued reports whether p has checks waiting to be sent.
func (p *peer) queued() bool {
	for i := range p.fwd {
		if len(p.fwd[i].q) > 0 {
			return true
		}
	}
	return false
}

// sendForwards sends p's queued checks, lane by lane, in batches of
// at most MaxBatch while the rules allow (or all of them when force is
// set): a lane's batch goes at once when none of that lane is in flight;
// otherwise its checks coalesce until the batch in flight is answered,
// ForwardWindow has passed or MaxBatch checks wait.
func (n *Node) sendForwards(now time.Time, p *peer, force bool) {
	for lane := range p.fwd {
		n.sendLane(now, p, lane, force)
	}
}

// sendLane is sendForwards for one lane.
func (n *Node) sendLane(now time.Time, p *peer, lane int, force bool) {
	l := &p.fwd[lane]
	for len(l.q) > 0 {
		due := force || l.out == 0 || len(l.q) >= n.cfg.MaxBatch || now.Sub(l.since) >= n.cfg.ForwardWindow
		if !due {
			return
		}
		k := min(len(l.q), n.cfg.MaxBatch)
		n.fwdID++
		// The batch, its message and the message's envelope share one
		// allocation, and the items one more (exactly k of them).
		x := &fwdSend{b: fwdBatch{id: n.fwdID, lane: lane, items: make([]sentItem, k), sentAt: now}}
		b := &x.b
		l.since = now
		l.out++
		p.fwdOut = append(p.fwdOut, b)
		msg := &x.f
		msg.Id, msg.Items = b.id, make([]*peerv1.ForwardItem, k)
		b.msg, b.resentAt, b.unheard = msg, now, p.seenInc == 0
		for i, it := range l.q[:k] {
			b.items[i].it = it
			fi := &b.items[i].fi
			fi.Key, fi.Limit, fi.Hits = it.req.Key, n.limitWire(it.req.Limit), it.req.Hits
			fi.Lease, fi.Release, fi.Relayed = it.req.Lease, it.req.Release, it.probe()
			fi.Fenced = it.resp.Mode != check.ModeCached
			fi.FailClosed = fi.Fenced && it.failClosed()
			msg.Items[i] = fi
		}
		x.w.Forward = msg
		x.e.Body = &x.w
		n.sendEnvelope(p.name, &x.e) // kept in b, never modified again: shared (see Transport)
		n.metrics.Forwarded.Add(int64(k))
		n.metrics.ForwardBatches.Add(1)
		// The batch has its own copy of the checks: the queue keeps its
		// array for the next ones.
		rest := copy(l.q, l.q[k:])
		clear(l.q[rest:])
		l.q = l.q[:rest]
	}
}

// onForwardReply completes the checks of an answered batch.
func (n *Node) onForwardReply(now time.Time, v *view, p *peer, rep *peerv1.ForwardReply) {
	if rep.ForwardIncarnation != n.cfg.Incarnation {
		return
	}
	var b *fwdBatch
	for i, x := range p.fwdOut {
		if x.id == rep.Id {
			b = x
			// In place: no one else holds p.fwdOut (failForwards
			// takes it over and leaves p a fresh one).
			p.fwdOut = slices.Delete(p.fwdOut, i, i+1)
			p.fwd[b.lane].out--
			break
		}
	}
	if b == nil {
		return // answered late, after its timeout
	}
	if len(rep.Items) != len(b.items) {
		n.metrics.Malformed.Add(1)
	}
	c := coarse(now)
	for i := range b.items {
		it := b.items[i].it
		if i >= len(rep.Items) {
			n.degradeForward(now, c, it)
			continue
		}
		d, err := decisionFromWire(rep.Items[i])
		d.ResetAt = n.rebaseAt(d.ResetAt) // clock.go
		if errors.Is(err, check.ErrLeaving) && !p.gone {
			// The answer is an announcement of p's leave (see leave.go).
			n.depart(now, p, p.seenInc)
		}
		if errors.Is(err, ErrNotOwner) || errors.Is(err, check.ErrLeaving) {
			if it.here {
				// The previous owner answered: whatever state it had for
				// the key was handed off before, on the same queue, and
				// has arrived unless the answer says a hand-off is still
				// unacknowledged (lost and sent again, or overtaken).
				// Then, or when another member may hold the state
				// (awaitFrom.also), the check waits for its hand-off.
				pending := rep.Items[i].GetHandoffPending()
				if !pending {
					n.noteNotOwner(n.view, p.name, it.req.Key, rep.Items[i].GetOwner()) // await.go
				}
				if (pending || n.awaitsAlso(now, n.view, it.req.Key, p.name)) && n.parkCheck(now, n.view, it) {
					continue
				}
				n.decideHere(now, c, v, it)
				continue
			}
			n.seedShare(now, c, it, rep.Items[i].GetState()) // policy.go
			nv := n.view
			if n.reroute(now, c, nv, p, it) ||
				errors.Is(err, ErrNotOwner) && n.holdContested(now, nv, p, it) {
				continue
			}
			n.degradeForward(now, c, it)
			continue
		}
		it.resp.Decision, it.resp.Err = d, err
		it.resp.Reconfigured = rep.Items[i].GetReconfigured()
		if len(rep.Items[i].State) > 0 && err == nil && it.resp.Mode == check.ModeCached && !it.probe() {
			n.refreshView(now, c, p, it.req.Key, rep.Items[i]) // cached.go
		}
		n.completeForward(it)
	}
	n.sendForwards(now, p, false)
}

// decideHere decides a probe (fwdItem.here) on this node's owned
// state of the key. If the ring gave the key to another node meanwhile, a
// probe relayed for another node is answered not-owner and one of this
// node's clients is decided by its partition policy.
func (n *Node) decideHere(now time.Time, c uint32, v *view, it *fwdItem) {
	kh := ring.KeyHash(it.req.Key)
	if v.ownerAt(kh) != n.cfg.Self || v.orphaned(it.req.Key) || v.unconfirmed(it.req.Key) ||
		it.resp.Mode != check.ModeCached && v.takingOver(it.req.Key) || n.closedWaits(v, it) {
		it.here = false
		n.degradeForward(now, c, it)
		return
	}
	it.resp.Owner = n.cfg.Self
	sh := n.st.hash(it.req.Key)
	if it.resp.Mode != check.ModeCached && n.fenceBlocks(now, v, &it.req, kh, sh) {
		n.metrics.FenceWaits.Add(1)
		n.holdFenced(now, it, kh, sh) // fence.go: decided once the key's backup is acknowledged
		return
	}
	// A push is an optimisation: the next Tick sends it.
	_ = n.takeOwned(now, c, v, &it.req, it.resp, it.resp.Mode == check.ModeCached, kh, sh)
	n.completeForward(it)
}

// completeForward finishes an answered forwarded check.
func (n *Node) completeForward(it *fwdItem) {
	if !it.relay {
		n.record(it.resp)
	}
	it.c.finish()
}

// reroute sends a forwarded check that from could not decide (from
// left the ring, or says it does not own the key) to the key's owner in v,
// once, and reports whether it did. When v gives the key to this node, the
// check is decided here, or sent to the previous owner while its hand-off
// is awaited. It reports false, leaving the check to the partition policy,
// when the check was already sent again, is a hand-off probe (here), was
// passed on for another node and v gives the key to a third, or v still
// names from (or no reachable member) as the owner.
func (n *Node) reroute(now time.Time, c uint32, v *view, from *peer, it *fwdItem) bool {
	if it.rerouted || it.here {
		return false
	}
	// Marked first: routeAgain may decide it here and finish its call,
	// which gives a Check's first item back to the node's pool, zeroed for
	// the next Check (TestReroutedCheckLeavesPoolClean).
	it.rerouted = true
	if !n.routeAgain(now, c, v, from, it) {
		it.rerouted = false // not sent: nothing finished it
		return false
	}
	return true
}

// routeAgain sends it, which from could not decide, to the key's
// owner in v, or decides it here (see reroute), and reports whether
// it did.
func (n *Node) routeAgain(now time.Time, c uint32, v *view, from *peer, it *fwdItem) bool {
	owner := v.owner(it.req.Key)
	if owner == "" || owner == from.name {
		return false
	}
	if it.relay && owner != n.cfg.Self {
		return false // passed on once already: decided here or not at all
	}
	if owner == n.cfg.Self {
		if prev, ok := n.awaitFor(now, v, it.req.Key, it.closed()); ok {
			it.here = true
			it.resp.Owner = prev
			if q := v.peers[prev]; q != nil && q != from && !q.gone {
				n.queueForward(now, q, it)
			} else {
				n.degradeForward(now, c, it) // parks it
			}
			return true
		}
		n.decideHere(now, c, v, it)
		return true
	}
	q := v.peers[owner]
	if q == nil || q.gone || q.down(now) {
		return false
	}
	it.resp.Owner = owner
	n.queueForward(now, q, it)
	return true
}

// queueForward queues one check for q and sends what may go now.
func (n *Node) queueForward(now time.Time, q *peer, it *fwdItem) {
	q.enqueue(now, it)
	n.wake(q)
	n.sendLane(now, q, laneOf(it), false)
}

// degradeForward decides a forwarded check by its partition policy,
// on the current ring: the view a forwarded check was routed on may be older
// than the current one, and the policy's share depends on the members.
func (n *Node) degradeForward(now time.Time, c uint32, it *fwdItem) {
	v := n.view
	if it.here {
		if !n.parkCheck(now, v, it) {
			n.decideHere(now, c, v, it)
		}
		return
	}
	n.metrics.ForwardTimeouts.Add(1)
	if it.relay {
		// Passed on for another node: it applies its own policy.
		it.resp.Err = ErrNotOwner
		n.completeForward(it)
		return
	}
	n.degrade(now, c, v, &it.req, it.resp, it.pol)
	n.completeForward(it)
}

// failForwards decides every check queued for or in flight to p by
// the partition policy (p is unreachable), or, when p left the ring, sends
// each to the key's new owner (reroute): a member that left answers
// nothing any more, and one that announced its leave had handed its keys
// off first, so the new owner decides on the handed-off state.
func (n *Node) failForwards(now time.Time, p *peer) {
	v := n.view
	c := coarse(now)
	out, lanes := p.fwdOut, p.fwd
	p.fwdOut, p.fwd = nil, [numLanes]fwdLane{}
	fail := func(it *fwdItem) {
		if !p.gone || !n.reroute(now, c, v, p, it) {
			n.degradeForward(now, c, it)
		}
	}
	for _, b := range out {
		for i := range b.items {
			fail(b.items[i].it)
		}
	}
	for _, l := range lanes {
		for _, it := range l.q {
			fail(it)
		}
	}
}

// tickForwards sends batches whose window passed and decides batches
// unanswered after RequestTimeout by the policy, marking their owner
// unreachable.
func (n *Node) tickForwards(now time.Time, v *view, busy []*peer) {
	for _, p := range busy {
		if len(p.fwdOut) == 0 && !p.queued() {
			continue
		}
		if len(p.fwdOut) > 0 && now.Sub(p.fwdOut[0].sentAt) >= n.cfg.RequestTimeout {
			p.markDown(now, n.cfg.UnreachableAfter)
		}
		if p.down(now) {
			n.failForwards(now, p)
			continue
		}
		n.resendForwards(now, p)
		n.sendForwards(now, p, false)
	}
}

// resendForwards sends again, every RequestTimeout/forwardResends,
// the forwards in flight that were sent to a peer this node had never
// received anything from, until one such send follows a message from it.
// Such a peer may not know this node yet: this node has just started (or
// restarted) and the peer's membership has not caught up, so it drops what
// this node sends. Without the resend, checks sent in that window wait for
// RequestTimeout and fall to the partition policy, although the owner
// learns of this node well within it. The receiver answers each
// (incarnation, id) once (forwardSeen).
func (n *Node) resendForwards(now time.Time, p *peer) {
	every := n.cfg.RequestTimeout / forwardResends
	for _, b := range p.fwdOut {
		if b.unheard && b.msg != nil && now.Sub(b.resentAt) >= every {
			b.resentAt, b.unheard = now, p.seenInc == 0
			n.send(p.name, forwardBody{clone(b.msg)})
		}
	}
}

// serveForward decides forwarded owner-mode checks as their owner, exactly,
// and answers them in one reply. The answer to a cached-mode check (a key
// too small for shares) also carries the key's state, and registers the
// asking node's interest in it, as a flush would (answerView, keepView).
//
// A check of a key whose partition this node has just gained from a live
// previous owner, and holds no state for (see awaitFrom), is not decided on
// a fresh bucket: it is relayed to that previous owner like a check of this
// node's own client, and the reply waits for it. This is what keeps a
// restarted owner from answering the others' forwards from full buckets
// before its keys are handed back.
//
// A check of a key this node does not own is answered ErrNotOwner; if this
// node holds a backup of the key (backup.go), the state is first handed to
// the asking node, which is then the key's owner or about to be, on the
// same ordered queue as the answer.
func (n *Node) serveForward(now time.Time, v *view, p *peer, inc uint64, f *peerv1.Forward) {
	dup := n.forwardSeen(p.name, inc, f.Id)
	leaving := n.leaving
	if dup {
		return // sent again while the answer was on its way
	}
	n.resendProbedHandoffs(now, v, p, f) // membership.go: ahead of the answers
	// The reply and its envelope share one allocation, the answers'
	// wire forms one more. An answer decided here is written into its wire
	// form at once; one that waits on another node (relayed on) gets a
	// Response of its own, written when it comes (served.done).
	x := &served{n: n, to: p.name}
	rep := &x.r
	rep.Id, rep.ForwardIncarnation, rep.Items = f.Id, inc, make([]*peerv1.Decision, len(f.Items))
	decs := make([]peerv1.Decision, len(f.Items))
	for i := range decs {
		rep.Items[i] = &decs[i]
	}
	var a asyncs
	// relay returns the fwdItem (with its Response) of item i, which waits
	// on the network.
	hold := func(i int) *fwdItem {
		if a.done == nil {
			a.done = x.done
		}
		ri := n.relays.get()
		ri.it.c, ri.it.resp = a.wait(), &ri.resp
		if x.later == nil {
			x.later = n.relays.later()
		}
		x.later = append(x.later, laterAnswer{dec: &decs[i], ri: ri})
		return &ri.it
	}
	relay := func(i int) *fwdItem {
		it := hold(i)
		a.fwd = append(a.fwd, it)
		return it
	}
	c := coarse(now)
	var restore []*peerv1.KeyState
	var resp check.Response // the answer of the item being decided here
	// The items of a forward mostly share their wire limit (see
	// limitWire): one that is the previous item's is not converted
	// and validated again (a received message is never modified).
	var lastWire *peerv1.Limit
	var lastL bucket.Limit
	var lastErr error
	// m is p's index in the view, looked up for the first cached-mode
	// check; states holds the states their answers carry (answerView).
	m := -2
	var states []byte
	named := false // an answer names p as the owner
	for i, it := range f.Items {
		resp = check.Response{}
		ownerIs := "" // the owner a not-owner answer names (Decision.owner)
		if w := it.GetLimit(); w != lastWire || w == nil {
			lastWire = w
			lastL, lastErr = limitFromWire(w)
		}
		kh := ring.KeyHash(it.GetKey()) // the key's owner, backup target and shard (it may be nil: malformed)
		switch l, err := lastL, lastErr; {
		case err != nil || it.Key == "" || len(it.Key) > n.cfg.MaxKeyLen || it.Hits < 0:
			n.metrics.Malformed.Add(1)
			if err == nil {
				err = errors.New("sync: malformed forwarded check")
			}
			resp.Err = err
		case leaving:
			resp.Err = check.ErrLeaving
		case len(v.lost) > 0:
			// quorum.go: on a minority side every key goes by its policy,
			// this node's own too (the majority takes them over from their
			// backups, and the fence is off here): the asking node applies
			// its policy.
			n.metrics.NotOwner.Add(1)
			resp.Err = ErrNotOwner
			if it.Relayed && v.ownerAt(kh) != n.cfg.Self {
				// A probe from a node that sees itself as the owner (a
				// restarted owner awaiting its backups, await.go): it gets
				// the backup held here, as from a majority. A minority
				// side decides nothing on the held state, so it is all
				// anyone knows of the key; answered without it, the owner
				// started the key on a fresh bucket
				// (TestRestartedOwnerGetsItsBackupFromSuspectingHolder).
				if ks := n.heldFencedState(now, v, it.Key, p.name, inc); ks != nil {
					restore = append(restore, ks)
				}
			}
		case v.orphaned(it.Key):
			// quorum.go: no member knows the key's state; the asking node
			// applies its partition policy.
			resp.Err = ErrNotOwner
		case v.unconfirmed(it.Key) || it.Fenced && v.takingOver(it.Key):
			// confirm.go: taken over from a failed member, and a majority
			// not heard from since (or, owner and leased mode, not
			// OwnerLeaseTTL since); the asking node applies its rules.
			n.metrics.UnconfirmedChecks.Add(1)
			resp.Err = ErrNotOwner
			decs[i].State = n.waitState(it) // the asking node's share starts from it
		case v.ownerAt(kh) != n.cfg.Self:
			n.metrics.NotOwner.Add(1)
			resp.Err = ErrNotOwner
			ownerIs = v.ownerAt(kh)
			if it.Relayed {
				// Passed on, or a probe from a node that sees itself as
				// the owner: give it the backup held here, if any.
				if ks := n.heldFencedState(now, v, it.Key, p.name, inc); ks != nil {
					restore = append(restore, ks)
				}
				if ownerIs == p.name && it.Fenced && it.GetFailClosed() {
					// await.go: the answer names p as the owner, which then
					// decides the key's closed checks. What this node has of
					// the key goes first: it may have handed its state to
					// another member, which passes it on to p by a longer
					// way (the fault checker's owner seed 272, -notify 2.5s).
					if ks := n.recordState(it.Key); ks != nil {
						restore = append(restore, ks)
					}
				}
				break
			}
			owner := v.ownerAt(kh)
			if q := v.peers[owner]; q != nil && q != p && !q.gone && !q.down(now) {
				// The rings disagree: pass it on to the owner this node
				// knows (which it may have just handed the key to).
				fi := relay(i)
				fi.resp.Owner, fi.resp.Mode = owner, fwdMode(it)
				fi.req = check.Request{Key: it.Key, Hits: it.Hits, Limit: l, Lease: it.Lease, Release: it.Release, Policy: wirePolicy(it)}
				fi.relay = true
				continue
			}
		default:
			r := check.Request{Key: it.Key, Hits: it.Hits, Limit: l, Lease: it.Lease, Release: it.Release, Policy: wirePolicy(it)}
			if prev, ok := n.awaitFor(now, v, r.Key, it.Fenced && it.GetFailClosed()); ok {
				fi := relay(i)
				fi.resp.Owner, fi.resp.Mode = prev, fwdMode(it)
				fi.req, fi.pol, fi.here, fi.relay = r, n.cfg.Policy, true, true
				continue
			}
			sh := n.st.hash(r.Key) // the key's slot in its shard's tables
			if it.Fenced && n.fenceBlocks(now, v, &r, kh, sh) {
				// fence.go: decided once the key's backup is acknowledged;
				// if that takes too long, answered not-owner (relay).
				fi := hold(i)
				fi.resp.Owner, fi.resp.Mode = n.cfg.Self, check.ModeOwner
				fi.req, fi.pol, fi.relay = r, n.cfg.Policy, true
				n.metrics.FenceWaits.Add(1)
				n.holdFenced(now, fi, kh, sh)
				continue
			}
			n.decideOwned(now, c, v, &r, &resp, false, kh, sh)
			if !it.Fenced && !it.Relayed && resp.Err == nil {
				// A cached-mode check: its answer refreshes the asking
				// node's view (keepView).
				if m < -1 {
					m = n.view.member(p.name)
				}
				states = n.answerView(c, m, it.Key, kh, &decs[i], states)
			}
		}
		decisionIntoWire(&decs[i], resp.Decision, resp.Err)
		decs[i].Reconfigured = resp.Reconfigured
		decs[i].Owner = ownerIs
		named = named || ownerIs == p.name
	}
	if len(restore) > 0 {
		n.sendHandoffs(now, v, map[*peer][]*peerv1.KeyState{p: restore})
	}
	if named && len(p.hoOut) > 0 {
		// await.go: an answer naming p as the owner resolves p's wait for
		// this node's hand-off only once p has acknowledged every one:
		// one lost and sent again, or overtaken, follows the answer.
		for i := range decs {
			decs[i].HandoffPending = decs[i].Owner == p.name
		}
	}
	if len(a.fwd) > 0 {
		n.enqueueForwards(now, v, a.fwd)
	}
	if a.c == nil {
		x.done()
		return
	}
	a.c.finish()
}

// fwdMode returns the mode a forwarded check it is decided in at its
// owner: owner mode when it is fenced, else cached (a cached-mode key too
// small for shares, decided exactly all the same, see decideOwned).
func fwdMode(it *peerv1.ForwardItem) check.Mode {
	if it.Fenced {
		return check.ModeOwner
	}
	return check.ModeCached
}

// served is the reply to a forward being served, allocated with its
// envelope, and the answers still to be written into it.
type served struct {
	n     *Node
	to    string
	later []laterAnswer
	e     peerv1.Envelope
	w     peerv1.Envelope_ForwardReply
	r     peerv1.ForwardReply
}

// laterAnswer is a served check that waits on the network (its check and
// answer, ri), and the answer's wire form in the reply.
type laterAnswer struct {
	dec *peerv1.Decision
	ri  *relayedItem
}

// relayedItem is a served check that waits on the network (held on its
// fence, or sent on to another node), with its answer.
type relayedItem struct {
	it   fwdItem
	resp check.Response
}

// relayPool is a Node's free list of relayedItems and of served.later
// arrays. A served forward's relayedItems and its later array go back to
// it once the reply is written (served.done): every check of the forward
// has completed then and left every queue, batch, fence and parked list,
// as a Check's pooled callItem has when its call is done (callPool). In
// owner mode nearly every key an owner is forwarded afresh waits on its
// fence, and its relayedItem, about 230 bytes, was garbage once answered
// (issue 14: 70 of the 706 bytes per decision in CoreUniform/owner).
type relayPool struct {
	// free holds zeroed relayedItems, at most maxFreeRelays; lists holds
	// empty later arrays, cleared, at most maxLaterKept of at most
	// maxLaterKept answers each.
	free  freeList[*relayedItem]
	lists freeList[[]laterAnswer]
}

// maxFreeRelays bounds a relayPool: about the served checks waiting at
// once on a busy node; beyond it, what is done is left to the collector.
// maxLaterKept bounds the later arrays kept, and the answers each holds:
// one grown by a large forward (up to MaxBatch checks waiting) is left to
// the collector rather than kept for good (64 KB at most kept).
const (
	maxFreeRelays = 1024
	maxLaterKept  = 64
)

// get returns a zero relayedItem.
func (p *relayPool) get() *relayedItem { return takeOrNew(&p.free) }

// later returns an empty later array, nil when none is free.
func (p *relayPool) later() []laterAnswer { return p.lists.take() }

// put zeroes the relayedItems of later, whose checks are all answered,
// and keeps them and the array for reuse.
func (p *relayPool) put(later []laterAnswer) {
	for _, l := range later {
		*l.ri = relayedItem{} // drops what it refers to: the call, the key
		p.free.put(l.ri, maxFreeRelays)
	}
	clear(later)
	if cap(later) > 0 && cap(later) <= maxLaterKept {
		p.lists.put(later[:0], maxLaterKept)
	}
}

// done writes the answers that waited and sends the reply; the checks
// that waited go back to the node's relayPool.
func (x *served) done() {
	for _, l := range x.later {
		decisionIntoWire(l.dec, l.ri.resp.Decision, l.ri.resp.Err)
		l.dec.Reconfigured = l.ri.resp.Reconfigured
	}
	x.w.ForwardReply = &x.r
	x.e.Body = &x.w
	x.n.sendEnvelope(x.to, &x.e)
	x.n.relays.put(x.later)
	x.later = nil
}

// recentForwards remembers the ids of the last forwards answered for one
// peer incarnation.
type recentForwards struct {
	inc  uint64
	ids  [32]uint64
	next int
}

// forwardSeen reports whether the forward id of from's incarnation
// inc was answered already, and records it otherwise.
func (n *Node) forwardSeen(from string, inc, id uint64) bool {
	d := &n.dur
	if d.forwards == nil {
		d.forwards = map[string]*recentForwards{}
	}
	r := d.forwards[from]
	if r == nil || r.inc != inc {
		r = &recentForwards{inc: inc}
		d.forwards[from] = r
	}
	for _, x := range r.ids {
		if x == id && id != 0 {
			return true
		}
	}
	r.ids[r.next] = id
	r.next = (r.next + 1) % len(r.ids)
	return false
}
