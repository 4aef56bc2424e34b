package gptjob_test

import (
	"context"
	"fmt"
	"io"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/jobs/gptjob"
)

// A small GPT trained for 30 steps on the shipped Go corpus, in this
// process: the validation loss falls from ln 256 = 5.55.
func ExampleRun() {
	res, err := gptjob.Run(context.Background(), gptjob.Config{
		NLayer: 1, NHead: 2, NEmbd: 16, BlockSize: 16, BatchSize: 8, MaxSteps: 30, WarmupSteps: new(0), LR: 1e-2,
		EvalEvery: 30, EvalBatches: 2, Sample: 20,
		Config: harness.Config{Out: io.Discard},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("steps:", res.Steps, "world:", res.World)
	fmt.Println("val_loss below 4.5:", res.ValLoss < 4.5)
	fmt.Println("sampled bytes:", len(res.Sample))
	// Output:
	// steps: 30 world: 1
	// val_loss below 4.5: true
	// sampled bytes: 20
}
