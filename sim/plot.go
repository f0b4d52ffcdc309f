package sim

import (
	"bufio"
	"cmp"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	plotW      = 960
	padL, padR = 70, 200 // the y labels; the legend and the nodes' names
	headH      = 66      // a scenario's header: three lines
	titleH     = 26      // a panel's title
	mainH      = 190     // the cluster's chart
	nodeH      = 130     // the per-node chart
	axisH      = 30      // the time labels under a chart
	noteH      = 17      // one caption line
	panelGap   = 16
)

// WriteSVG draws, for each scenario of results, a header and one panel per
// result (mode), stacked. A panel has two charts of the admitted rate of
// the hottest key (key 0) over time: the cluster's (black) against the
// ideal limiter's (a wide pale band) and the limit's long-run rate (dashed
// red), then each node's, in a colour and dash of its own, named at its
// end. The disruption is shaded and labelled. All the panels of a scenario
// share their scales, so the modes compare at a glance. Numbered markers
// point at what a reader could misread; the captions under the panel say
// what it is (see notes).
func WriteSVG(w io.Writer, results []*Result) error {
	bw := bufio.NewWriter(w)
	h := 0
	for i, r := range results {
		if i == 0 || r.Scenario != results[i-1].Scenario {
			h += headH
		}
		h += panelHeight(r)
	}
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotW, h, plotW, h)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, h)
	y := 0.0
	for i := 0; i < len(results); {
		j := i + 1
		for j < len(results) && results[j].Scenario == results[i].Scenario {
			j++
		}
		group := results[i:j]
		header(bw, group[0], y)
		y += headH
		sc := scalesOf(group)
		for _, r := range group {
			panel(bw, r, sc, y)
			y += float64(panelHeight(r))
		}
		i = j
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// panelHeight is the height of r's panel, captions included.
func panelHeight(r *Result) int {
	lines := 0
	for _, n := range notes(r) {
		lines += len(wrap(n.text, noteWidth))
	}
	return titleH + mainH + axisH + nodeH + axisH + lines*noteH + panelGap
}

// noteWidth is the most characters in one line of a caption.
const noteWidth = 125

// wrap splits text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// scales are the tops of the y axes, in hits per second, shared by the
// panels of one scenario.
type scales struct{ cluster, node float64 }

func scalesOf(rs []*Result) scales {
	var s scales
	for _, r := range rs {
		win := r.Window.D().Seconds()
		s.cluster = max(s.cluster, r.LimitRate)
		for i := range r.Series.HotAdmitted {
			s.cluster = max(s.cluster, float64(r.Series.HotAdmitted[i])/win, float64(r.Series.HotIdeal[i])/win)
		}
		for _, vals := range r.Series.HotByNode {
			for _, v := range vals {
				s.node = max(s.node, float64(v)/win)
			}
		}
	}
	return scales{cluster: axisTop(s.cluster * 1.05), node: axisTop(s.node * 1.05)}
}

// axisTop returns the top of an axis of four round steps that holds x.
func axisTop(x float64) float64 {
	if x <= 0 {
		return 4
	}
	p := math.Pow(10, math.Floor(math.Log10(x/4)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 7.5, 10} {
		if 4*m*p >= x {
			return 4 * m * p
		}
	}
	return 40 * p
}

// header writes the scenario's header at y0.
func header(w *bufio.Writer, r *Result, y0 float64) {
	title := r.Scenario
	if r.Description != "" {
		title += ": " + r.Description
	}
	fmt.Fprintf(w, `<text x="%d" y="%g" font-size="15" font-weight="bold">%s</text>`+"\n", 10, y0+20, html.EscapeString(title))
	fmt.Fprintf(w, `<text x="%d" y="%g">%s</text>`+"\n", 10, y0+38, html.EscapeString(fmt.Sprintf(
		"Admitted hits/s of the hottest key (key 0), per %v window: %d nodes, %s, seed %d. Every mode on the same scale.",
		r.Window, r.Nodes, r.Limit, r.Seed)))
	fmt.Fprintf(w, `<text x="%d" y="%g">%s</text>`+"\n", 10, y0+54, html.EscapeString(
		"The ideal is one limiter that sees every request. The first window holds the full bucket's burst, for the ideal too."))
}

// chart is the frame of one chart: its corners and its y scale.
type chart struct {
	x0, x1, yt, yb float64
	top, dur       float64 // hits/s at yt; seconds at x1
}

// X is the abscissa of t seconds; Y the ordinate of v hits/s.
func (c chart) X(t float64) float64 { return c.x0 + (c.x1-c.x0)*t/c.dur }
func (c chart) Y(v float64) float64 { return c.yb - (c.yb-c.yt)*v/c.top }

// frame draws the chart's axes, grid, labels and the disruption's band
// (labelled when label is set).
func (c chart) frame(w *bufio.Writer, r *Result, unit string, label bool) {
	if d := r.Disruption; d != nil {
		s, e := d.Start.D().Seconds(), d.End.D().Seconds()
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d62728" fill-opacity="0.09"/>`+"\n",
			c.X(s), c.yt, c.X(e)-c.X(s), c.yb-c.yt)
		if label {
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#a50f15" font-size="11">disruption %gs–%gs</text>`+"\n",
				c.X(s)+4, c.yt+12, s, e)
		}
	}
	fmt.Fprintf(w, `<path d="M%.1f %.1fV%.1fH%.1f" stroke="black" fill="none"/>`+"\n", c.x0, c.yt, c.yb, c.x1)
	for k := 0; k <= 4; k++ {
		v := c.top * float64(k) / 4
		fmt.Fprintf(w, `<path d="M%.1f %.1fH%.1f" stroke="#e4e4e4"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n",
			c.x0, c.Y(v), c.x1, c.x0-6, c.Y(v)+4, v)
	}
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555" font-size="11">%s</text>`+"\n", c.x0-6, c.yt-6, unit)
	step := niceCeil(c.dur / 8)
	for t := 0.0; t <= c.dur+1e-9; t += step {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n", c.X(t), c.yb+16, t)
	}
}

// line draws one series of per-window counts, each window's rate at the
// window's middle.
func (c chart) line(w *bufio.Writer, vals []int64, win float64, style string) {
	var b strings.Builder
	for i, v := range vals {
		cmd := 'L'
		if i == 0 {
			cmd = 'M'
		}
		fmt.Fprintf(&b, "%c%.1f %.1f", cmd, c.X((float64(i)+0.5)*win), c.Y(float64(v)/win))
	}
	fmt.Fprintf(w, `<path d="%s" fill="none" %s/>`+"\n", b.String(), style)
}

// The styles of the cluster's chart.
const (
	styleCluster = `stroke="black" stroke-width="2"`
	styleIdeal   = `stroke="#6baed6" stroke-width="9" stroke-opacity="0.5" stroke-linejoin="round"`
	styleLimit   = `stroke="#b2182b" stroke-width="1.5" stroke-dasharray="6 4"`
)

// nodeStyle returns the stroke of node i: a colour of the Okabe-Ito
// palette (told apart by colour-blind readers too) and a dash pattern.
func nodeStyle(i int) string {
	colors := [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}
	dashes := [...]string{"", "8 3", "2 2", "10 3 2 3", "5 5"}
	s := fmt.Sprintf(`stroke="%s" stroke-width="1.6"`, colors[i%len(colors)])
	if d := dashes[i%len(dashes)]; d != "" {
		s += fmt.Sprintf(` stroke-dasharray="%s"`, d)
	}
	return s
}

// panel draws one result at vertical offset y0 on the scales sc.
func panel(w *bufio.Writer, r *Result, sc scales, y0 float64) {
	s := r.Series
	win, dur := r.Window.D().Seconds(), r.Duration.D().Seconds()
	title := r.Mode
	if r.Mode == "cached" || r.Mode == "leased" {
		title += ", flush " + r.Flush.String()
	}
	fmt.Fprintf(w, `<text x="%d" y="%g" font-size="14" font-weight="bold">%s</text>`+"\n", padL, y0+17, html.EscapeString(title))

	main := chart{x0: padL, x1: plotW - padR, yt: y0 + titleH, yb: y0 + titleH + mainH, top: sc.cluster, dur: dur}
	main.frame(w, r, "hits/s", true)
	main.line(w, s.HotIdeal, win, styleIdeal)
	if r.LimitRate > 0 {
		fmt.Fprintf(w, `<path d="M%.1f %.1fH%.1f" fill="none" %s/>`+"\n", main.x0, main.Y(r.LimitRate), main.x1, styleLimit)
	}
	main.line(w, s.HotAdmitted, win, styleCluster)
	legend := func(k int, style, label string) {
		y := main.yt + 8 + float64(k)*18
		fmt.Fprintf(w, `<path d="M%.1f %.1fh26" fill="none" %s/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			main.x1+12, y, style, main.x1+44, y+4, html.EscapeString(label))
	}
	legend(0, styleCluster, "cluster")
	legend(1, styleIdeal, "ideal limiter")
	if r.LimitRate > 0 {
		legend(2, styleLimit, fmt.Sprintf("limit %g/s", r.LimitRate))
	}

	nodes := chart{x0: padL, x1: plotW - padR, yt: main.yb + axisH, yb: main.yb + axisH + nodeH, top: sc.node, dur: dur}
	nodes.frame(w, r, "per node", false)
	var ends []nodeEnd
	for i, vals := range s.HotByNode {
		nodes.line(w, vals, win, nodeStyle(i))
		if len(vals) > 0 {
			ends = append(ends, nodeEnd{i: i, y: nodes.Y(float64(vals[len(vals)-1]) / win)})
		}
	}
	// Each node's name at the end of its line, moved apart to stay legible.
	gap := 13.0
	if len(ends) > 1 {
		gap = min(gap, (nodes.yb-nodes.yt-6)/float64(len(ends)-1))
	}
	for _, e := range spread(ends, gap, nodes.yt+6, nodes.yb) {
		fmt.Fprintf(w, `<path d="M%.1f %.1fh22" fill="none" %s/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			nodes.x1+12, e.y, nodeStyle(e.i), nodes.x1+40, e.y+4, html.EscapeString(s.Nodes[e.i]))
	}

	// Numbered markers, and their captions under the panel.
	line := 0
	for k, n := range notes(r) {
		x := main.X(n.t)
		y := min(max(main.Y(n.v)-16, main.yt+10), main.yb-10)
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="8" fill="#fff7bc" stroke="#444"/><text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" font-weight="bold">%d</text>`+"\n",
			x, y, x, y+4, k+1)
		for i, l := range wrap(n.text, noteWidth) {
			num := ""
			if i == 0 {
				num = fmt.Sprintf("%d.", k+1)
			}
			fmt.Fprintf(w, `<text x="%d" y="%.1f" font-weight="bold">%s</text><text x="%d" y="%.1f">%s</text>`+"\n",
				padL-18, nodes.yb+axisH+float64(line)*noteH+6, num, padL, nodes.yb+axisH+float64(line)*noteH+6, html.EscapeString(l))
			line++
		}
	}
}

