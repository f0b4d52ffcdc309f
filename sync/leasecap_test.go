package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// TestLeaseKeepsEnvelope: with no fault, a key decided in leased mode
// stays within the token bucket's envelope, capacity + rate × span, over
// every span. A lease's tokens are drained from the owner's bucket when
// granted and spent later: here a is granted a lease, the key rests until
// the owner's bucket would have refilled to its capacity, and then, just
// before the lease expires, a spends it while the owner admits what its
// bucket holds. Before the owner held its bucket to capacity minus the
// tokens out on live leases (leasecap.go), the span of that moment
// admitted the lease on top of a full bucket.
func TestLeaseKeepsEnvelope(t *testing.T) {
	const ttl = 5 * time.Second
	nw := newTestNet(t, func(c *Config) { c.LeaseTTL = ttl }, "a", "b")
	a, b := nw.nodes["a"], nw.nodes["b"]
	key := keyOwnedBy(t, "b", "a", "b")
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 10 * time.Second} // 1 a second, burst 10
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}
	ad := &admissions{nw: nw, req: req}

	// t0: a checks the key every 10 ms until it holds a lease: the owner
	// decides the checks and grants a lease once the key is warm.
	// (The first grant may come empty: the owner's fence holds it back
	// until its backup target acknowledged room for it, fence.go.)
	granted := ad.untilGranted(a, b)
	if granted < 1 {
		t.Fatalf("no lease granted")
	}
	// Rest until just before the lease expires: the owner's bucket could
	// refill to its capacity meanwhile (what was drained is at most 10
	// tokens, refilled in 10 s; ttl is 5 s: drained 3 + granted ≤ 5).
	nw.run(ttl - 300*time.Millisecond)
	// Spend the lease at a (answered locally), then drain the owner.
	spent := ad.spendThenDrain(a, b, granted)
	// Every span [adm[i], adm[j]]: admitted j-i+1, bound capacity + rate ×
	// span (plus the link an owner's answer crosses).
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on a's lease", granted, spent))
}

// TestLeaseCapSurvivesHandoff: the cap of a lease's tokens on the owner's
// bucket (leasecap.go) moves with the key when its owner changes. a owns
// the key and grants c a lease; b joins and takes the key over (a hands
// it off); the key rests until b's bucket would have refilled to its
// capacity, and then, just before the lease expires, c spends it while b
// admits what its bucket holds. The fault checker's leased seed 105: the
// old owner alone kept the cap, and the new owner refilled to full while
// the old owner's grants were still spendable at their holders.
func TestLeaseCapSurvivesHandoff(t *testing.T) {
	const ttl = 5 * time.Second
	tweak := func(c *Config) { c.LeaseTTL = ttl }
	before, after := []string{"a", "c"}, []string{"a", "b", "c"}
	nw := newTestNet(t, tweak, before...)
	a, c := nw.nodes["a"], nw.nodes["c"]
	key := keyMoving(t, "a", "b", before, after)
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Limit: 10, Period: 10 * time.Second} // 1 a second, burst 10
	req := check.Request{Key: key, Hits: 1, Limit: l, Mode: check.ModeLeased}
	ad := &admissions{nw: nw, req: req}
	granted := ad.untilGranted(c, a)
	if granted < 2 {
		t.Fatalf("granted %d, want a lease of 2 or more", granted)
	}
	grantedAt := nw.now
	// b joins: a hands the key off to it.
	b := nw.add("b", tweak)
	nw.names = after
	b.SetMembers(nw.now, after)
	nw.setMembers(after, "a", "c")
	nw.run(200 * time.Millisecond)
	if !isOwned(b, key) {
		t.Fatalf("b does not own the key after its join")
	}
	// Rest until just before the lease expires: b's bucket could refill to
	// its capacity meanwhile.
	nw.run(ttl - 400*time.Millisecond - nw.now.Sub(grantedAt))
	spent := ad.spendThenDrain(c, b, granted)
	ad.checkEnvelope(t, l, fmt.Sprintf("granted %d, spent %d on c's lease across the hand-off", granted, spent))
}

