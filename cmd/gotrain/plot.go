package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gotrain/gotrain/event"
)

// newPlotCmd is `gotrain plot FILE.jsonl -o loss.png`.
func newPlotCmd() *cobra.Command {
	var out string
	var width, height int
	cmd := &cobra.Command{
		Use:   "plot FILE.jsonl -o OUT.png",
		Short: "Draw loss, learning rate and throughput over steps from a metrics file, as a PNG",
		Long: `Read a metrics file (written by --metrics) and draw three panels, one line
per rank: the loss, the learning rate and the samples/s (tokens/s for a
token-based job) over the steps. A value that is NaN or infinite (null in
the file) is a gap in its line, marked × on the step axis and counted in
the panel's title.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("plot: want one argument, the metrics file (got %d)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case out == "":
				return flagNeeds("output", "the PNG file to write (-o FILE.png) is required")
			case !strings.EqualFold(filepath.Ext(out), ".png"):
				return badFlag("output", out, "must name a .png file")
			case width < 100 || width > 10000:
				return badFlag("width", width, "must be in [100, 10000] pixels")
			case height < 100 || height > 10000:
				return badFlag("height", height, "must be in [100, 10000] pixels")
			}
			if err := checkSavePath("output", out); err != nil {
				return err
			}
			rows, err := readMetricsFile(args[0])
			if err != nil {
				return err
			}
			return plotMetrics(rows, out, width, height)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the PNG file to write")
	cmd.Flags().IntVar(&width, "width", 1000, "image width in pixels")
	cmd.Flags().IntVar(&height, "height", 900, "image height in pixels")
	return cmd
}

// readMetricsFile reads the rows of a metrics file; a line that is not a
// row is an error naming it.
func readMetricsFile(path string) ([]event.Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	defer f.Close()
	var rows []event.Row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r event.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Step < 1 {
			return nil, fmt.Errorf("plot: %s line %d is not a metrics row (want JSON with step >= 1, as --metrics writes)", path, n)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("plot: reading %s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("plot: %s holds no metrics rows", path)
	}
	return rows, nil
}

// plotColors tell the ranks apart; nonFiniteColor marks the steps whose
// value was NaN or infinite.
var (
	plotColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
		{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}
	nonFiniteColor = color.RGBA{0, 0, 0, 255}
)

// panel is one of the plot's panels: a row's value over the steps.
type panel struct {
	title, y string
	value    func(event.Row) float64
}

// plotMetrics draws the three panels into a width×height PNG at out, a
// legend of the ranks at their right. A value that is not finite is a
// gap in its line and a × on the panel's x axis, counted in its title.
func plotMetrics(rows []event.Row, out string, width, height int) (err error) {
	if len(rows) == 0 {
		return fmt.Errorf("plot: no metrics rows to draw")
	}
	byRank := map[int][]event.Row{}
	unit, multiStep := "samples", false
	for _, r := range rows {
		byRank[r.Rank] = append(byRank[r.Rank], r)
		if r.Unit == "tokens" {
			unit = "tokens"
		}
		multiStep = multiStep || r.Steps > 1
	}
	ranks := slices.Sorted(maps.Keys(byRank))
	panels := []panel{
		{"Loss", "loss", func(r event.Row) float64 { return r.Loss }},
		{"Learning rate", "lr", func(r event.Row) float64 { return r.LR }},
		{"Throughput", unit + "/s per rank", func(r event.Row) float64 { return r.SamplesPerSec }},
	}
	xlo, xhi := stepRange(rows)
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := drawPanel(pn, ranks, byRank, multiStep)
		if err != nil {
			return err
		}
		p.X.Min, p.X.Max = xlo, xhi
		plots[i] = []*plot.Plot{p}
	}
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	if len(ranks) > 1 {
		for k, rank := range ranks {
			legend.Add(fmt.Sprintf("rank %d", rank), &plotter.Line{LineStyle: rankLine(k)})
		}
	}
	// A gonum panic is a bug here (the ranges above are what it
	// needs), but still one line, not a stack.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("plot: drawing %s: %v", out, v)
		}
	}()
	// vgimg draws at 96 dpi here, so that vg lengths are pixels × 72/96.
	const dpi = 96
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	var legendW vg.Length
	if r := legend.Rectangle(dc); r.Max.X > r.Min.X {
		legendW = r.Max.X - r.Min.X + 4*vg.Millimeter
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, draw.Crop(dc, 0, -legendW, 0, 0))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if legendW > 0 {
		legend.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legendW+vg.Millimeter, 0, 0, -2*vg.Millimeter))
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: writing %s: %w", out, err)
	}
	return nil
}

// drawPanel is one panel: a line per rank, broken where the value is not
// finite (a run of one point is a dot), those steps marked × along the
// x axis, and a y axis that fits the finite values.
func drawPanel(pn panel, ranks []int, byRank map[int][]event.Row, multiStep bool) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "step"
	p.Y.Label.Text = pn.y
	p.Y.Tick.Marker = distinctTicks{}
	p.Add(plotter.NewGrid())
	var values []float64
	bad := map[int]bool{} // steps with a value that is not finite
	for k, rank := range ranks {
		var pts plotter.XYs
		for _, r := range byRank[rank] {
			v := pn.value(r)
			pts = append(pts, plotter.XY{X: float64(r.Step), Y: v})
			values = append(values, v)
			if !plotFinite(v) {
				bad[r.Step] = true
			}
		}
		for _, seg := range segments(pts) {
			if len(seg) == 1 {
				dot, err := plotter.NewScatter(seg)
				if err != nil {
					return nil, fmt.Errorf("plot: rank %d's %s: %w", rank, pn.y, err)
				}
				dot.GlyphStyle = draw.GlyphStyle{Color: plotColors[k%len(plotColors)], Radius: vg.Points(1.5), Shape: draw.CircleGlyph{}}
				p.Add(dot)
				continue
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return nil, fmt.Errorf("plot: rank %d's %s: %w", rank, pn.y, err)
			}
			l.LineStyle = rankLine(k)
			p.Add(l)
		}
	}
	lo, hi, _ := axisRange(values)
	if len(bad) > 0 {
		marks := make(plotter.XYs, 0, len(bad))
		for _, step := range slices.Sorted(maps.Keys(bad)) {
			marks = append(marks, plotter.XY{X: float64(step), Y: lo})
		}
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			return nil, fmt.Errorf("plot: the %s's non-finite steps: %w", pn.y, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: nonFiniteColor, Radius: vg.Points(3), Shape: draw.CrossGlyph{}}
		p.Add(sc)
	}
	p.Title.Text = pn.title + nonFiniteNote(len(bad), multiStep)
	// After Add, which widens the axes to the data.
	p.Y.Min, p.Y.Max = lo, hi
	return p, nil
}

// rankLine is the line style of the k-th rank.
func rankLine(k int) draw.LineStyle {
	return draw.LineStyle{Color: plotColors[k%len(plotColors)], Width: vg.Points(1)}
}

// stepRange is the x axis: the rows' first to last step, or a step
// either side of the only one.
func stepRange(rows []event.Row) (lo, hi float64) {
	first, last := rows[0].Step, rows[0].Step
	for _, r := range rows {
		first, last = min(first, r.Step), max(last, r.Step)
	}
	if first == last {
		return float64(first - 1), float64(last + 1)
	}
	return float64(first), float64(last)
}
