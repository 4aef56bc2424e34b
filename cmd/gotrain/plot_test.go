package main

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlot draws a metrics file of two ranks into a PNG of the size asked.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "loss.png")
	var b strings.Builder
	for step := 1; step <= 50; step++ {
		for rank := range 2 {
			fmt.Fprintf(&b, `{"rank":%d,"epoch":1,"step":%d,"steps":1,"loss":%g,"lr":0.01,"samples":64,"samples_per_s":%d,"step_ms":5}`+"\n",
				rank, step, 2.3/float64(step), 12000+100*rank)
		}
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	all, _, code := runGotrain(t, 60*time.Second, "plot", in, "-o", out, "--width", "640", "--height", "720")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, all)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", out, err)
	}
	if bd := img.Bounds(); bd.Dx() != 640 || bd.Dy() != 720 {
		t.Fatalf("PNG is %dx%d, want 640x720", bd.Dx(), bd.Dy())
	}
	// Something is drawn: pixels of rank 0's blue and rank 1's red
	// lines (anti-aliased, so only roughly those colours).
	blue, red := 0, 0
	for y := 0; y < 720; y++ {
		for x := 0; x < 640; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			switch {
			case bl > 140 && r < 110 && g < 160:
				blue++
			case r > 160 && g < 110 && bl < 110:
				red++
			}
		}
	}
	if blue < 100 || red < 100 {
		t.Fatalf("%d blue and %d red pixels: the ranks' lines are not drawn", blue, red)
	}
}

// TestPlotErrors are one line naming what is wrong.
func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"step\":1}\nnot json\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plot", bad}, "--output: the PNG file to write (-o FILE.png) is required"},
		{[]string{"plot", bad, "-o", filepath.Join(dir, "x.jpg")}, "must name a .png file"},
		{[]string{"plot", bad, "-o", filepath.Join(dir, "x.png")}, bad + " line 2 is not a metrics row"},
		{[]string{"plot", filepath.Join(dir, "none.jsonl"), "-o", filepath.Join(dir, "x.png")}, "no such file"},
		{[]string{"plot", bad, "-o", filepath.Join(dir, "x.png"), "--width", "5"}, "--width 5: must be in [100, 10000]"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code == 0 || !strings.Contains(all, tc.want) || strings.Count(strings.TrimSpace(all), "\n") > 0 {
			t.Errorf("gotrain %s: exit %d, %q; want one line with %q", strings.Join(tc.args, " "), code, all, tc.want)
		}
	}
}
