package peer

import (
	"context"
	"time"
)

// heads holds, for the loop alone, the next input of each of the Driver's
// two queues once taken off its channel, and what small checks may still
// pass envelopes.
type heads struct {
	in, peer       input
	hasIn, hasPeer bool
	// pass is how many more items of checks may be applied before the
	// envelope at the head of the peers' queue (PassItems after each
	// envelope).
	pass int
}

// run is the loop: one input at a time (next says which), and Tick every
// TickInterval.
func (d *Driver) run(ctx context.Context) {
	defer close(d.finished)
	t := time.NewTicker(d.tick)
	defer t.Stop()
	d.heads.pass = d.passItems
	for {
		select { // ticks and the stop first: the queues may never be empty
		case <-t.C:
			d.tickCore()
			continue
		case <-d.stop:
			d.halt()
			return
		case <-ctx.Done():
			d.halt()
			return
		default:
		}
		if x, ok := d.next(); ok {
			d.apply(x)
			continue
		}
		select {
		case x := <-d.in:
			d.apply(x)
		case x := <-d.peers:
			d.heads.pass = d.passItems
			d.apply(x)
		case <-t.C:
			d.tickCore()
		case <-d.stop:
			d.halt()
			return
		case <-ctx.Done():
			d.halt()
			return
		}
	}
}

// next returns the next input to apply, without waiting (ok is false when
// both queues are empty). Each queue goes in the order offered; between
// them the input offered first goes first, except that a check of up to
// the items pass allows goes before an envelope offered earlier. Inputs
// other than checks (unreachable reports, Do) count no items.
func (d *Driver) next() (x input, ok bool) {
	h := &d.heads
	if !h.hasIn {
		select {
		case h.in = <-d.in:
			h.hasIn = true
		default:
		}
	}
	if !h.hasPeer {
		select {
		case h.peer = <-d.peers:
			h.hasPeer = true
		default:
		}
	}
	switch {
	case h.hasIn && !h.hasPeer:
		h.hasIn = false
		return h.in, true
	case h.hasIn && (len(h.in.reqs) <= h.pass || h.in.seq < h.peer.seq):
		if h.in.seq > h.peer.seq {
			h.pass -= len(h.in.reqs) // it passed the envelope
		}
		h.hasIn = false
		return h.in, true
	case h.hasPeer:
		h.hasPeer = false
		h.pass = d.passItems
		return h.peer, true
	}
	return x, false
}

// tickCore runs the core's Tick, and AfterTick.
func (d *Driver) tickCore() {
	now := d.clock.Now()
	d.core.Tick(now)
	if d.afterTick != nil {
		d.afterTick(now)
	}
}

// drain applies what is queued when the loop stops, in the order run
// would.
func (d *Driver) drain() {
	for {
		x, ok := d.next()
		if !ok {
			return
		}
		d.apply(x)
	}
}

// halt stops the loop (Close, or the end of Start's context): the stop is
// closed once, and what is queued is applied.
func (d *Driver) halt() {
	d.stopOnce.Do(func() { close(d.stop) })
	d.drain()
}