// TestGrantsOutliveRecord: an owned key's grants are kept in its record
// (ownedKey.gr) and live as long as they did in the shard's map keyed by
// the key: when the record leaves the owned table (evicted, or the key
// becomes a view) they go to shard.strayGrants, and a record of the key
// made again takes them back, its bucket held under them (capacity 60
// less the 30 out); the sweep caps a record's expired grants (30 tokens
// neither spent nor given back become a late grant), forgets them after
// grantMemory and unlists the record; a stray key's live grants are
// forgotten, uncapped, once all expired.
func TestGrantsOutliveRecord(t *testing.T) {
	nw := newTestNet(t, nil, "a")
	a := nw.nodes["a"]
	const key = "user:0000042"
	l := perMinute(60)
	s, e := grantedRecord(t, a, key) // keptgrants_test.go
	g := e.gr
	if g == nil || len(g.live) != 1 || !e.has(flagGrants) || len(s.leased) != 1 {
		t.Fatalf("after a grant: grants %+v, listed %v (%d)", g, e.has(flagGrants), len(s.leased))
	}

	a.st.removeEntry(s, key, e)
	if e.gr != nil || s.strayGrants[key] != g {
		t.Fatalf("evicted: the record keeps %+v, strayGrants %+v", e.gr, s.strayGrants[key])
	}
	at := t0.Add(10 * time.Second)
	checkSync(t, a, at, check.Request{Key: key, Hits: 1, Limit: l})
	e = a.st.lookupOwned(s, key)
	if e.gr != g || len(s.strayGrants) != 0 || !e.has(flagGrants) {
		t.Fatalf("made again: grants %+v, stray %d, listed %v", e.gr, len(s.strayGrants), e.has(flagGrants))
	}
	if got := remainingOn(a, at, key); got != 29 {
		t.Errorf("made again: %d tokens remaining, want 29 (60 - 30 out - 1)", got)
	}

	v := a.st.toCached(s, e)
	if e.gr != nil || s.strayGrants[key] != g {
		t.Fatalf("to a view: the record keeps %+v, strayGrants %+v", e.gr, s.strayGrants[key])
	}
	if e = a.st.toOwned(s, v, t0); e.gr != g || len(s.strayGrants) != 0 {
		t.Fatalf("owned again: grants %+v, stray %d", e.gr, len(s.strayGrants))
	}

	exp := t0.Add(a.cfg.LeaseTTL)
	a.sweepGrants(s, exp)
	if e.gr == nil || len(e.gr.live) != 0 || len(e.gr.late) != 1 || e.gr.late[0].left != 30 || len(s.leased) != 1 {
		t.Fatalf("swept at expiry: grants %+v, listed %d, want one late grant of 30", e.gr, len(s.leased))
	}
	a.sweepGrants(s, exp.Add(a.grantMemory()+time.Second))
	if e.gr != nil || e.has(flagGrants) || len(s.leased) != 0 {
		t.Fatalf("swept after grantMemory: grants %+v, listed %v (%d)", e.gr, e.has(flagGrants), len(s.leased))
	}

	a.noteGrant(s, e, "b", 5, exp)
	a.st.removeEntry(s, key, e)
	a.sweepGrants(s, exp.Add(a.cfg.LeaseTTL-time.Millisecond))
	if len(s.strayGrants) != 1 {
		t.Fatalf("stray grants forgotten before they expired")
	}
	a.sweepGrants(s, exp.Add(a.cfg.LeaseTTL))
	if len(s.strayGrants) != 0 || len(s.leased) != 0 {
		t.Errorf("stray grants kept after they expired: %d, listed %d", len(s.strayGrants), len(s.leased))
	}
}

// admissions checks req on nw and keeps the instants of the admissions'
// answers (at).
type admissions struct {
	nw  *testNet
	req check.Request
	at  []time.Time
}

// ask checks req at n and notes the instant if it was admitted.
func (ad *admissions) ask(n *Node) bool {
	r := ad.nw.checkAnswered(n, ad.req)
	if r.Allowed {
		ad.at = append(ad.at, ad.nw.now)
	}
	return r.Allowed
}

// untilGranted has holder check the key every 10 ms, 10 times at most,
// until owner has granted lease tokens; it returns the tokens owner
// granted.
func (ad *admissions) untilGranted(holder, owner *Node) int64 {
	for range 10 {
		ad.ask(holder)
		ad.nw.run(10 * time.Millisecond)
		if owner.Metrics().LeaseTokensGranted.Load() > 0 {
			break
		}
	}
	return owner.Metrics().LeaseTokensGranted.Load()
}

// spendThenDrain has holder spend its lease (answered locally), up to one
// check past granted, then has owner admit what its bucket holds; it
// returns the holder's admissions.
func (ad *admissions) spendThenDrain(holder, owner *Node, granted int64) int {
	spent := 0
	for ad.ask(holder) {
		spent++
		if spent > int(granted) {
			break
		}
	}
	for ad.ask(owner) {
	}
	return spent
}

// checkEnvelope logs what (before the admissions' figures) and fails the
// test if a span of the admissions is over l's envelope: every span
// [at[i], at[j]] admitted j-i+1, bound capacity + rate × span (plus the
// link an owner's answer crosses, 2 × the net's latency).
func (ad *admissions) checkEnvelope(t *testing.T, l bucket.Limit, what string) {
	t.Helper()
	adm := ad.at
	rate := float64(l.Limit) / l.Period.Seconds()
	lag := 2 * ad.nw.latency
	worst, wi, wj := -1e9, 0, 0
	for i := range adm {
		for j := i; j < len(adm); j++ {
			over := float64(j-i+1) - (float64(l.Capacity()) + rate*(adm[j].Sub(adm[i])+lag).Seconds())
			if over > worst {
				worst, wi, wj = over, i, j
			}
		}
	}
	t.Logf("%s; %d admitted in all; worst span %v..%v: %+.2f over the envelope",
		what, len(adm), adm[wi].Sub(t0), adm[wj].Sub(t0), worst)
	if worst > 0 {
		t.Errorf("admitted %d in %v..%v: %+.2f hits over the envelope", wj-wi+1, adm[wi].Sub(t0), adm[wj].Sub(t0), worst)
	}
}
