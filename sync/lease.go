package sync

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// lease is a non-owner's lease on one key (leased mode): tokens the owner
// drained from its bucket and granted to this node, spendable here until
// they expire. Two grants can be live at once (the current one and a
// renewal); the older is spent first.
type lease struct {
	cur, next       int64 // tokens left
	curExp, nextExp int64 // expiry, Unix ns: LeaseTTL after the asking flush was first sent
	// curID and nextID name cur's and next's grants at their owners,
	// curFrom and nextFrom (FlushAck.lease_grant_ids; a merged grant, the
	// later of its two); settled is the latest grant of settledFrom this
	// node holds no more (expired or given back, its unspent tokens in ret
	// or already sent), and sent the latest settled a flush carried
	// (FlushItem.lease_settled). Ids are compared only among one owner's
	// grants: another owner's clock may be behind.
	curID, nextID, settled, sent   int64
	curFrom, nextFrom, settledFrom string
	// ret is unspent tokens of expired grants, to give back.
	ret int64
	// spentCur and spentNext are the tokens of cur's and next's grants
	// spent here since the last flush, to report (leasecap.go).
	spentCur, spentNext int64
	// last is the size of the last grant.
	last int64
	// want: a request is to go with the next flush; asking: one is in
	// flight; zero: the last grant was empty, so asks wait for the scheduled
	// flush instead of going at once.
	want, asking, zero bool
	// closed: a check of policy fail-closed was decided on the lease (or
	// forwarded for want of it) since the lease was made here; its flush
	// items say so (FlushItem.fail_closed), so that the owner bounds a key
	// it took over by that policy, not its own default (lostkey.go).
	closed bool
}

// expire moves expired tokens to ret.
func (l *lease) expire(now int64) {
	if l.nextExp <= now && (l.next > 0 || l.nextID != 0) {
		l.ret += l.next
		l.next, l.spentNext = 0, 0
		l.settle(l.nextID, l.nextFrom)
		l.nextID = 0
	}
	if l.curExp <= now && (l.cur > 0 || l.curID != 0) {
		l.ret += l.cur
		l.cur, l.spentCur = 0, 0
		l.settle(l.curID, l.curFrom)
		l.curID = 0
	}
	if l.cur == 0 {
		if l.curID != 0 {
			// cur's grant was spent out before its expiry: done with.
			l.settle(l.curID, l.curFrom)
		}
		l.cur, l.curExp, l.next, l.nextExp = l.next, l.nextExp, 0, 0
		l.curID, l.nextID = l.nextID, 0
		l.curFrom, l.nextFrom = l.nextFrom, ""
		l.spentCur, l.spentNext = l.spentNext, 0
	}
}

// settle marks the grant id of the owner named from as held here no more.
// The grants of another owner than the last one's are reported to it
// alone: what was not reported of the last one's is forgotten (it keeps
// its records of them until they age out).
func (l *lease) settle(id int64, from string) {
	switch {
	case id == 0:
	case from != l.settledFrom:
		l.settledFrom, l.settled, l.sent = from, id, 0
	default:
		l.settled = max(l.settled, id)
	}
}

// unsent reports whether a settled grant is still to be reported.
func (l *lease) unsent() bool { return l.settled > l.sent }

// avail returns the tokens spendable now (after expire).
func (l *lease) avail() int64 { return l.cur + l.next }

// spend takes hits from the lease, the older grant first, and reports
// whether it held enough.
func (l *lease) spend(now, hits int64) bool {
	l.expire(now)
	if hits > l.avail() {
		return false
	}
	from := min(hits, l.cur)
	l.cur -= from
	l.next -= hits - from
	l.spentCur += from
	l.spentNext += hits - from
	l.expire(now)
	return true
}

// short reports whether the lease holds fewer than hits tokens at now
// while no grant is asked for and the last grant was not empty: a check is
// then better decided by the owner than rejected here. (After an empty
// grant the owner had nothing left: checks are rejected here until the
// scheduled renewal.)
func (l *lease) short(now, hits int64) bool {
	l.expire(now)
	return l.avail() < hits && !l.asking && !l.want && !l.zero
}

