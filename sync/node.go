package sync

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/bucket"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
	"github.com/ringlimit/ringlimit/ring"
)

// Node is one cluster member's coordination state machine: the owner's
// authoritative store of the keys the ring gives it, cached views of the
// others, pending hits and their flushes, pushes, leases, forwarded checks,
// hand-off and the partition policy. See the package documentation for the
// driver's loop and docs/consistency.md for what each mode guarantees.
//
// A Node is sequential and not safe for concurrent use: it has no lock. Its
// driver applies every input (Check, Step, Unreachable, Tick, SetMembership,
// Leave, and the reads) one after another, each whole, in one order; the
// real node's driver is peer.Driver, the simulator's is its event loop. The
// keyed store is split in 64 shards only to bound the work of a sweep step
// and of a flush pass, not for concurrency. Only Metrics may be read from
// another goroutine (its counters are atomic).
type Node struct {
	cfg     Config
	tr      Transport
	metrics Metrics
	st      *store
	view    *view
	// pushing is set while an early push runs (pushSoon).
	pushing bool
	// calls recycles the calls of forwarded Checks (check.go).
	calls callPool
	// relays recycles the checks of served forwards that wait (forward.go).
	relays relayPool

	// members is the membership last given to SetMembers.
	members []string
	// leaving is set by Leave: this node is no longer on its own ring.
	leaving bool
	// quorum holds the failed members of the quorum baseline (quorum.go).
	quorum quorum
	// dur holds the backups and the announced leaves (backup.go, leave.go).
	dur durability
	// chg holds the hits admitted without their owner, to be charged
	// (charge.go).
	chg charges
	// fen holds the owned keys' fences and the checks waiting on them
	// (fence.go).
	fen fences
	// nextFlush and nextPush are when the next scheduled flush and push are
	// due; zero before the first Tick.
	nextFlush, nextPush time.Time
	// nextSweep is when the store's sweep visits shard sweepAt next.
	nextSweep time.Time
	sweepAt   int
	// clk is the clock correction (clock.go).
	clk nodeClock
	// fwdID numbers forward batches.
	fwdID uint64
	// wireLimit is the wire form of wireLimitOf, shared by the forwards
	// built since (see limitWire).
	wireLimitOf bucket.Limit
	wireLimit   *peerv1.Limit
	// busy lists the peers with work for Tick (see wake); idle peers cost
	// a tick nothing.
	busy []*peer
	// wide holds, per shard, the interest of owned keys while the view has
	// more than inlineMembers members (interest.go).
	wide [numShards]map[string]*wideSets
	// lease is this node's ownership lease (ownerlease.go).
	lease ownerLease
	// started is the instant of the first membership, on cluster time
	// (lostkey.go); zero before it.
	started time.Time
	// taken holds, per partition this node took over from a failed member
	// (confirm.go), or gained from a member whose leave was not announced
	// to it (leave.go, noteLeftUnannounced), and still owns, the instant
	// (cluster time) it began deciding it as owner; promoted, the keys whose cached view became
	// owned state in such a takeover, not yet bounded (lostkey.go).
	taken    map[int]time.Time
	promoted map[string]bool
	// late holds the keys taken over from a failed member whose late views
	// are charged (lateview.go), lateBytes what they are charged of the
	// byte budget; lateKeys, the keys a membership change being applied
	// may have taken over so.
	late      map[string]*lateStart
	lateBytes int64
	lateKeys  []string
	// unowned holds, once leaving, the states this node had no member to
	// hand to, by key (leave.go, keepUnowned).
	unowned map[string]*peerv1.KeyState
	// unownedGrants holds the live lease grants of those states' keys, to
	// go with them (keptgrants.go).
	unownedGrants []*peerv1.LeaseGrant
	// unownedBytes is what the states in unowned are charged (lostCharge).
	unownedBytes int64
	// unownedDrained holds the ring partitions of states dropped at a
	// side structure's cap, with the instant (bucket time) the latest
	// would be full again, until handed to their owners (dropped.go): once
	// leaving, those of unowned; and those of a lost owner back
	// (handBackToLost). At most PartitionCount.
	unownedDrained map[int]time.Time
	// drained holds, per partition a leaving member handed as drained
	// (dropped.go, noteDrained), the instant (cluster time) of the
	// hand-off; at most PartitionCount.
	drained map[int]time.Time
	// handedKeys counts the keys the open marks of the view record as
	// handed (await.go, noteHanded), at most MaxKeys.
	handedKeys int64
}

