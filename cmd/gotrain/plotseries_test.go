package main

import (
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/gotrain/gotrain/event"
)

// A constant gets a range around it relative to its size; a spread, its
// extent; nothing finite, none.
func TestAxisRange(t *testing.T) {
	nan, inf, big := math.NaN(), math.Inf(1), math.MaxFloat64
	for _, tc := range []struct {
		vs     []float64
		lo, hi float64
		ok     bool
	}{
		{[]float64{0.01, 0.01, 0.01}, 0.009, 0.011, true},
		{[]float64{1e30}, 0.9e30, 1.1e30, true},
		{[]float64{-5, nan, -5}, -5.5, -4.5, true},
		{[]float64{0, 0}, -1, 1, true},
		{[]float64{5e-324}, -1, 1, true},
		{[]float64{1e30, 1e30 * (1 + 1e-12)}, 0.9e30, 1.1e30, true}, // a spread the ticks cannot divide
		{[]float64{1, nan, 3, inf}, 1, 3, true},
		{[]float64{-big, big}, -big / 2, big / 2, true},
		{[]float64{big}, big / 2 * 0.9, big / 2 * 1.1, true},
		{[]float64{nan, inf, -inf}, 0, 1, false},
		{nil, 0, 1, false},
	} {
		lo, hi, ok := axisRange(tc.vs)
		near := func(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b)) }
		if !near(lo, tc.lo) || !near(hi, tc.hi) || ok != tc.ok {
			t.Errorf("axisRange(%v) = %v, %v, %v; want %v, %v, %v", tc.vs, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
		if !(lo < hi) || math.IsInf(hi-lo, 0) {
			t.Errorf("axisRange(%v) = %v to %v: not a range gonum can divide", tc.vs, lo, hi)
		}
	}
}

// A NaN or infinite value breaks the line; a run of one point stays.
func TestSegments(t *testing.T) {
	nan := math.NaN()
	pts := plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: nan}, {X: 3, Y: 3}, {X: 4, Y: math.Inf(1)}, {X: 5, Y: 5}, {X: 6, Y: 6}, {X: 7, Y: nan}}
	got := fmt.Sprint(segments(pts))
	if want := "[[{1 1}] [{3 3}] [{5 5} {6 6}]]"; got != want {
		t.Fatalf("segments = %s, want %s", got, want)
	}
	if segs := segments(plotter.XYs{{X: 1, Y: nan}}); len(segs) != 0 {
		t.Fatalf("segments of one NaN = %v", segs)
	}
}

// rowsOf makes the rows of ranks over steps steps, the loss, learning
// rate and rate of each from the functions given.
func rowsOf(ranks, steps int, loss, lr, rate func(rank, step int) float64) []event.Row {
	var rows []event.Row
	for step := 1; step <= steps; step++ {
		for rank := range ranks {
			rows = append(rows, event.Row{Rank: rank, Epoch: 1, Step: step, Steps: 1, Samples: 64,
				Loss: loss(rank, step), LR: lr(rank, step), SamplesPerSec: rate(rank, step)})
		}
	}
	return rows
}

func constant(v float64) func(int, int) float64 { return func(int, int) float64 { return v } }

