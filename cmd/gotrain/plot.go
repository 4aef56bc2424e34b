package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
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
per rank: the loss, the learning rate and the samples/s over the steps.`,
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

// plotColors tell the ranks apart.
var plotColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}

// plotMetrics draws the three panels into a width×height PNG at out.
func plotMetrics(rows []event.Row, out string, width, height int) error {
	byRank := map[int][]event.Row{}
	for _, r := range rows {
		byRank[r.Rank] = append(byRank[r.Rank], r)
	}
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	panels := []struct {
		title, y string
		value    func(event.Row) float64
	}{
		{"Loss", "loss", func(r event.Row) float64 { return r.Loss }},
		{"Learning rate", "lr", func(r event.Row) float64 { return r.LR }},
		{"Throughput", "samples/s per rank", func(r event.Row) float64 { return r.SamplesPerSec }},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "step"
		p.Y.Label.Text = pn.y
		p.Add(plotter.NewGrid())
		for k, rank := range ranks {
			var pts plotter.XYs
			for _, r := range byRank[rank] {
				if v := pn.value(r); v >= 0 || pn.y != "loss" { // -1: a loss that was not finite
					pts = append(pts, plotter.XY{X: float64(r.Step), Y: v})
				}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plot: rank %d's %s: %w", rank, pn.y, err)
			}
			l.Color = plotColors[k%len(plotColors)]
			l.Width = vg.Points(1)
			p.Add(l)
			if len(ranks) > 1 {
				p.Legend.Add(fmt.Sprintf("rank %d", rank), l)
			}
		}
		p.Legend.Top = true
		plots[i] = []*plot.Plot{p}
	}
	// vgimg draws at 96 dpi here, so that vg lengths are pixels × 72/96.
	const dpi = 96
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
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