// view is one membership: a ring and the peers on it. It is never modified
// once published, but for what its pointers refer to: the peers, and the
// confirmation of a takeover (confirm.go).
type view struct {
	ring *ring.Ring // nil before the first SetMembers
	// names is ring.Members(), sorted; index maps a name to its position,
	// the member's index in an owned key's interest (interest.go).
	names []string
	index map[string]int
	// peers holds every member but this node. A peer keeps its identity
	// across views while it stays a member.
	peers map[string]*peer
	// await marks the partitions gained from a live previous owner whose
	// hand-off may still be on its way (see awaitFrom); nil when none.
	await map[int]awaitFrom
	// lost holds, on a minority side, the members of the ring lost to a
	// failure, as never-reachable stand-ins (see quorum.go); nil otherwise.
	lost map[string]*peer
	// standIns lists the members of lost that are SetExpected's stand-ins
	// for members never seen, not members that failed.
	standIns []string
	// orphans marks the partitions of this node whose previous owner and
	// its backup target both failed (quorum.go, orphanedPartitions); nil
	// when none.
	orphans map[int]bool
	// confirm holds the partitions gained from a failed member and not yet
	// confirmed by a majority heard from (confirm.go); nil when none.
	confirm *confirmation
	// elsewhere holds the partitions that another member gained, in this
	// node's views, from a member counted failed, with that member
	// (confirm.go, takenElsewhere); nil when none.
	elsewhere map[int]string
}

// owner returns key's owner, or "" on an empty ring.
func (v *view) owner(key string) string { return v.ownerAt(ring.KeyHash(key)) }

// ownerAt returns the owner of the key whose ring.KeyHash is kh, or "" on
// an empty ring: owner for a caller that has the key's hash already.
func (v *view) ownerAt(kh uint64) string {
	if v.ring == nil {
		return ""
	}
	o, err := v.ring.OwnerOfHash(kh)
	if err != nil {
		return ""
	}
	return o
}

// size returns the number of members, at least 1 (this node).
func (v *view) size() int {
	if v.ring == nil {
		return 1
	}
	return max(1, v.ring.Len())
}

// member returns name's index in an owned key's interest, or -1.
func (v *view) member(name string) int {
	if i, ok := v.index[name]; ok {
		return i
	}
	return -1
}

// peer is this node's protocol state with one other member.
type peer struct {
	name string
	// downUntil is when the peer stops counting as unreachable (Unix ns);
	// zero or past when reachable.
	downUntil int64
	// dirty approximates the cached keys with something to flush to this
	// peer; urgent asks for a flush as soon as none is in flight.
	dirty  int64
	urgent bool
	// seenInc is the highest incarnation of the peer seen in an envelope.
	seenInc uint64
	// clk measures the peer's clock (clock.go).
	clk peerClock
	// listed is set while the peer is in Node.busy.
	listed bool
	// echoOut is the latest reading of the peer's clock received from it,
	// echoSent the latest of those echoed back; echoIn the latest reading
	// of this node's clock the peer echoed (ownerlease.go).
	echoOut, echoSent, echoIn int64
	// echoEpoch is the peer's clock epoch of echoOut (clock.go).
	echoEpoch uint64
	// withheldBy lists the members that named the peer as taken over:
	// while any does, its clock readings are not echoed (ownerlease.go).
	withheldBy []string

	// The fields below are guarded by Node.mu.

	// gone is set when the peer left the membership.
	gone bool
	// seq is the last flush sequence number used; flight the flush in flight
	// (nil if none); lastAcked the seq of the last acknowledged flush.
	seq       uint64
	flight    *flight
	lastAcked uint64
	// fwd holds the owner-mode checks waiting to be sent, one lane per
	// kind (see fwdLane); fwdOut the batches in flight, oldest first.
	fwd    [numLanes]fwdLane
	fwdOut []*fwdBatch
	// hoSeq numbers hand-offs; hoOut holds those not yet acknowledged.
	hoSeq uint64
	hoOut []*handoffBatch
	// inInc and inSeq are, as owner, the incarnation of the peer and the last
	// flush seq of it applied; lastAck is the answer to it, sent again to a
	// duplicate.
	inInc, inSeq uint64
	lastAck      *peerv1.FlushAck
	// grants holds, as owner, the lease tokens granted to the peer per key
	// and not seen returned (lease.go); nil until the first grant.
	grants grantBook
}