// needsRenewal reports whether a renewal is due: half the last grant spent,
// or the current grant in the second half of its life.
func (l *lease) needsRenewal(now int64, ttl time.Duration) bool {
	if l.want || l.asking {
		return false
	}
	return l.avail()*2 <= l.last || l.cur > 0 && l.curExp-now < int64(ttl/2)
}

// grant adds g tokens granted by the owner named from in answer to a
// flush first sent at first; id names the grant there (0 from an older
// owner).
func (l *lease) grant(now time.Time, g, id int64, from string, first time.Time, ttl time.Duration, m *Metrics) {
	l.asking = false
	l.last = g
	l.zero = g == 0
	if g <= 0 {
		return
	}
	if l.avail() > 0 {
		m.LeasesRenewed.Add(1)
	}
	exp := first.Add(ttl).UnixNano()
	t := now.UnixNano()
	l.expire(t)
	switch {
	case exp <= t:
		l.ret += g // answered after its expiry: give it back
		l.settle(id, from)
	case l.cur == 0:
		l.cur, l.curExp, l.curID, l.curFrom = g, exp, id, from
	case l.next == 0:
		l.next, l.nextExp, l.nextID, l.nextFrom = g, exp, id, from
	default: // a third grant: merged into the newer, with the earlier expiry
		l.next += g
		l.nextExp = min(l.nextExp, exp)
		if from == l.nextFrom {
			l.nextID = max(l.nextID, id)
		} // else: left unsettled at its owner, which forgets it later
	}
}

// fill puts the lease's request and returns into a flush item to the
// member named to.
func (l *lease) fill(it *peerv1.FlushItem, to string, now time.Time, ttl time.Duration) {
	l.expire(now.UnixNano())
	it.LeaseReturn, l.ret = l.ret, 0
	// Spends are reported only of a grant with more than an eighth of its
	// life left (125 ms of the default LeaseTTL), so that the report
	// reaches the owner while it still counts that grant live: the owner
	// credits spends to the holder's live grants, oldest first, and spends
	// of a grant it has already let expire would be credited to a newer
	// one, whose tokens are unspent, raising its cap by as much. A flush
	// delayed beyond that margin can still do so, by at most the spends it
	// reports. What is not reported holds the cap until the grant expires
	// (the safe side); so does a report lost with its flush (unfill does
	// not restore it: it may have been applied). An eighth, not a half:
	// with half, TestColdStartNotDegraded's leased false rejections were
	// 0.41%, with a quarter 0.18%, with an eighth under its 0.1%.
	t, margin := now.UnixNano(), ttl.Nanoseconds()/8
	if l.curExp-t > margin {
		it.LeaseSpent += l.spentCur
	}
	if l.nextExp-t > margin {
		it.LeaseSpent += l.spentNext
	}
	l.spentCur, l.spentNext = 0, 0
	if l.unsent() {
		// Once, and only to the owner of the grants: it forgets them. A
		// flush not applied reports them again (unfill).
		if l.settledFrom == to {
			it.LeaseSettled = l.settled
		}
		l.sent = l.settled
	}
	it.FailClosed = l.closed
	if l.want {
		// Ask for what this node's demand spends in a lease's life.
		perSec := float64(it.Rate) / demandTau.Seconds()
		it.LeaseWant = max(1, int64(math.Ceil(math.Min(perSec*ttl.Seconds(), bucket.MaxLimit))))
		l.want, l.asking = false, true
	}
}

// unfill undoes fill for a flush the receiver did not apply.
func (l *lease) unfill(it *peerv1.FlushItem) {
	l.ret += it.LeaseReturn
	if it.LeaseSettled > 0 {
		l.sent = 0 // reported again with the next flush
	}
	if it.LeaseWant > 0 {
		l.want, l.asking = true, false
	}
}

// leaseWarmDemand is the decayed demand (hits, time constant demandTau)
// that a key must show here, before a check, for a lease on it to be asked
// for: about one check in the last 0.7 s.
const leaseWarmDemand = 0.5

