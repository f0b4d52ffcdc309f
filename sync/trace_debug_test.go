package sync

import (
	"fmt"
	"testing"
	"time"
)

func TestDebugGrid(t *testing.T) {
	for _, nn := range []int{3, 10} {
		for _, lat := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
			names := []string{}
			for i := range nn {
				names = append(names, fmt.Sprintf("n%d", i))
			}
			nw := newTestNet(t, nil, names...)
			nw.latency = lat
			r := runLoad(t, nw, ModeCached, perMinute(1000), 9000, 5*70*time.Second, 70*time.Second, 2*time.Second, 70*time.Second)
			nw2 := newTestNet(t, nil, names...)
			nw2.latency = lat
			r2 := runLoad(t, nw2, ModeCached, perMinute(1000), 9000, 3*time.Minute, time.Minute, time.Minute, time.Minute)
			t.Logf("N=%d lat=%v: bursts over %+.2f%% worst %+d msgs %d | steady over %+.2f%% worst %+d msgs %d", nn, lat, r.over(), r.worstWindow, r.messages, r2.over(), r2.worstWindow, r2.messages)
		}
	}
}