// The series a run can write draw without a panic, whatever their
// values: constants of any size, one point, nothing finite, huge spreads.
func TestPlotEdgeSeries(t *testing.T) {
	nan, big := math.NaN(), math.MaxFloat64
	falling := func(_, step int) float64 { return 2.3 / float64(step) }
	for _, tc := range []struct {
		name string
		rows []event.Row
	}{
		{"lr 1e30 throughout", rowsOf(2, 20, falling, constant(1e30), constant(5000))},
		{"lr 0 throughout", rowsOf(1, 20, falling, constant(0), constant(5000))},
		{"lr -1e-300", rowsOf(1, 5, falling, constant(-1e-300), constant(1))},
		{"one row", rowsOf(1, 1, constant(2.3), constant(0.01), constant(5000))},
		{"every loss NaN", rowsOf(2, 10, constant(nan), constant(0.01), constant(5000))},
		{"every value NaN", rowsOf(1, 3, constant(nan), constant(nan), constant(nan))},
		{"alternate NaN", rowsOf(2, 9, func(r, s int) float64 {
			if (s+r)%2 == 0 {
				return nan
			}
			return 1
		}, constant(0.01), constant(5000))},
		{"infinities", rowsOf(1, 6, func(_, s int) float64 { return []float64{1, math.Inf(1), 2, math.Inf(-1), 3, 4}[s-1] }, constant(0.01), constant(5000))},
		{"extremes", rowsOf(1, 4, func(_, s int) float64 { return []float64{-big, big, 0, big}[s-1] }, constant(big), constant(-big))},
		{"tiny spread", rowsOf(1, 4, func(_, s int) float64 { return 1e30 + float64(s)*1e16 }, constant(1e-310), constant(7))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "p.png")
			done := make(chan error, 1)
			go func() { done <- plotMetrics(tc.rows, out, 400, 400) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("plotMetrics: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("plotMetrics still drawing after 30s")
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := png.Decode(f); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
		})
	}
}

// A panel counts its non-finite steps in its title; a learning rate of
// 1e30 throughout gets an axis around 1e30, ticks labelled apart; the
// throughput of tokens says so.
func TestPlotPanels(t *testing.T) {
	rows := rowsOf(2, 6, func(r, s int) float64 {
		if s >= 4 {
			return math.NaN()
		}
		return 1
	}, constant(1e30), constant(100))
	byRank := map[int][]event.Row{}
	for _, r := range rows {
		byRank[r.Rank] = append(byRank[r.Rank], r)
	}
	p, err := drawPanel(panel{"Loss", "loss", func(r event.Row) float64 { return r.Loss }}, []int{0, 1}, byRank, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Title.Text != "Loss (3 steps NaN or infinite: ×)" {
		t.Errorf("title %q", p.Title.Text)
	}
	p, err = drawPanel(panel{"Learning rate", "lr", func(r event.Row) float64 { return r.LR }}, []int{0, 1}, byRank, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Title.Text != "Learning rate" || p.Y.Min != 0.9e30 || p.Y.Max != 1.1e30 {
		t.Errorf("title %q, y from %v to %v: want 9e29 to 1.1e30", p.Title.Text, p.Y.Min, p.Y.Max)
	}
	var labels []string
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if !labelsDistinct(p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max)) || len(labels) < 2 {
		t.Errorf("tick labels %q: want two or more, all different", labels)
	}
	if got := nonFiniteNote(1, true); got != " (1 row NaN or infinite: ×)" {
		t.Errorf("nonFiniteNote(1, rows) = %q", got)
	}
}

// The throughput panel of a token-based job is in tokens/s; an empty or
// blank metrics file is one line of error.
func TestPlotTokensAndEmpty(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "m.png")
	var b strings.Builder
	for step := 1; step <= 3; step++ {
		fmt.Fprintf(&b, `{"rank":0,"epoch":1,"step":%d,"steps":1,"loss":null,"lr":1e30,"samples":512,"unit":"tokens","samples_per_s":9000}`+"\n", step)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readMetricsFile(in)
	if err != nil || len(rows) != 3 || !math.IsNaN(rows[0].Loss) || rows[0].Unit != "tokens" {
		t.Fatalf("readMetricsFile: %+v, %v; want 3 token rows with a NaN loss", rows, err)
	}
	if all, _, code := runGotrain(t, 60*time.Second, "plot", in, "-o", out); code != 0 {
		t.Fatalf("plot: exit %d: %s", code, all)
	}
	for _, content := range []string{"", "\n\n"} {
		empty := filepath.Join(dir, "empty.jsonl")
		if err := os.WriteFile(empty, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		all, _, code := runGotrain(t, 30*time.Second, "plot", empty, "-o", out)
		if code == 0 || strings.TrimSpace(all) != "gotrain: plot: "+empty+" holds no metrics rows" {
			t.Errorf("plot of %q: exit %d, %q", content, code, all)
		}
	}
}