// decideLeased decides r on a non-owner from its lease. It returns true when
// the check must be forwarded to the owner instead: until the first grant
// for the key arrives (it is asked for at once), and whenever the lease does
// not cover the check (a grant is then asked for, see lease.short). With
// the owner unreachable, such a check is decided by the partition policy. A
// lease never rejects a check the owner would admit. kh is
// ring.KeyHash(r.Key).
func (n *Node) decideLeased(now time.Time, c uint32, v *view, p *peer, r *check.Request, resp *check.Response, pol check.Policy, kh uint64) (forward bool) {
	s := n.st.shardAt(kh)
	e, o, _, reconf, err := n.cachedEntry(s, r.Key, r.Limit, r.Hits, now, c)
	resp.Reconfigured = reconf
	if err != nil {
		resp.Err = err
		return false
	}
	if o != nil {
		o.touch(c, r.Hits, true)
		resp.Decision, resp.Err = take(o.b, n.bt(now), r)
		n.admitted(now, r, resp)
		return false
	}
	e.touch(c, r.Hits)
	e.asked = satAdd32(e.asked, r.Hits)
	// On a minority side the owner is as good as down: the majority has
	// taken the key over, so only the lease held here is spent (quorum.go).
	down := p.down(now) || len(v.lost) > 0
	t := now.UnixNano()
	l := s.leases[r.Key]
	capacity := r.Limit.Capacity()
	// A lease costs messages of its own (the ask, the grant, the return of
	// what expires unspent): it is asked for only on a key checked here
	// again within about a second. A cold key's checks go to the owner, as
	// in owner mode.
	warm := e.dem-float32(r.Hits) >= leaseWarmDemand
	switch {
	case l == nil && !warm:
		if down {
			n.degrade(now, c, v, r, resp, pol)
			return false
		}
		return true
	case l == nil:
		l = &lease{want: true}
		s.leases[strings.Clone(r.Key)] = l
		forward = !down
	case l.last == 0 && !l.zero && l.avail() == 0:
		// The first grant is on its way, or came empty from a bucket that
		// has tokens (the owner's fence held it back until its backup
		// target acknowledges room for it, fence.go): the owner decides,
		// and, in the second case, a grant is asked for again.
		if !l.asking && !l.want {
			l.want = warm
		}
		forward = !down
	case l.short(t, r.Hits):
		// What the lease holds does not cover the check (its grants
		// expired while the key was idle, or were sized for fewer hits)
		// and no grant is asked for: as on first sight, the owner decides
		// and, on a warm key, a new grant is asked for at once.
		l.want = warm
		forward = !down
	case l.spend(t, r.Hits):
		resp.Decision = bucket.Decision{Allowed: true, Limit: capacity, Remaining: l.avail()}
		n.admitted(now, r, resp)
		if l.needsRenewal(t, n.cfg.LeaseTTL) {
			l.want = true
		}
	case r.Hits > capacity:
		resp.Decision = bucket.Decision{Limit: capacity, Remaining: l.avail(), RetryAfter: bucket.MaxRetry}
	default:
		// The lease does not cover the check while a grant is asked for
		// (or the last one came empty): the owner decides it, as in owner
		// mode, rather than a rejection for want of a lease. Before, such
		// a check was rejected: 62 of 240,000 checks of keys of 1000/s
		// that the load never neared, 3 nodes on 2 loaded cores
		// (TestLeasedNoFalseRejectionWhileRenewing).
		if !l.asking {
			l.want = true // urgent unless the last grant was empty
		}
		forward = !down
	}
	if pol == check.PolicyFailClosed {
		l.closed = true
	}
	urgent := l.want && !l.zero
	full := n.markRouted(s, r.Key, e, p, v)
	spent := !forward && !resp.Allowed && resp.RetryAfter != bucket.MaxRetry
	if (urgent || full) && !down {
		n.flushSoon(now, p)
	}
	if down && spent {
		n.degrade(now, c, v, r, resp, pol)
	}
	return forward
}

// dropLease forgets this node's lease on key (the key became this
// node's own: its tokens were drained from the bucket it now holds, so they
// are simply not spent: under-admission, never over).
func (n *Node) dropLease(s *shard, key string) {
	delete(s.leases, key)
}

