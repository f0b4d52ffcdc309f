package sim

import (
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/check"
)

func TestMetricsNetPerKeyAndWindow(t *testing.T) {
	m := newMetrics(4, int64(time.Second), 3)
	m.grow(2, "n1")
	allow := &check.Response{}
	allow.Allowed = true
	reject := &check.Response{}
	steps := []struct {
		name          string
		w, key, node  int
		hits          int64
		ideal, decide bool // an arrival the ideal admitted; a decision
		resp          *check.Response
	}{
		{"k0 w0: ideal admits 3", 0, 0, 0, 3, true, false, nil},
		{"k0 w0: cluster admits 5", 0, 0, 0, 5, false, true, allow},
		{"k1 w0: ideal admits 2", 0, 1, 0, 2, true, false, nil},
		{"k1 w0: cluster rejects", 0, 1, 1, 2, false, true, reject},
		{"k1 w1: both admit 4", 1, 1, 1, 4, true, true, allow},
		{"k0 w2: ideal admits 1", 2, 0, 0, 1, true, false, nil},
		{"k0 w0 decision, two windows late", 0, 0, 1, 7, false, true, allow},
	}
	for _, s := range steps {
		if s.ideal {
			m.arrival(s.w, s.key, s.hits, true)
		}
		if s.decide {
			d := newDecision(&pending{win: int32(s.w), key: int32(s.key), hits: s.hits}, s.resp, 0)
			m.decided(s.node, &d)
		}
	}
	m.finish()
	want := []struct{ over, under, late, admitted, ideal int64 }{
		{over: 2 + 7, under: 2, late: 1, admitted: 12, ideal: 5},
		{admitted: 4, ideal: 4},
		{under: 1, ideal: 1},
		{},
	}
	for w, ws := range m.w {
		got := struct{ over, under, late, admitted, ideal int64 }{ws.over, ws.under, ws.late, ws.admitted, ws.ideal}
		if got != want[w] {
			t.Errorf("window %d: got %+v, want %+v", w, got, want[w])
		}
	}
	if m.nodeHot[0][0] != 5 || m.nodeHot[1][0] != 7 || m.nodeAdm[1][1] != 4 {
		t.Errorf("per-node series: hot %v, all %v", m.nodeHot, m.nodeAdm)
	}
	p := m.phase("all", 0, int64(4*time.Second))
	if p.Over != 9 || p.Under != 3 || p.OverPct != 90 || p.FalseRejectPct != 30 || p.WorstWindowOverPct != 180 {
		t.Errorf("phase: got %+v", p)
	}
}

func TestConvergence(t *testing.T) {
	sec := int64(time.Second)
	tests := []struct {
		name          string
		adm, ideal    []int64
		end, duration int64
		want          int64
		converged, ok bool
	}{
		{"at once", []int64{100, 300, 100, 100}, []int64{100, 100, 100, 100}, 2 * sec, 4 * sec, 0, true, true},
		{"mid-window heal rounds up", []int64{100, 300, 100, 100}, []int64{100, 100, 100, 100}, 3 * sec / 2, 4 * sec, sec / 2, true, true},
		{"one window late", []int64{100, 300, 50, 100, 100}, []int64{100, 100, 100, 100, 100}, sec, 5 * sec, 2 * sec, true, true},
		{"relapse counts", []int64{100, 100, 150, 100}, []int64{100, 100, 100, 100}, sec, 4 * sec, 2 * sec, true, true},
		{"within 1%", []int64{100, 300, 1009, 991}, []int64{100, 100, 1000, 1000}, 2 * sec, 4 * sec, 0, true, true},
		{"never", []int64{100, 100, 100, 120}, []int64{100, 100, 100, 100}, sec, 4 * sec, 0, false, true},
		{"no whole window after", []int64{100, 100}, []int64{100, 100}, 2 * sec, 2 * sec, 0, false, false},
		{"partial last window ignored", []int64{100, 100, 5}, []int64{100, 100, 100}, sec, 5 * sec / 2, 0, true, true},
	}
	for _, tt := range tests {
		m := newMetrics(len(tt.adm), sec, 1)
		for w := range tt.adm {
			m.w[w].admitted, m.w[w].ideal = tt.adm[w], tt.ideal[w]
		}
		got, conv, ok := m.convergence(tt.end, tt.duration, 0.01)
		if got != tt.want || conv != tt.converged || ok != tt.ok {
			t.Errorf("%s: got %v %v %v, want %v %v %v", tt.name, time.Duration(got), conv, ok,
				time.Duration(tt.want), tt.converged, tt.ok)
		}
	}
}

// TestKeyStatLine: a key's reference bucket and netting slots fill two
// 64-byte cache lines exactly, the bucket and the windows in the first
// (see keyStat).
func TestKeyStatLine(t *testing.T) {
	if got := unsafe.Sizeof(keyStat{}); got != 128 {
		t.Errorf("keyStat is %d bytes, want 128", got)
	}
	if got := unsafe.Offsetof(keyStat{}.win); got >= 64 {
		t.Errorf("keyStat.win at byte %d, want in the first line", got)
	}
}