// down reports whether p counts as unreachable at now.
func (p *peer) down(now time.Time) bool { return p.downUntil > now.UnixNano() }

// markDown makes p unreachable until now + d.
func (p *peer) markDown(now time.Time, d time.Duration) {
	p.downUntil = now.Add(d).UnixNano()
}

// NewNode returns a Node for cfg that sends through tr. It starts nothing;
// it knows no members until SetMembers.
func NewNode(cfg Config, tr Transport) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, tr: tr}
	n.st = newStore(cfg.MaxKeys, cfg.MaxKeyBytes, cfg.Ring.PartitionCount, &n.metrics)
	n.st.leaseTTL = cfg.LeaseTTL
	n.view = &view{index: map[string]int{}, peers: map[string]*peer{}}
	return n, nil
}

// Metrics returns the node's counters. The pointer stays valid for the
// Node's life; its fields are atomic, so another goroutine (a metrics
// scrape) may read them while the driver applies inputs.
func (n *Node) Metrics() *Metrics { return &n.metrics }

// Ring returns the ring of the node's current view: the membership's, or on
// a minority side the quorum baseline's (quorum.go); nil before the first
// membership. A Ring is immutable, so the result may be read from any
// goroutine, but which ring is current is read like any other state: from
// the driver's loop.
func (n *Node) Ring() *ring.Ring { return n.view.ring }

// Config returns the node's configuration.
func (n *Node) Config() Config { return n.cfg }

// send hands body to the transport, addressed to peer to.
func (n *Node) send(to string, body isBody) {
	n.sendEnvelope(to, envelopeOf(body)) // envelope.go
}

// sendEnvelope addresses env, whose body is set, to peer to and hands it to
// the transport.
func (n *Node) sendEnvelope(to string, env *peerv1.Envelope) {
	env.From, env.To, env.Incarnation = n.cfg.Self, to, n.cfg.Incarnation
	p := n.view.peers[to]
	n.stampClock(p, env) // clock.go
	stampEcho(p, env)    // ownerlease.go
	n.tr.Send(to, env)
}

// isBody is a message body that can be put in an envelope.
type isBody interface{ set(env *peerv1.Envelope) }

type flushBody struct{ *peerv1.Flush }
type flushAckBody struct{ *peerv1.FlushAck }
type pushBody struct{ *peerv1.Push }
type forwardBody struct{ *peerv1.Forward }
type forwardReplyBody struct{ *peerv1.ForwardReply }
type handoffBody struct{ *peerv1.Handoff }
type handoffAckBody struct{ *peerv1.HandoffAck }
type backupBody struct{ *peerv1.Backup }
type backupAckBody struct{ *peerv1.BackupAck }

func (b flushBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_Flush{Flush: b.Flush}
}
func (b flushAckBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_FlushAck{FlushAck: b.FlushAck}
}
func (b pushBody) set(e *peerv1.Envelope) { e.Body = &peerv1.Envelope_Push{Push: b.Push} }
func (b forwardBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_Forward{Forward: b.Forward}
}
func (b forwardReplyBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_ForwardReply{ForwardReply: b.ForwardReply}
}
func (b handoffBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_Handoff{Handoff: b.Handoff}
}
func (b handoffAckBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_HandoffAck{HandoffAck: b.HandoffAck}
}
func (b backupBody) set(e *peerv1.Envelope) { e.Body = &peerv1.Envelope_Backup{Backup: b.Backup} }
func (b backupAckBody) set(e *peerv1.Envelope) {
	e.Body = &peerv1.Envelope_BackupAck{BackupAck: b.BackupAck}
}

