package sync

import (
	"testing"
	"time"
)

func TestTraceSat(t *testing.T) {
	nw := newTestNet(t, nil, "a", "b", "c")
	l := perMinute(1000)
	key := "user:42"
	reqs := []Request{{Key: key, Hits: 1, Limit: l, Mode: ModeCached}}
	gap := time.Second / 9000
	start := nw.now
	nextTick := start
	i := 0
	for at := start; at.Before(start.Add(62 * time.Second)); at = at.Add(gap) {
		for !nextTick.After(at) {
			nw.deliver(nextTick)
			nw.tick()
			nextTick = nextTick.Add(5 * time.Millisecond)
		}
		nw.deliver(at)
		name := nw.names[i%3]
		i++
		resps := make([]Response, 1)
		nw.nodes[name].Check(at, reqs, resps, func() {})
		if resps[0].Allowed && at.Sub(start) > 60*time.Second {
			t.Logf("%v %s admits; views a=%d b=%d c=%d", at.Sub(start), name, remainingOn(nw.nodes["a"], at, key), remainingOn(nw.nodes["b"], at, key), remainingOn(nw.nodes["c"], at, key))
		}
	}
}
