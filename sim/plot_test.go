package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// plotResult is a 10-window run of mode whose key 0 is admitted at
// admitted[i] hits in window i against an ideal of ideal[i], by two nodes
// splitting it, with a disruption over [3s, 6s).
func plotResult(mode string, admitted, ideal []int64) *Result {
	byNode := [][]int64{make([]int64, len(admitted)), make([]int64, len(admitted))}
	for i, a := range admitted {
		byNode[0][i], byNode[1][i] = a/2, a-a/2
	}
	return &Result{Scenario: "split", Description: "a test split", Mode: mode, Flush: Duration(100 * time.Millisecond),
		Seed: 1, Nodes: 2, Duration: Duration(10 * time.Second), Window: Duration(time.Second), Limit: "token_bucket 500/1s",
		LimitRate: 500, Disruption: &Interval{Start: Duration(3 * time.Second), End: Duration(6 * time.Second)},
		Series: Series{HotAdmitted: admitted, HotIdeal: ideal, Nodes: []string{"n1", "n2"}, HotByNode: byNode}}
}

func flat(v int64) []int64 {
	out := make([]int64, 10)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestNotes(t *testing.T) {
	tests := []struct {
		name string
		r    *Result
		want []string // substrings of each caption, in order
	}{
		{"on the ideal: none", plotResult("owner", flat(500), flat(500)), nil},
		{"local over throughout", plotResult("local", flat(1700), flat(500)), []string{"3.4 times the ideal throughout: in local mode"}},
		{"local: no other caption", plotResult("local", []int64{1700, 1700, 1700, 1700, 1700, 1700, 0, 0, 1700, 1700}, flat(500)),
			[]string{"times the ideal throughout"}},
		{"over during the disruption", plotResult("owner", []int64{500, 500, 500, 700, 700, 700, 500, 500, 500, 500}, flat(500)),
			[]string{"1.4 times the ideal during the disruption"}},
		{"cached refused after the heal", plotResult("cached", []int64{500, 500, 500, 700, 700, 700, 0, 0, 300, 500}, flat(500)),
			[]string{"1.4 times the ideal during the disruption", "refused entirely for 2s after the disruption: the hits the cut-off nodes"}},
		{"low after the heal, owner", plotResult("owner", []int64{500, 500, 500, 500, 500, 500, 500, 200, 500, 500}, flat(500)),
			[]string{"admitted at under half the ideal for 1s after the disruption."}},
		{"a peak window", plotResult("leased", []int64{500, 500, 500, 1200, 600, 600, 500, 500, 500, 500}, flat(500)),
			[]string{"highest window, 1200 hits/s at 3s (2.4 times the ideal)", "1.6 times the ideal during"}},
		{"no peak under twice the ideal", plotResult("cached", []int64{500, 500, 500, 990, 500, 500, 500, 500, 500, 500}, flat(500)),
			[]string{"1.3 times the ideal during"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := notes(tt.r)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d captions %+v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].text, w) {
					t.Errorf("caption %d = %q, want it to contain %q", i, got[i].text, w)
				}
			}
		})
	}
}

// TestWriteSVG: the panels of one scenario share their y scales, the
// disruption is labelled, the ideal and the limit have legends of their
// own, every node is named, and every caption is written.
func TestWriteSVG(t *testing.T) {
	quiet := plotResult("owner", flat(500), flat(500))
	loud := plotResult("cached", []int64{500, 500, 500, 1900, 1900, 1900, 0, 0, 500, 500}, flat(500))
	var b bytes.Buffer
	if err := WriteSVG(&b, []*Result{quiet, loud}); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{
		"split: a test split",
		">owner<", ">cached, flush 100ms<",
		"disruption 3s–6s", ">ideal limiter<", ">limit 500/s<", ">n1<", ">n2<",
		"refused entirely for 2s",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	// The quiet panel is drawn on the loud one's scale: the top label of
	// the cluster's chart (2000 for 1900 hits/s) and a label only the
	// per-node chart has (750, of 0 to 1000 for 950 per node) appear once
	// per panel.
	for _, top := range []string{`text-anchor="end">2000</text>`, `text-anchor="end">750</text>`} {
		if n := strings.Count(svg, top); n != 2 {
			t.Errorf("%s appears %d times, want once per panel (2)", top, n)
		}
	}
	if n := strings.Count(svg, `<circle`); n != 3 { // the loud panel's: over, its highest window, refused
		t.Errorf("%d markers, want 3", n)
	}
}

func TestAxisTop(t *testing.T) {
	for _, tt := range []struct{ x, want float64 }{
		{0, 4}, {1, 1}, {420, 600}, {525, 600}, {1995, 2000}, {2001, 2400}, {760, 800}, {5000, 6000},
	} {
		if got := axisTop(tt.x); got != tt.want {
			t.Errorf("axisTop(%g) = %g, want %g", tt.x, got, tt.want)
		}
	}
}

func TestSpread(t *testing.T) {
	ends := []nodeEnd{{0, 100}, {1, 101}, {2, 99}, {3, 190}, {4, 199}}
	got := spread(ends, 13, 10, 200)
	for k := range got {
		if got[k].y < 10 || got[k].y > 200 {
			t.Errorf("label %d at %g, outside [10, 200]", got[k].i, got[k].y)
		}
		if k > 0 && got[k].y-got[k-1].y < 13-1e-9 {
			t.Errorf("labels %d and %d %g apart, want at least 13", got[k-1].i, got[k].i, got[k].y-got[k-1].y)
		}
	}
	if got[0].i != 2 || got[1].i != 0 || got[2].i != 1 {
		t.Errorf("order %v, want by y: 2, 0, 1, ...", got)
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc dddd", 8)
	if strings.Join(got, "|") != "aaa bbb|ccc dddd" {
		t.Errorf("wrap = %q", got)
	}
}
