package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/ring"
)

// call tracks one Check whose answers are not all written yet: done runs
// when the count, one per outstanding answer plus one for Check itself,
// reaches zero.
type call struct {
	n    int32
	done func()
	// node and resps are the Check's, whose answers finish hands back on
	// the driver's clock (Node.toLocal) before done runs.
	node  *Node
	resps []check.Response
	// item is the callItem this call is part of, given back to pool once
	// done has run; nil for a call allocated alone.
	item *callItem
	pool *callPool
}

// finish records one answer written, and runs done after the last.
func (c *call) finish() {
	c.n--
	if c.n == 0 {
		if c.node != nil { // nil: a call of the core's own (a relayed forward), on cluster time
			c.node.toLocal(c.resps)
		}
		c.done()
		if c.item != nil {
			c.pool.put(c.item)
		}
	}
}

// asyncs collects, during one Check, the calls and forwards that wait on
// the network.
type asyncs struct {
	c    *call
	done func()
	// node and resps are the Check's (see call).
	node  *Node
	resps []check.Response
	fwd   []*fwdItem
	// pool supplies the callItem of the first forwarded check (nil: a new
	// one is allocated).
	pool *callPool
}

// callItem is a Check's call allocated together with its first forwarded
// check, the common case of a Check of one item: one allocation, not two.
type callItem struct {
	c  call
	it fwdItem
}

// callPool is a Node's free list of callItems. A callItem goes back to it
// once its call is done: every answer of the Check is written then, so each
// of its forwarded checks has completed and left every queue, batch and
// parked list (a completed check is never read again; the only reference
// left may be in a sent message's batch, which is never read through). It
// saves an allocation of about 180 bytes per forwarded Check.
type callPool struct {
	// free holds the callItems ready for reuse, zeroed; at most
	// maxFreeCalls.
	free freeList[*callItem]
}

// maxFreeCalls bounds a callPool: about the forwarded checks in flight at
// once on a busy node; beyond it, done callItems are left to the collector.
const maxFreeCalls = 1024

// get returns a zero callItem.
func (p *callPool) get() *callItem { return takeOrNew(&p.free) }

// put zeroes x, whose call is done, and keeps it for reuse.
func (p *callPool) put(x *callItem) {
	*x = callItem{} // drops what it refers to: the caller's done, its Response
	p.free.put(x, maxFreeCalls)
}

// item registers one more answer that will be written later and returns a
// forwarded check to fill in, whose c is set.
func (a *asyncs) item() *fwdItem {
	if a.c != nil {
		return &fwdItem{c: a.wait()}
	}
	var x *callItem
	if a.pool != nil {
		x = a.pool.get()
		x.c.item, x.c.pool = x, a.pool
	} else {
		x = new(callItem)
	}
	x.c.done, x.c.node, x.c.resps = a.done, a.node, a.resps
	x.c.n = 1
	a.c = &x.c
	x.it.c = a.wait()
	return &x.it
}

// wait registers one more answer that will be written later.
func (a *asyncs) wait() *call {
	if a.c == nil {
		a.c = &call{done: a.done, node: a.node, resps: a.resps}
		a.c.n = 1
	}
	a.c.n++
	return a.c
}

// Check decides reqs at now, writing the answer to reqs[i] into resps[i],
// and calls done exactly once when every answer is written: before Check
// returns when no answer needs the network, otherwise later, from within
// Step, Unreachable or Tick. Only min(len(reqs), len(resps)) items are
// answered. resps must stay untouched by the caller until done. done must
// not block nor call back into the Node.
//
// A zero Limit.Algorithm is the token bucket: Check sets it to
// bucket.TokenBucket in reqs.
//
// Each item is decided in its own mode (Request.Mode, or Config.Mode):
// local on this node alone; owner by the owner (forwarded and batched when
// it is another node); cached from the cached owner state and this node's
// budget, never waiting; leased from this node's lease. An invalid item gets
// Response.Err and the others are still answered.
func (n *Node) Check(now time.Time, reqs []check.Request, resps []check.Response, done func()) {
	n.enter(now)
	v := n.view
	k := min(len(reqs), len(resps))
	a := asyncs{done: done, pool: &n.calls, node: n, resps: resps[:k]}
	var one [1]*fwdItem // room for the forward of a Check of one item, on the stack
	fwd := one[:0]
	c := coarse(now)
	for i := range k {
		if it := n.checkOne(now, c, v, &reqs[i], &resps[i], &a); it != nil {
			fwd = append(fwd, it)
		}
	}
	if len(fwd) > 0 {
		n.enqueueForwards(now, v, fwd)
	}
	if a.c == nil {
		n.toLocal(resps[:k])
		done()
		return
	}
	a.c.finish()
}

