package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	plotW, plotH           = 960, 300
	padL, padR, padT, padB = 70, 150, 30, 40
)

// color returns the line color of node i.
func color(i int) string {
	p := [...]string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
		"#7f7f7f", "#bcbd22", "#17becf", "#aec7e8"}
	return p[i%len(p)]
}

// WriteSVG draws one panel per result, stacked: the admitted rate of the
// hottest key (key 0) over time, per node (thin lines) and cluster-wide
// (thick black), against the ideal limiter's (dashed blue) and the limit's
// long-run rate (dashed red), with the disruption shaded.
func WriteSVG(w io.Writer, results []*Result) error {
	bw := bufio.NewWriter(w)
	h := plotH * len(results)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotW, h, plotW, h)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, h)
	for i, r := range results {
		panel(bw, r, float64(i*plotH))
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// panel draws one result at vertical offset y0.
func panel(w *bufio.Writer, r *Result, y0 float64) {
	s, limitRate := r.Series, r.LimitRate
	win := r.Window.D().Seconds()
	n := len(s.HotAdmitted)
	rate := func(v int64) float64 { return float64(v) / win }
	top := limitRate
	for i := range n {
		top = max(top, rate(s.HotAdmitted[i]), rate(s.HotIdeal[i]))
	}
	top = niceCeil(top * 1.1)
	x0, x1 := float64(padL), float64(plotW-padR)
	yb, yt := y0+plotH-padB, y0+padT
	dur := r.Duration.D().Seconds()
	X := func(t float64) float64 { return x0 + (x1-x0)*t/dur }
	Y := func(v float64) float64 { return yb - (yb-yt)*v/top }

	title := fmt.Sprintf("%s — %s", r.Scenario, r.Mode)
	if r.Mode == "cached" || r.Mode == "leased" {
		title += " flush " + r.Flush.String()
	}
	fmt.Fprintf(w, `<text x="%g" y="%g" font-weight="bold">%s: key 0 admitted hits/s (%d nodes, %s, seed %d)</text>`+"\n",
		x0, y0+18, html.EscapeString(title), r.Nodes, html.EscapeString(r.Limit), r.Seed)
	if d := r.Disruption; d != nil {
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d62728" fill-opacity="0.08"/>`+"\n",
			X(d.Start.D().Seconds()), yt, X(d.End.D().Seconds())-X(d.Start.D().Seconds()), yb-yt)
	}
	// Axes, grid and labels.
	fmt.Fprintf(w, `<path d="M%.1f %.1fV%.1fH%.1f" stroke="black" fill="none"/>`+"\n", x0, yt, yb, x1)
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		fmt.Fprintf(w, `<path d="M%.1f %.1fH%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n",
			x0, Y(v), x1, x0-6, Y(v)+4, v)
	}
	step := niceCeil(dur / 8)
	for t := 0.0; t <= dur+1e-9; t += step {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n", X(t), yb+16, t)
	}
	// Each window's rate is drawn at the window's middle.
	line := func(vals []int64, color, width, dash string) {
		var b strings.Builder
		for i, v := range vals {
			cmd := 'L'
			if i == 0 {
				cmd = 'M'
			}
			fmt.Fprintf(&b, "%c%.1f %.1f", cmd, X((float64(i)+0.5)*win), Y(rate(v)))
		}
		fmt.Fprintf(w, `<path d="%s" stroke="%s" stroke-width="%s" fill="none"%s/>`+"\n", b.String(), color, width, dash)
	}
	legend := func(k int, color, dash, label string) {
		y := yt + float64(k)*16
		fmt.Fprintf(w, `<path d="M%.1f %.1fh24" stroke="%s" stroke-width="2"%s/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			x1+10, y, color, dash, x1+40, y+4, html.EscapeString(label))
	}
	for i, vals := range s.HotByNode {
		c := color(i)
		line(vals, c, "1", "")
		legend(i+3, c, "", s.Nodes[i])
	}
	const dashed = ` stroke-dasharray="6 4"`
	line(s.HotIdeal, "#1f3fbf", "2", dashed)
	line(s.HotAdmitted, "black", "2.5", "")
	legend(0, "black", "", "cluster")
	legend(1, "#1f3fbf", dashed, "ideal")
	if limitRate > 0 {
		fmt.Fprintf(w, `<path d="M%.1f %.1fH%.1f" stroke="#d62728" stroke-width="1.5"%s/>`+"\n", x0, Y(limitRate), x1, dashed)
		legend(2, "#d62728", dashed, "limit")
	}
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