// clone returns a deep copy of m, for messages kept to be sent again (the
// transport owns what it is given).
func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }

// Step handles env, received from the node env.From. Envelopes from nodes
// that are not current members, or addressed to another node, are dropped
// and counted; malformed items are dropped and counted, never a panic.
func (n *Node) Step(now time.Time, env *peerv1.Envelope) {
	n.enter(now)
	if env == nil {
		n.metrics.Malformed.Add(1)
		return
	}
	v := n.view
	p := v.peers[env.From]
	if p == nil && env.To == n.cfg.Self {
		v, p = n.fromDeparted(now, v, env) // leave.go: a member that announced its leave
	}
	if p == nil || env.To != n.cfg.Self {
		n.metrics.EnvelopesDropped.Add(1)
		return
	}
	p.downUntil = 0
	n.observeClock(now, v, p, env) // clock.go: before any state is read
	if prev := p.seenInc; env.Incarnation > prev {
		p.seenInc = env.Incarnation
		p.peerReborn() // ownerlease.go
		if prev != 0 {
			n.peerRestarted(v, p)
			n.backupsPeerRestarted(now, v, p)
			n.backupsTargetRestarted(v, p) // backup.go
		}
		n.resendHandoffs(now, p, env) // membership.go: before env is answered
	}
	n.leaseFields(now, v, p, env) // ownerlease.go
	switch b := env.Body.(type) {
	case *peerv1.Envelope_Flush:
		n.serveFlush(now, v, p, env.Incarnation, b.Flush)
	case *peerv1.Envelope_FlushAck:
		n.onFlushAck(now, v, p, b.FlushAck)
	case *peerv1.Envelope_Push:
		n.onPush(now, v, p, b.Push)
	case *peerv1.Envelope_Forward:
		n.serveForward(now, v, p, env.Incarnation, b.Forward)
	case *peerv1.Envelope_ForwardReply:
		n.onForwardReply(now, v, p, b.ForwardReply)
	case *peerv1.Envelope_Handoff:
		n.onHandoff(now, v, p, env.Incarnation, b.Handoff)
	case *peerv1.Envelope_HandoffAck:
		n.onHandoffAck(p, b.HandoffAck)
	case *peerv1.Envelope_Backup:
		n.onBackup(now, p, env.Incarnation, b.Backup)
	case *peerv1.Envelope_BackupAck:
		n.onBackupAck(now, p, b.BackupAck)
	case *peerv1.Envelope_ClockProbe:
		// measured by observeClock; an echo request is answered at once
		// (confirm.go)
		if b.ClockProbe.GetEcho() {
			n.withhold(v, p.name, b.ClockProbe.GetTakingOver()) // ownerlease.go
			n.send(p.name, clockProbeBody{})
		}
	default:
		n.metrics.Malformed.Add(1)
	}
	n.clk.rx = 0
}

// peerRestarted handles a peer seen with a new incarnation without a
// membership change in between (a restart faster than failure detection):
// it lost its state, so this node's views of the keys it owns are marked as
// coming from a previous owner, and the next flushes carry them for it to
// rebuild from (keeping the most consumed), as after a crash.
func (n *Node) peerRestarted(v *view, p *peer) {
	n.metrics.PeerRestarts.Add(1)
	for i := range n.st.shards {
		s := &n.st.shards[i]
		var keys []string
		for key, e := range s.view.all() {
			if e.has(flagSynced) && v.owner(key) == p.name {
				keys = append(keys, key)
			}
		}
		slices.Sort(keys)
		for _, key := range keys {
			e := n.st.lookupCached(s, key)
			e.set(flagMoved)
			n.markDirty(s, key, e, p)
		}
	}
}

