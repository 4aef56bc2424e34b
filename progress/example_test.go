package progress_test

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gotrain/gotrain/progress"
)

// A loop reports each step's loss and, at the epoch's end, its metrics.
// Not under a launcher and writing to a file or pipe (here a buffer),
// the reporter prints plain lines: one every LogEvery (10 s, more than
// this loop takes) and one per epoch. On a terminal it draws a live bar.
func Example() {
	var out strings.Builder
	rep := progress.FromEnv(progress.Output(&out))
	losses := []float64{0.9, 0.5, 0.1} // one epoch of three steps
	for epoch := range 1 {
		bar := rep.Epoch(epoch, 1, len(losses))
		for _, loss := range losses {
			bar.Step(64, progress.Loss(loss)) // a batch of 64 samples
		}
		fmt.Fprintln(rep.Writer(), "evaluating") // printed above a live bar
		bar.Done(progress.Metric("test_acc", 0.9))
	}
	rep.Close()

	// The samples/s and the time taken vary from run to run.
	fmt.Print(regexp.MustCompile(`\d+ samples/s \S+`).ReplaceAllString(out.String(), "… samples/s …"))
	// Output:
	// evaluating
	// epoch 1/1: 3 steps train_loss 0.5000 test_acc 0.9000 … samples/s …
}