// resolve returns the mode and policy of r, or an error. It sets a zero
// r.Limit.Algorithm to bucket.TokenBucket (what zero means), so that the
// limit compares equal to its bucket's Config.
func (n *Node) resolve(r *check.Request) (check.Mode, check.Policy, error) {
	r.Limit = r.Limit.WithDefaults()
	mode, pol := r.Mode, n.policyOf(r)
	if mode == check.ModeDefault {
		mode = n.cfg.Mode
	}
	switch {
	case !mode.Valid():
		return mode, pol, check.ErrUnknownMode
	case !pol.Valid():
		return mode, pol, check.ErrUnknownPolicy
	case r.Key == "":
		return mode, pol, check.ErrEmptyKey
	case len(r.Key) > n.cfg.MaxKeyLen:
		return mode, pol, check.ErrKeyTooLong
	case r.Hits < 0:
		return mode, pol, bucket.ErrNegativeHits
	}
	return mode, pol, r.Limit.Validate()
}

// policyOf returns r's partition policy, the node's default when r names
// none.
func (n *Node) policyOf(r *check.Request) check.Policy {
	if r.Policy == check.PolicyDefault {
		return n.cfg.Policy
	}
	return r.Policy
}

// semaphoreOp reports whether r acquires or releases named Concurrency
// permits, which only the owner can do: such requests run in owner mode.
func semaphoreOp(r *check.Request) bool {
	return r.Limit.Algorithm == bucket.Concurrency && (r.Lease != "" || r.Release)
}

