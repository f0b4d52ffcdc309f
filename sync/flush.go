package sync

import "time"

// tickFlushes runs the flush schedule: a flush in flight unanswered
// after RequestTimeout is sent again, the same message with the same seq
// (its owner marked unreachable); once leaving, one sent MaxRetries times
// is given up. The items retained for an owner that does not answer are
// bounded by MaxRetryItems. Every FlushInterval, and at once for an owner
// marked urgent or whose batch filled, a flush goes to each reachable owner
// with none in flight.
func (n *Node) tickFlushes(now time.Time, v *view, busy []*peer) {
	for _, p := range busy {
		if f := p.flight; f != nil && now.Sub(f.sentAt) >= n.cfg.RequestTimeout {
			p.markDown(now, n.cfg.UnreachableAfter)
			if n.leaving && f.retries >= n.cfg.MaxRetries {
				p.flight = nil
				n.dropFlight(f)
			} else {
				f.retries++
				f.sentAt = now
				n.send(p.name, flushBody{f.msg})
				n.metrics.FlushesRetried.Add(1)
			}
		}
		if p.flight != nil || p.down(now) {
			held := int64(0)
			if p.flight != nil {
				held = int64(len(p.flight.msg.Items))
			}
			if excess := held + p.dirty - int64(n.cfg.MaxRetryItems); excess > 0 {
				n.dropDirty(v, p, excess)
			}
		}
	}
	due := !now.Before(n.nextFlush)
	if due {
		n.nextFlush = nextDue(n.nextFlush, now, n.cfg.FlushInterval)
	}
	n.flushBusy(now, v, busy, due)
}

// flushAll sends a flush to every reachable peer with none in flight
// (all of them when due, else those urgent or with a full batch).
func (n *Node) flushAll(now time.Time, v *view, due bool) {
	n.flushBusy(now, v, n.busyPeers(v), due)
}

// flushBusy is flushAll for the peers busy, in member order: a peer with
// nothing to flush (not busy) would be sent nothing.
func (n *Node) flushBusy(now time.Time, v *view, busy []*peer, due bool) {
	var buf [8]*peer // on the stack for a cluster of up to 9 nodes
	peers := buf[:0]
	for _, p := range busy {
		if p.flight != nil || p.down(now) {
			continue
		}
		if due || p.urgent || p.dirty >= int64(n.cfg.MaxBatch) {
			peers = append(peers, p)
		}
	}
	if len(peers) > 0 {
		n.flushPeers(now, v, peers)
	}
}

// dropFlight gives up a flush in flight: its items are counted as
// dropped and no longer counted as in flight.
func (n *Node) dropFlight(f *flight) {
	n.metrics.FlushItemsDropped.Add(int64(len(f.msg.Items)))
	for _, it := range f.msg.Items {
		s := n.st.shardOf(it.Key)
		if e := n.st.lookupCached(s, it.Key); e != nil {
			e.inFlight = max(0, e.inFlight-it.Hits)
		}
		if l := s.leases[it.Key]; l != nil && it.LeaseWant > 0 {
			l.asking = false
		}
	}
}

// dropDirty drops the pending hits of up to excess keys bound for p,
// the earliest listed first, counting each in FlushItemsDropped: the retry
// buffer of an owner that does not answer is bounded.
func (n *Node) dropDirty(v *view, p *peer, excess int64) {
	for i := range n.st.shards {
		if excess <= 0 {
			return
		}
		s := &n.st.shards[i]
		k := 0
		for j, key := range s.dirty {
			e := n.st.lookupCached(s, key)
			if excess <= 0 || e == nil || !e.has(flagDirty) || v.peers[v.owner(key)] != p {
				s.dirty[k], s.routes[k] = key, s.routes[j]
				k++
				continue
			}
			e.pending, e.asked = 0, 0
			n.undeliver(key) // charge.go: a debt among the dropped hits is owed again
			e.clear(flagDirty)
			p.dirty--
			excess--
			n.metrics.FlushItemsDropped.Add(1)
		}
		n.st.keepDirty(s, k)
	}
}