// sweepLeases expires leases, lists unspent tokens to be given back,
// and forgets leases with nothing left whose key is idle.
func (n *Node) sweepLeases(s *shard, now time.Time) {
	v := n.view
	t := now.UnixNano()
	c := coarse(now)
	var back []string
	for key, l := range s.leases {
		l.expire(t)
		e := n.st.lookupCached(s, key)
		switch {
		case e == nil:
			delete(s.leases, key)
		case l.ret > 0 || l.unsent():
			// Unspent tokens to give back, or a grant spent out to
			// report settled (leasecap.go: the owner forgets it).
			back = append(back, key)
		case l.avail() == 0 && !l.asking && !l.want && ageOf(c, e.used()) > toCoarse(n.cfg.LeaseTTL):
			delete(s.leases, key)
		}
	}
	n.markReturns(s, v, back)
	n.sweepGrants(s, now) // leasecap.go
}

// markReturns lists the keys (sorted, so flushes are reproducible)
// for the next flush to their owners.
func (n *Node) markReturns(s *shard, v *view, keys []string) {
	slices.Sort(keys)
	for _, key := range keys {
		if p, e := v.peers[v.owner(key)], n.st.lookupCached(s, key); p != nil && e != nil {
			n.markRouted(s, key, e, p, v)
		}
	}
}

// returnLeases gives back every unspent lease token (graceful leave).
func (n *Node) returnLeases(v *view) {
	for i := range n.st.shards {
		s := &n.st.shards[i]
		var back []string
		for key, l := range s.leases {
			l.ret += l.avail()
			l.cur, l.next, l.want = 0, 0, false
			l.settle(l.curID, l.curFrom)
			l.settle(l.nextID, l.nextFrom)
			l.curID, l.nextID = 0, 0
			if l.ret > 0 || l.unsent() {
				back = append(back, key)
			}
		}
		n.markReturns(s, v, back)
	}
}

// grantBook is an owner's account of the lease tokens it granted one peer,
// per key, and has not seen returned. A return refunds at most that much:
// a peer cannot give back tokens it was never given (a forged return would
// refill a spent key), nor give the same tokens back twice. Entries whose
// last grant is older than grantMemory are forgotten, so the book holds the
// keys the peer leased recently; a return that comes later still is
// refused, which under-admits (the safe side).
type grantBook struct {
	m map[string]grantEntry
	// pruneAt is the size at which the book is next swept of old entries.
	pruneAt int
}

// grantEntry is the tokens granted on one key and not yet returned, and
// when the last grant was made (Unix ns). How many of the tokens returned
// the owner's bucket takes back is leasecap.go's (settleReturn).
type grantEntry struct {
	tokens, at int64
}

// minGrantPrune is the smallest book that is swept of old entries.
const minGrantPrune = 1024

// grantMemory is how long an owner remembers a lease grant for a return:
// ten lease lifetimes, far more than a lease lives and its unspent tokens
// take to come back (the next flush after its expiry).
func (n *Node) grantMemory() time.Duration { return 10 * n.cfg.LeaseTTL }

// recordGrant records g tokens granted to p on key at now.
func (p *peer) recordGrant(key string, g int64, now time.Time, memory time.Duration) {
	if g <= 0 {
		return
	}
	b := &p.grants
	if b.m == nil {
		b.m, b.pruneAt = map[string]grantEntry{}, minGrantPrune
	}
	t := now.UnixNano()
	if ge, ok := b.m[key]; ok {
		b.m[key] = grantEntry{tokens: ge.tokens + g, at: t}
	} else {
		b.m[strings.Clone(key)] = grantEntry{tokens: g, at: t} // key may point into a message
	}
	if len(b.m) >= b.pruneAt {
		for k, ge := range b.m {
			if t-ge.at > int64(memory) {
				delete(b.m, k)
			}
		}
		b.pruneAt = max(minGrantPrune, 2*len(b.m))
	}
}

// takeReturn returns how many of the ret tokens p gives back on key
// may be refunded at now (at most those granted and not yet returned), and
// takes them off the book.
func (p *peer) takeReturn(key string, ret int64, now time.Time, memory time.Duration) int64 {
	ge, ok := p.grants.m[key]
	if !ok {
		return 0
	}
	if now.UnixNano()-ge.at > int64(memory) {
		delete(p.grants.m, key)
		return 0
	}
	r := min(ret, ge.tokens)
	if ge.tokens -= r; ge.tokens == 0 {
		delete(p.grants.m, key)
	} else {
		p.grants.m[key] = ge
	}
	return r
}
