package sync

import (
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Confirmed takeovers. Failure detection is not symmetric: on the minority
// side of a silent partition a node may see one member of the other side
// fail a second before it sees the others fail. Counting a majority still
// (4 of 5 live in its view, two of them really out of reach), it dropped
// that member from its ring and took its keys over from the backups it
// held, fenced by a member on its own side, while the member it dropped,
// really on the majority side, went on owning them there: two owners
// spending one bucket (e2e's TestSilentSplit: n2, cut off with n1, saw n3
// fail 1.0 s after the cut and admitted about 11 tokens of a key of 50 per
// 5 s in the next second; +10 to +22 over the envelope in most runs).
//
// So the partitions a membership change gives this node from a member that
// failed (not one that left gracefully: that one handed its keys off) are
// unconfirmed until this node has received an envelope, of any type, from
// enough live peers after the change that
//
//	(1 + peers heard since the change) * 2 > baseline
//
// (the quorum baseline of quorum.go): a majority of the baseline is seen to
// be reachable from here now, not only counted live. At the change the node
// sends every live peer an echo request (ClockProbe{echo}), which a peer
// answers at once, so a healthy failover is confirmed within one round
// trip; while unconfirmed, the peers not heard from since are asked again
// every RequestTimeout (a request, or its answer, lost to a link that has
// since healed). No timing is assumed: a node that never hears from a majority
// never confirms, and learns meanwhile that it is a minority (then every
// key goes by the policy anyway, quorum.go).
//
// While a partition is unconfirmed this node does not decide its keys as
// owner: a local check goes by the request's partition policy, degraded, as
// when the owner is unreachable; a forwarded check is answered not-owner
// (the sender applies its own rules, as for an orphaned partition); no
// lease is granted on its keys and no debt is drained into them (charge.go).
// A later membership change carries the marks of the partitions this node
// still owns over, and the count starts again from that change. Only the
// partitions gained from a failed member are marked: a graceful leave, a
// join and a healthy cluster pay nothing (the check on the hot path is one
// nil pointer).

// confirmation is a view's unconfirmed takeover (see above). Unlike the
// rest of a view it changes after the view is published: heard counts up
// and parts becomes nil once confirmed.
type confirmation struct {
	// parts holds the unconfirmed partitions; nil once confirmed.
	parts map[int]bool
	// since is the Node's count of envelopes received (Node.heard) at the
	// change: a peer whose last envelope came after it (peer.heard >
	// since) has been heard since.
	since uint64
	// heard counts the live peers heard since the change.
	heard int
	// asked is when the echo requests were last sent (Node.askEcho).
	asked time.Time
}

// unconfirmed reports whether key's partition is an unconfirmed takeover
// in v (see above).
func (v *view) unconfirmed(key string) bool {
	c := v.confirm
	return c != nil && c.parts != nil && c.parts[v.ring.PartitionOf(key)]
}

// unconfirmedTakeovers returns the confirmation nv needs, nil when none:
// the partitions that move to this node between old and nv from a member
// in the quorum baseline's failed members, with old's unconfirmed
// partitions that this node still owns. There are none on a minority side
// (every key goes by the policy there) or on this node's first membership.
func (n *Node) unconfirmedTakeovers(old, nv *view) *confirmation {
	if old.ring == nil || nv.ring == nil || len(nv.lost) > 0 || n.leaving || !nv.ring.Has(n.cfg.Self) {
		return nil
	}
	var parts map[int]bool
	mark := func(id int) {
		if parts == nil {
			parts = map[int]bool{}
		}
		parts[id] = true
	}
	if c := old.confirm; c != nil {
		for id := range c.parts {
			if o, err := nv.ring.PartitionOwner(id); err == nil && o == n.cfg.Self {
				mark(id)
			}
		}
	}
	if len(n.quorum.failed) > 0 && old.ring != nv.ring {
		moves, err := ring.Diff(old.ring, nv.ring)
		if err == nil {
			for _, m := range moves {
				if m.To != n.cfg.Self || m.From == "" || m.From == n.cfg.Self || nv.ring.Has(m.From) {
					continue
				}
				if _, failed := n.quorum.failed[m.From]; failed {
					mark(m.Partition)
				}
			}
		}
	}
	if parts == nil {
		return nil
	}
	c := &confirmation{parts: parts, since: n.heard}
	if n.confirmed(c) {
		return nil
	}
	n.metrics.TakeoversUnconfirmed.Add(1)
	return c
}

// confirmed reports whether c's count of peers heard is a majority of the
// quorum baseline, this node included (see above).
func (n *Node) confirmed(c *confirmation) bool {
	return (1+c.heard)*2 > n.currentQuorum().Baseline
}

// askEcho sends an echo request to every live peer of v not heard from
// since the change, when v has an unconfirmed takeover: their answers
// confirm it (see above).
func (n *Node) askEcho(now time.Time, v *view) {
	c := v.confirm
	if c == nil || c.parts == nil {
		return
	}
	c.asked = now
	for _, name := range v.names {
		if p := v.peers[name]; p != nil && !p.gone && p.heard <= c.since {
			n.send(name, clockProbeBody{echo: true})
		}
	}
}

// tickConfirm asks again, every RequestTimeout, the peers not heard from
// since v's unconfirmed takeover (see above).
func (n *Node) tickConfirm(now time.Time, v *view) {
	if c := v.confirm; c != nil && c.parts != nil && now.Sub(c.asked) >= n.cfg.RequestTimeout {
		n.askEcho(now, v)
	}
}

// heardFrom records an envelope received from p, a peer of v, and
// confirms v's takeover once a majority of the baseline has been heard
// from since the change (see above).
func (n *Node) heardFrom(v *view, p *peer) {
	n.heard++
	c := v.confirm
	if c != nil && c.parts != nil && p.heard <= c.since && v.peers[p.name] == p && !p.gone {
		c.heard++
		if n.confirmed(c) {
			c.parts = nil
		}
	}
	p.heard = n.heard
}
