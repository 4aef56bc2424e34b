package main

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// axisRange returns the range an axis shows for the finite values among
// vs (ok false, and 0 to 1, if there is none): from the least to the
// greatest, or, for a constant (or a spread lost in the values'
// magnitude, which the tick marks could not divide), ±10% around it (±1
// around 0), so that a learning rate of 1e30 or of 0.01 throughout gets
// an axis of its own size. The range stays within ±MaxFloat64/2, where
// its width is a number.
func axisRange(vs []float64) (lo, hi float64, ok bool) {
	const limit = math.MaxFloat64 / 2
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if plotFinite(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if lo > hi {
		return 0, 1, false
	}
	lo, hi = max(-limit, min(lo, limit)), max(-limit, min(hi, limit))
	if mag := max(math.Abs(lo), math.Abs(hi)); hi-lo > mag*1e-9 {
		return lo, hi, true
	}
	mid := lo/2 + hi/2
	pad := math.Abs(mid) / 10
	if pad < 1e-300 { // 0, or too small for the ticks' arithmetic
		pad = 1
	}
	return mid - pad, mid + pad, true
}

// segments splits one rank's points into the runs of finite values
// between non-finite ones, in order, so that a NaN is a gap in the line.
func segments(pts plotter.XYs) []plotter.XYs {
	var segs []plotter.XYs
	var cur plotter.XYs
	for _, p := range pts {
		if plotFinite(p.X) && plotFinite(p.Y) {
			cur = append(cur, p)
			continue
		}
		if len(cur) > 0 {
			segs = append(segs, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

// nonFiniteNote is what a panel's title adds for its n points that are
// not finite, each marked × on its axis; rows of several steps each
// (--metrics-every) are rows, not steps.
func nonFiniteNote(n int, multiStep bool) string {
	if n == 0 {
		return ""
	}
	what := "step"
	if multiStep {
		what = "row"
	}
	if n > 1 {
		what += "s"
	}
	return fmt.Sprintf(" (%d %s NaN or infinite: ×)", n, what)
}

func plotFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// distinctTicks are gonum's default tick marks with their labels written
// in as many digits as it takes to tell them apart: gonum's own label
// both 1e30 and 1.1e30 "1e+30".
type distinctTicks struct{}

// Ticks returns the tick marks of the range lo to hi.
func (distinctTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for prec := 2; !labelsDistinct(ticks) && prec <= 17; prec++ {
		for i := range ticks {
			if ticks[i].Label != "" {
				ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', prec, 64)
			}
		}
	}
	return ticks
}

// labelsDistinct reports whether no two labelled ticks share a label.
func labelsDistinct(ticks []plot.Tick) bool {
	seen := map[string]bool{}
	for _, t := range ticks {
		if t.Label == "" {
			continue
		}
		if seen[t.Label] {
			return false
		}
		seen[t.Label] = true
	}
	return true
}