// checkOne decides r into resp, or returns the check to forward (registered
// in a) when it waits on the network.
func (n *Node) checkOne(now time.Time, c uint32, v *view, r *check.Request, resp *check.Response, a *asyncs) *fwdItem {
	mode, pol, err := n.resolve(r)
	if err != nil {
		*resp = check.Response{Mode: mode, Err: err}
		n.record(resp)
		return nil
	}
	*resp = check.Response{Mode: mode}
	if mode == check.ModeLocal {
		n.decideLocal(now, c, r, resp)
		n.record(resp)
		return nil
	}
	kh := ring.KeyHash(r.Key) // the key's owner, backup target and shard
	owner := v.ownerAt(kh)
	if owner == "" {
		resp.Err = check.ErrNoMembers
		if n.isLeaving() {
			resp.Err = check.ErrLeaving
		}
		n.record(resp)
		return nil
	}
	resp.Owner = owner
	if semaphoreOp(r) {
		mode = check.ModeOwner
		resp.Mode = mode
	}
	if len(v.lost) > 0 && (mode != check.ModeLeased || owner == n.cfg.Self) {
		// On a minority side every key goes by its policy: the majority
		// takes over the keys of this side's members too, so deciding them
		// here as well would give them a second bucket (quorum.go). Leased
		// mode spends the lease it holds first, then goes by the policy.
		n.degrade(now, c, v, r, resp, pol)
		n.record(resp)
		return nil
	}
	if owner == n.cfg.Self && v.orphaned(r.Key) {
		// quorum.go: its owner and backup target both failed.
		n.degrade(now, c, v, r, resp, pol)
		n.record(resp)
		return nil
	}
	if owner == n.cfg.Self && (v.unconfirmed(r.Key) || mode != check.ModeCached && v.takingOver(r.Key)) {
		// confirm.go: taken over from a failed member, and a majority not
		// heard from since, or (owner and leased mode) not OwnerLeaseTTL
		// since.
		n.metrics.UnconfirmedChecks.Add(1)
		n.degrade(now, c, v, r, resp, pol)
		n.record(resp)
		return nil
	}
	if owner == n.cfg.Self {
		if prev, ok := n.awaitFor(now, v, r.Key, mode != check.ModeCached && pol == check.PolicyFailClosed); ok {
			resp.Owner = prev
			it := a.item()
			it.resp, it.req, it.pol, it.here = resp, *r, pol, true
			return it
		}
		sh := n.st.hash(r.Key) // the key's slot in its shard's tables
		if mode != check.ModeCached && n.fenceBlocks(now, v, r, kh, sh) {
			// fence.go: decided once the key's backup is acknowledged.
			it := a.item()
			it.resp, it.req, it.pol = resp, *r, pol
			n.metrics.FenceWaits.Add(1)
			n.holdFenced(now, it, kh, sh)
			return nil
		}
		n.decideOwned(now, c, v, r, resp, mode == check.ModeCached, kh, sh)
		n.record(resp)
		return nil
	}
	p := v.peerOf(owner) // a member lost to a partition is never reachable
	switch mode {
	case check.ModeOwner:
		if p.down(now) {
			n.degrade(now, c, v, r, resp, pol)
			break
		}
		it := a.item()
		it.resp, it.req, it.pol = resp, *r, pol
		return it
	case check.ModeCached:
		if p.down(now) {
			n.degrade(now, c, v, r, resp, pol)
			break
		}
		if n.smallForShares(&r.Limit, v.size()) || n.viewMarked(now, r.Key, kh, r.Limit) {
			// Too small for shares, or a view evicted and not synced since
			// (evicted.go): the owner decides, as in owner mode; the view
			// is kept for the partition policy.
			n.keepView(now, c, v, p, r, kh)
			it := a.item()
			it.resp, it.req, it.pol = resp, *r, pol
			return it
		}
		n.decideCached(now, c, v, p, r, resp, kh)
	case check.ModeLeased:
		if n.decideLeased(now, c, v, p, r, resp, pol, kh) {
			it := a.item()
			it.resp, it.req, it.pol = resp, *r, pol
			return it
		}
	}
	n.record(resp)
	return nil
}

func (n *Node) isLeaving() bool {
	return n.leaving
}

// record counts a written answer in the metrics.
func (n *Node) record(resp *check.Response) {
	m := int(resp.Mode)
	if m >= len(n.metrics.Decisions) {
		m = 0
	}
	switch {
	case resp.Err != nil:
		n.metrics.Decisions[m][2].Add(1)
	case resp.Allowed:
		n.metrics.Decisions[m][0].Add(1)
	default:
		n.metrics.Decisions[m][1].Add(1)
	}
	if resp.Degraded {
		n.metrics.Degraded.Add(1)
	}
}

// admitted tells cfg.Admitted, if set, that resp admitted r at now.
func (n *Node) admitted(now time.Time, r *check.Request, resp *check.Response) {
	if n.cfg.Admitted != nil && resp.Err == nil && resp.Allowed && r.Hits > 0 && !r.Release {
		n.cfg.Admitted(r.Key, r.Hits, now)
	}
}

// take applies r to b: Take, or for a Concurrency lease Acquire / Release.
func take(b bucket.Bucket, now time.Time, r *check.Request) (bucket.Decision, error) {
	if r.Limit.Algorithm == bucket.Concurrency && (r.Lease != "" || r.Release) {
		if sem, ok := b.(bucket.Semaphore); ok {
			if r.Release {
				sem.Release(now, r.Lease)
				return b.Take(now, 0)
			}
			return sem.Acquire(now, r.Lease, r.Hits)
		}
	}
	return b.Take(now, r.Hits)
}