// Unreachable tells the Node that a send to peer failed. The peer counts as
// unreachable for Config.UnreachableAfter: checks waiting on it and new
// checks of its keys are decided by the partition policy at once; flushes
// and hand-offs to it are retried on Tick.
func (n *Node) Unreachable(now time.Time, peer string) {
	n.enter(now)
	p := n.view.peers[peer]
	if p == nil {
		return
	}
	p.markDown(now, n.cfg.UnreachableAfter)
	n.failForwards(now, p)
}

// Tick advances the Node's timers to now: forward windows and timeouts,
// scheduled flushes and their retries, pushes, hand-off retries, and one step
// of the store's sweep (idle eviction, interest and lease expiry, hot keys).
// The driver calls it every Config.TickInterval.
//
// A tick visits only the peers with work (busy): with nothing to flush,
// forward or hand off, its cost does not grow with the number of members.
func (n *Node) Tick(now time.Time) {
	n.enter(now)
	v := n.view
	if n.expireFailed(now) {
		v = n.view
	}
	n.tickForwards(now, v, n.busyPeers(v))
	n.tickFlushes(now, v, n.busyPeers(v))
	n.tickPushes(now, v, false)
	n.tickHandoffs(now, v, n.busyPeers(v))
	n.tickBackups(now, v)
	n.tickParked(now, v)
	n.tickContested(now, v)
	n.tickClock(now, v) // clock.go
	n.tickCharges(now, v)
	n.tickFenced(now, v)
	n.tickConfirm(now, v) // confirm.go
	n.tickLease(now, v)   // ownerlease.go
	n.tickLift(now, v)    // ownerlease.go
	i, sweep := n.sweepDue(now)
	if sweep {
		n.sweepShard(now, i)
	}
	n.settleBusy(v)
}

// wake lists p among the peers with work for Tick: something to flush
// (dirty, urgent) or in flight, forwards queued or in flight, hand-offs
// unacknowledged. Every place that gives a peer such work calls it.
func (n *Node) wake(p *peer) {
	if !p.listed {
		p.listed = true
		n.busy = append(n.busy, p)
	}
}

// idle reports whether p has no work for Tick.
func (p *peer) idle() bool {
	return p.flight == nil && p.dirty <= 0 && !p.urgent && len(p.hoOut) == 0 && len(p.fwdOut) == 0 && !p.queued()
}

// busyPeers returns the busy peers that are v's, in member order (the
// order of v.names), in a slice of its own.
func (n *Node) busyPeers(v *view) []*peer {
	if len(n.busy) == 0 {
		return nil
	}
	out := make([]*peer, 0, len(n.busy))
	for _, p := range n.busy {
		if v.peers[p.name] == p {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *peer) int { return strings.Compare(a.name, b.name) })
	return out
}

// settleBusy delists the peers that have no work left, or that are no
// longer v's (a peer that left was abandoned, membership.go).
func (n *Node) settleBusy(v *view) {
	k := 0
	for _, p := range n.busy {
		if v.peers[p.name] != p || p.idle() {
			p.listed = false
			continue
		}
		n.busy[k] = p
		k++
	}
	clear(n.busy[k:])
	n.busy = n.busy[:k]
}

// sweepDue reports whether a shard is due for its sweep, and which.
func (n *Node) sweepDue(now time.Time) (int, bool) {
	if now.Before(n.nextSweep) {
		return 0, false
	}
	step := n.cfg.SweepInterval / numShards
	if n.nextSweep.IsZero() || now.Sub(n.nextSweep) > step {
		n.nextSweep = now
	}
	n.nextSweep = n.nextSweep.Add(step)
	i := n.sweepAt
	n.sweepAt = (i + 1) % numShards
	return i, true
}

// sweepShard sweeps shard i: idle keys, interest, leases and hot keys.
func (n *Node) sweepShard(now time.Time, i int) {
	s := &n.st.shards[i]
	c := coarse(now)
	n.st.sweepEntries(s, n.bt(now), c, toCoarse(n.cfg.SweepInterval), toCoarse(n.cfg.InterestTTL))
	if i == 0 {
		n.st.settleLoose() // fence.go: once a sweep
	}
	n.sweepWide(i)
	n.sweepLeases(s, now)
}
