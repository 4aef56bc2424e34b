package metrics_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/metrics"
)

// A loop records its steps; with a process group and a DDP model in the
// Config the rows also hold the exposed allreduce wait and the bytes
// sent to each peer.
func Example() {
	dir, _ := os.MkdirTemp("", "metrics")
	defer os.RemoveAll(dir)
	rec, err := metrics.New(metrics.Config{File: filepath.Join(dir, "metrics.jsonl")})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec.StartEpoch(0)
	for step := 0; step < 3; step++ {
		st := rec.Begin() // the batch is here
		st.Forwarded()    // loss computed
		st.Backwarded()   // gradients reduced
		_ = st.End(64, 2.3-float64(step)/10, 0.01)
	}
	_ = rec.Close()
	last := rec.Last()
	fmt.Printf("step %d epoch %d loss %.1f samples %d\n", last.Step, last.Epoch, last.Loss, last.Samples)
	// Output: step 3 epoch 1 loss 2.1 samples 64
}