// nodeEnd is where node i's line ends, for its name.
type nodeEnd struct {
	i int
	y float64
}

// spread returns ends sorted by y and moved apart to at least gap, within
// [lo, hi] as far as they fit.
func spread(ends []nodeEnd, gap, lo, hi float64) []nodeEnd {
	out := slices.Clone(ends)
	slices.SortStableFunc(out, func(a, b nodeEnd) int {
		switch {
		case a.y < b.y:
			return -1
		case a.y > b.y:
			return 1
		}
		return a.i - b.i
	})
	for k := range out {
		out[k].y = max(out[k].y, lo)
		if k > 0 {
			out[k].y = max(out[k].y, out[k-1].y+gap)
		}
	}
	// Pushed below the chart: move the names up again, from the last.
	for k := len(out) - 1; k >= 0; k-- {
		limit := hi
		if k < len(out)-1 {
			limit = out[k+1].y - gap
		}
		out[k].y = min(out[k].y, limit)
	}
	return out
}

// note is a caption of a panel, and where its marker goes: at t seconds,
// above v hits/s.
type note struct {
	t, v float64
	text string
}

// notes returns the captions of r's panel: what a reader could take for a
// fault of the plot or of the mode, measured from r's series.
//
//   - local mode admitting well over the ideal throughout: each node
//     enforces the whole limit on its own;
//   - a coordinated mode admitting over the ideal during the disruption:
//     the keys a node cannot reach the owner of are decided by the
//     partition policy;
//   - the hot key refused, or admitted at under half the ideal, right after
//     the disruption; in cached mode, what the cut-off nodes admitted
//     reaches the owner then and is charged to its bucket
//     (docs/accuracy.md).
func notes(r *Result) []note {
	s := r.Series
	win := r.Window.D().Seconds()
	n := len(s.HotAdmitted)
	sum := func(v []int64, from, to int) (t int64) {
		for _, x := range v[max(from, 0):min(to, n)] {
			t += x
		}
		return t
	}
	peak := func(from, to int) float64 {
		var m int64
		for _, x := range s.HotAdmitted[max(from, 0):min(to, n)] {
			m = max(m, x)
		}
		return float64(m) / win
	}
	var out []note
	if r.Mode == "local" {
		if a, i := sum(s.HotAdmitted, 0, n), sum(s.HotIdeal, 0, n); i > 0 && float64(a) > 1.1*float64(i) {
			out = append(out, note{t: 0.06 * r.Duration.D().Seconds(), v: peak(0, n/10),
				text: fmt.Sprintf("%.1f times the ideal throughout: in local mode each node enforces the whole limit on its own.", float64(a)/float64(i))})
		}
		return out
	}
	d := r.Disruption
	if d == nil {
		return out
	}
	first := int(math.Ceil(d.Start.D().Seconds() / win)) // the first window wholly in the disruption
	end := int(d.End.D().Seconds() / win)                // the first window after it
	if a, i := sum(s.HotAdmitted, first, end), sum(s.HotIdeal, first, end); i > 0 && float64(a) > 1.1*float64(i) {
		mid := (first + end) / 2
		out = append(out, note{t: (float64(mid) + 0.5) * win, v: peak(mid-1, mid+2),
			text: fmt.Sprintf("%.1f times the ideal during the disruption: a node that cannot reach a key's owner decides it by the partition policy.",
				float64(a)/float64(i))})
	}
	// The highest window of the disruption, when it is twice the ideal or
	// more. Its cause depends on the scenario (a takeover from a refilled
	// backup in isolate-owner and churn; each cut of flapping left to the
	// policy): the caption gives the figures and points at the analysis.
	top := -1
	for k := first; k < min(end, n); k++ {
		if s.HotIdeal[k] > 0 && s.HotAdmitted[k] >= 2*s.HotIdeal[k] && (top < 0 || s.HotAdmitted[k] > s.HotAdmitted[top]) {
			top = k
		}
	}
	if top >= 0 {
		out = append(out, note{t: (float64(top) + 0.5) * win, v: float64(s.HotAdmitted[top]) / win,
			text: fmt.Sprintf("The disruption's highest window, %.0f hits/s at %gs (%.1f times the ideal); docs/accuracy.md says why, scenario by scenario.",
				float64(s.HotAdmitted[top])/win, float64(top)*win, float64(s.HotAdmitted[top])/float64(s.HotIdeal[top]))})
	}
	// The first run of low windows starting within 5 windows of the end.
	lo, hi := -1, -1
	for k := end; k < min(n, end+5+1); k++ {
		if low := float64(s.HotAdmitted[k]) < 0.5*float64(s.HotIdeal[k]); low && lo < 0 {
			lo = k
		} else if !low && lo >= 0 {
			hi = k
			break
		}
	}
	if lo >= 0 {
		if hi < 0 {
			for hi = lo; hi < n && float64(s.HotAdmitted[hi]) < 0.5*float64(s.HotIdeal[hi]); hi++ {
			}
		}
		what := "admitted at under half the ideal"
		if sum(s.HotAdmitted, lo, hi) == 0 {
			what = "refused entirely"
		}
		text := fmt.Sprintf("The hot key is %s for %gs after the disruption", what, float64(hi-lo)*win)
		if r.Mode == "cached" {
			text += ": the hits the cut-off nodes admitted meanwhile reach the owner now and are charged to its bucket."
		} else {
			text += "."
		}
		out = append(out, note{t: (float64(lo+hi) / 2) * win, v: 0, text: text})
	}
	slices.SortStableFunc(out, func(a, b note) int { return cmp.Compare(a.t, b.t) })
	return out
}

// niceCeil rounds x up to a round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten).
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