// decideLocal decides r on this node's local bucket of the key (ModeLocal).
func (n *Node) decideLocal(now time.Time, c uint32, r *check.Request, resp *check.Response) {
	resp.Owner = n.cfg.Self
	s := n.st.shardOf(r.Key)
	e := s.local[r.Key]
	if e == nil {
		var err error
		if e, err = n.st.newLocalMarked(r.Key, r.Limit, n.bt(now), c); err != nil {
			resp.Err = err
			return
		}
		n.st.insertInto(s, s.local, r.Key, e, n.bt(now), c)
	} else if resp.Reconfigured, resp.Err = configure(&e.b, r.Limit, n.bt(now), r.Hits); resp.Err != nil {
		return
	}
	e.stamp(c)
	resp.Decision, resp.Err = take(e.b, n.bt(now), r)
	n.admitted(now, r, resp)
}

// ownedEntry returns the owned record of key, creating a fresh one or
// turning a cached view into the authoritative state (this node became the
// owner and no hand-off has arrived: the view is the best state it has).
// reconf reports that a request of hits under l reconfigured it. closed
// reports that the request it decides is of policy fail-closed in owner or
// leased mode (policyOf; takeOwned): a key then started or promoted with no state
// after this node's start or a takeover starts drained (lostkey.go). h is
// key's store hash (store.hash).
func (n *Node) ownedEntry(s *shard, h uint64, key string, l bucket.Limit, hits int64, now time.Time, c uint32, closed bool) (e *ownedKey, reconf bool, err error) {
	if e = s.own.get(h, key); e == nil {
		if v := s.view.get(h, key); v != nil {
			n.dropLease(s, key)
			e = n.st.toOwned(s, v, n.bt(now))
			n.markPromoted(key)          // lostkey.go
			n.lateNew(n.bt(now), key, e) // lateview.go
		}
	}
	if e == nil {
		if b := n.keptState(key, now); b != nil {
			// quorum.go: dropped on the return from a minority side, and no
			// hand-off came.
			e = ownedWith(key, b, c)
			n.st.insertEntry(s, h, e, n.bt(now), c)
			reconf, err = configure(&e.b, l, n.bt(now), hits)
			n.capLeased(e, now) // leasecap.go
			return e, reconf, err
		}
		if e, err = n.newOwnedBucketEntry(key, h, l, n.bt(now), c, closed); err != nil { // lostkey.go
			return nil, false, err
		}
		n.st.insertEntry(s, h, e, n.bt(now), c)
		n.capLeased(e, now)
		n.lateNew(n.bt(now), key, e) // lateview.go
		return e, false, nil
	}
	reconf, err = configure(&e.b, l, n.bt(now), hits)
	n.boundPromoted(key, e, l, n.bt(now), closed) // lostkey.go
	n.capLeased(e, now)
	return e, reconf, err
}

// decideOwned decides r on this node's authoritative state. In cached mode,
// while other nodes also check the key, the owner holds itself to its own
// share of the tokens (takeBudget), so that the non-owners' budgets are not
// taken twice, and pushes early once its own admissions since the key's
// last push reach the sync threshold; in owner and leased modes it decides
// exactly. kh is ring.KeyHash(r.Key), sh its store hash (store.hash).
func (n *Node) decideOwned(now time.Time, c uint32, v *view, r *check.Request, resp *check.Response, cached bool, kh, sh uint64) {
	if n.takeOwned(now, c, v, r, resp, cached, kh, sh) {
		n.pushSoon(now)
	}
}

