package checkpoint_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

// Save a model as safetensors and load it into a fresh one.
func ExampleSave() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	model := nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10))
	if err := checkpoint.Save(path, model); err != nil {
		fmt.Println(err)
		return
	}
	fresh := nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10))
	if err := checkpoint.Load(path, fresh); err != nil {
		fmt.Println(err)
		return
	}
	entries, _, _ := checkpoint.ReadTensorsFile(path)
	for _, e := range entries {
		fmt.Println(e.Name, e.DType, e.Tensor.Shape())
	}

	// A model of another shape is refused with the keys that differ.
	other := nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
	err := checkpoint.Load(path, other)
	fmt.Println(errors.Is(err, nn.ErrStateDict))
	// Output:
	// 1.bias F32 [16]
	// 1.weight F32 [16 784]
	// 3.bias F32 [10]
	// 3.weight F32 [10 16]
	// true
}

// Checkpoint a training run every epoch and resume it after a restart: the
// pattern of a worker under `gotrain run --max-restarts`.
func ExampleSaveTraining() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ckpt.safetensors")

	type progress struct{ SamplerEpoch int }
	for attempt := 0; attempt < 2; attempt++ {
		model := nn.Sequential(nn.Linear(4, 2))
		opt := optim.NewSGD(nn.Parameters(model), 0.1, optim.Momentum(0.9))
		sched := optim.NewStepLR(opt, 1, 0.5)
		var extra progress
		st := checkpoint.TrainingState{Model: model, Optimizer: opt, Scheduler: sched, Extra: &extra}
		err := checkpoint.LoadTraining(path, &st)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Println("fresh start")
		case err != nil:
			fmt.Println(err)
			return
		default:
			fmt.Printf("resumed after epoch %d, lr %g, sampler epoch %d\n", st.Epoch, opt.LR(), extra.SamplerEpoch)
		}
		for epoch := st.Epoch; epoch < 3; epoch++ {
			// ... train one epoch ...
			sched.Step()
			st.Epoch, extra.SamplerEpoch = epoch+1, epoch+1
			if err := checkpoint.SaveTraining(path, st); err != nil {
				fmt.Println(err)
				return
			}
			if attempt == 0 && epoch == 1 {
				break // the worker "crashes" after saving epoch 2
			}
		}
	}
	// Output:
	// fresh start
	// resumed after epoch 2, lr 0.025, sampler epoch 2
}
