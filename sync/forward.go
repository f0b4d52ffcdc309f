package sync

import (
	"errors"
	"time"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// fwdItem is one owner-mode check waiting for its owner's answer.
type fwdItem struct {
	c    *call
	resp *Response
	req  Request
	pol  Policy
	// here marks a check of a key this node owns, sent to the previous owner
	// while its hand-off is awaited (see awaitFrom): when that owner says it
	// is no longer owner, or does not answer, the check is decided here.
	here bool
}

// fwdBatch is a Forward message in flight.
type fwdBatch struct {
	id     uint64
	items  []*fwdItem
	sentAt time.Time
}

// enqueueForwards queues the owner-mode checks of one Check on their owners'
// queues and sends what may go now: a batch goes at once when none is in
// flight to that owner; otherwise checks coalesce until the batch in flight
// is answered, ForwardWindow has passed or MaxBatch checks wait.
func (n *Node) enqueueForwards(now time.Time, v *view, items []*fwdItem) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var touched []*peer
	c := coarse(now)
	for _, it := range items {
		p := v.peers[it.resp.Owner]
		if p == nil || p.gone {
			n.degradeForwardLocked(now, c, v, it)
			continue
		}
		if len(p.fwdQ) == 0 {
			p.fwdSince = now
			touched = append(touched, p)
		}
		p.fwdQ = append(p.fwdQ, it)
	}
	for _, p := range touched {
		n.sendForwardsLocked(now, p, false)
	}
}

// sendForwardsLocked sends p's queued checks in batches of at most MaxBatch
// while the rules allow (or all of them when force is set).
func (n *Node) sendForwardsLocked(now time.Time, p *peer, force bool) {
	for len(p.fwdQ) > 0 {
		due := force || len(p.fwdOut) == 0 || len(p.fwdQ) >= n.cfg.MaxBatch || now.Sub(p.fwdSince) >= n.cfg.ForwardWindow
		if !due {
			return
		}
		k := min(len(p.fwdQ), n.cfg.MaxBatch)
		n.fwdID++
		b := &fwdBatch{id: n.fwdID, items: p.fwdQ[:k:k], sentAt: now}
		p.fwdQ = p.fwdQ[k:]
		p.fwdSince = now
		p.fwdOut = append(p.fwdOut, b)
		msg := &peerv1.Forward{Id: b.id, Items: make([]*peerv1.ForwardItem, k)}
		for i, it := range b.items {
			msg.Items[i] = &peerv1.ForwardItem{
				Key: it.req.Key, Limit: limitToWire(it.req.Limit), Hits: it.req.Hits,
				Lease: it.req.Lease, Release: it.req.Release,
			}
		}
		n.send(p.name, forwardBody{msg})
		n.metrics.Forwarded.Add(int64(k))
		n.metrics.ForwardBatches.Add(1)
	}
	if len(p.fwdQ) == 0 {
		p.fwdQ = nil
	}
}

// onForwardReply completes the checks of an answered batch.
func (n *Node) onForwardReply(now time.Time, v *view, p *peer, rep *peerv1.ForwardReply) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if rep.ForwardIncarnation != n.cfg.Incarnation {
		return
	}
	var b *fwdBatch
	for i, x := range p.fwdOut {
		if x.id == rep.Id {
			b = x
			p.fwdOut = append(p.fwdOut[:i:i], p.fwdOut[i+1:]...)
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
	for i, it := range b.items {
		if i >= len(rep.Items) {
			n.degradeForwardLocked(now, c, v, it)
			continue
		}
		d, err := decisionFromWire(rep.Items[i])
		if errors.Is(err, ErrNotOwner) || errors.Is(err, ErrLeaving) {
			n.degradeForwardLocked(now, c, v, it)
			continue
		}
		it.resp.Decision, it.resp.Err = d, err
		n.record(it.resp)
		it.c.finish()
	}
	n.sendForwardsLocked(now, p, false)
}

// degradeForwardLocked decides a forwarded check by its partition policy.
func (n *Node) degradeForwardLocked(now time.Time, c uint32, v *view, it *fwdItem) {
	if it.here {
		it.resp.Owner = n.cfg.Self
		var push bool // a push is an optimisation: the next Tick sends it
		n.decideOwnedLocked(now, c, v, &it.req, it.resp, it.resp.Mode == ModeCached, &push)
		n.record(it.resp)
		it.c.finish()
		return
	}
	n.metrics.ForwardTimeouts.Add(1)
	n.degrade(now, c, v, &it.req, it.resp, it.pol)
	n.record(it.resp)
	it.c.finish()
}

// failForwardsLocked decides every check queued for or in flight to p by
// the partition policy (p is unreachable or gone).
func (n *Node) failForwardsLocked(now time.Time, p *peer) {
	v := n.view.Load()
	c := coarse(now)
	for _, b := range p.fwdOut {
		for _, it := range b.items {
			n.degradeForwardLocked(now, c, v, it)
		}
	}
	for _, it := range p.fwdQ {
		n.degradeForwardLocked(now, c, v, it)
	}
	p.fwdOut, p.fwdQ = nil, nil
}

// tickForwardsLocked sends batches whose window passed and decides batches
// unanswered after RequestTimeout by the policy, marking their owner
// unreachable.
func (n *Node) tickForwardsLocked(now time.Time, v *view) {
	for _, name := range v.names {
		p := v.peers[name]
		if p == nil || len(p.fwdOut)+len(p.fwdQ) == 0 {
			continue
		}
		if len(p.fwdOut) > 0 && now.Sub(p.fwdOut[0].sentAt) >= n.cfg.RequestTimeout {
			p.markDown(now, n.cfg.UnreachableAfter)
		}
		if p.down(now) {
			n.failForwardsLocked(now, p)
			continue
		}
		n.sendForwardsLocked(now, p, false)
	}
}

// serveForward decides forwarded owner-mode checks as their owner, exactly.
func (n *Node) serveForward(now time.Time, v *view, p *peer, inc uint64, f *peerv1.Forward) {
	rep := &peerv1.ForwardReply{Id: f.Id, ForwardIncarnation: inc, Items: make([]*peerv1.Decision, len(f.Items))}
	c := coarse(now)
	leaving := n.isLeaving()
	for i, it := range f.Items {
		var resp Response
		switch l, err := limitFromWire(it.GetLimit()); {
		case err != nil || it.Key == "" || len(it.Key) > n.cfg.MaxKeyLen || it.Hits < 0:
			n.metrics.Malformed.Add(1)
			if err == nil {
				err = errors.New("sync: malformed forwarded check")
			}
			resp.Err = err
		case leaving:
			resp.Err = ErrLeaving
		case v.owner(it.Key) != n.cfg.Self:
			n.metrics.NotOwner.Add(1)
			resp.Err = ErrNotOwner
		default:
			r := Request{Key: it.Key, Hits: it.Hits, Limit: l, Lease: it.Lease, Release: it.Release}
			n.decideOwned(now, c, v, &r, &resp, false)
		}
		rep.Items[i] = decisionToWire(resp.Decision, resp.Err)
	}
	n.send(p.name, forwardReplyBody{rep})
}