// takeOwned is decideOwned without the early push: it reports whether one
// is due. kh is ring.KeyHash(r.Key), sh its store hash (store.hash).
func (n *Node) takeOwned(now time.Time, c uint32, v *view, r *check.Request, resp *check.Response, cached bool, kh, sh uint64) (pushDue bool) {
	s := n.st.shardAt(kh)
	e, reconf, err := n.ownedEntry(s, sh, r.Key, r.Limit, r.Hits, now, c, !cached && n.policyOf(r) == check.PolicyFailClosed)
	if err != nil {
		resp.Err = err
		return false
	}
	resp.Reconfigured = reconf
	e.touch(c, r.Hits, true)
	// The owner holds itself to its share only while non-owners decide on
	// shares too: the checks of a key too small for shares all come here
	// (the non-owners' views of it decide nothing, keepView).
	shared := cached && e.interested() && !n.smallForShares(&r.Limit, v.size())
	if shared {
		t := n.syncThreshold(&r.Limit, v.size())
		share := activeShare(e, n.interestCount(s, r.Key, e))
		resp.Decision, resp.Err = n.takeBudget(e.b, true, n.bt(now), r, float64(share), e.ownAdmitted, 0, v.size(), t)
	} else {
		resp.Decision, resp.Err = take(e.b, n.bt(now), r)
	}
	n.admitted(now, r, resp)
	if resp.Err != nil || !resp.Allowed || r.Hits == 0 {
		return false
	}
	// fence.go: an owner or leased decision within what the key's backup
	// target holds (its fence's mark) needs no backup of its own.
	covered := false
	if !cached && r.Limit.Algorithm != bucket.Concurrency {
		covered = n.spendFence(now, v, e.fen, r.Key, kh, r.Hits, r.Limit)
	}
	n.markChangedBackup(s, r.Key, e, -1, !covered || reconf) // a new limit is backed up
	if !shared {
		return false
	}
	// ownAdmitted counts the owner's own admissions since the key's last
	// push: once they reach the sync threshold, push early.
	e.ownAdmitted += r.Hits
	return e.ownAdmitted >= n.syncThreshold(&r.Limit, v.size())
}

// markChanged notes that an owned key changed: every interested
// node but except (a member index, or -1) now holds a stale copy, to be
// pushed.
func (n *Node) markChanged(s *shard, key string, e *ownedKey, except int) {
	n.markChangedBackup(s, key, e, except, true)
}

// markChangedBackup is markChanged, marking the key for the next backup
// round only when backup is set (see takeOwned).
func (n *Node) markChangedBackup(s *shard, key string, e *ownedKey, except int, backup bool) {
	if backup {
		markBackup(s, e) // backup.go: the next backup round sends it
	}
	if !n.markStale(s, key, e, except) {
		return
	}
	if !e.has(flagChanged) {
		e.set(flagChanged)
		n.st.listChanged(s, key, e)
	}
}

// syncThreshold returns T, the admitted hits of a key with limit l that a
// node lets go unseen by the others before it syncs early: SyncFraction x
// capacity / members, at least 1.
func (n *Node) syncThreshold(l *bucket.Limit, members int) int64 {
	return max(1, int64(n.cfg.SyncFraction*float64(l.Capacity())/float64(max(members, 1))))
}

// takeBudget decides r on a node's view b (the owner's state for the
// owner) under the share rule: since its last sync (for the owner: since
// the key's last push) the node has admitted since hits; it may admit more
// while
//
//	since + hits <= share * (available + since)
//
// where available is what the view had left before this request (so
// available + since is what it had without this node's own admissions,
// refill included). Hidden of the since hits were not taken from b (a
// non-owner's policy debt, charge.go): available is b's less them. Summed
// over the nodes, whose shares add up to one, the
// cluster admits between syncs about what the owner had. A view that is not
// the node's first sight of the key (synced: the owner's state, or a view
// that holds one) also admits while it shows more than
// the others can have taken unseen, (members-1) x T (see syncThreshold), and
// this node's own unseen hits stay within T: so a node with a small share
// is not starved while the bucket is far from empty.
//
// The bucket decides first; a request the bucket admits but the rule does
// not is refunded and rejected.
func (n *Node) takeBudget(b bucket.Bucket, synced bool, now time.Time, r *check.Request, share float64, since, hidden int64, members int, t int64) (bucket.Decision, error) {
	d, err := take(b, now, r)
	if err != nil || !d.Allowed || r.Hits == 0 {
		return d, err
	}
	avail := d.Remaining + r.Hits - hidden
	budget := share * float64(avail+since)
	if float64(since+r.Hits) <= budget || synced && since+r.Hits <= t && avail >= r.Hits+int64(members-1)*t {
		d.Remaining = max(0, d.Remaining-hidden)
		return d, nil
	}
	_ = b.Refund(now, r.Hits)
	d.Allowed = false
	d.Remaining = max(0, min(avail, int64(budget)-since))
	d.RetryAfter = n.cfg.FlushInterval
	d.Wait = 0
	return d, nil
}
