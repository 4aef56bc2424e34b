package progress_test

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/progress"
)

// A NaN loss shows: the bar's mean and the epoch's line say NaN rather
// than leave the step out, and the epoch's NaN training loss is kept.
func TestNaNLossShown(t *testing.T) {
	t.Setenv(event.EnvFD, "")
	os.Unsetenv(event.EnvFD)
	for _, done := range []progress.Field{progress.Loss(math.NaN()), progress.Metric("test_acc", 0.1)} {
		var out bytes.Buffer
		rep := progress.FromEnv(progress.Output(&out), progress.Rank(0))
		bar := rep.Epoch(0, 1, 3)
		for _, l := range []float64{2.3, math.NaN(), 2.1} {
			bar.Step(64, progress.Loss(l))
		}
		bar.Done(done)
		rep.Close()
		if !strings.HasPrefix(out.String(), "epoch 1/1: 3 steps train_loss NaN ") {
			t.Errorf("Done(%v): output %q: want the epoch's loss NaN", done, out.String())
		}
	}
}
