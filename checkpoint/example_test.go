package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
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

// Write tensors and metadata in the safetensors format and read them back.
func ExampleWriteTensors() {
	var buf bytes.Buffer
	err := checkpoint.WriteTensors(&buf, []checkpoint.Entry{
		{Name: "w", Tensor: tensor.New([]float32{1, 2, 3, 4}, 2, 2)},
		{Name: "steps", DType: checkpoint.I64, Tensor: tensor.Scalar(10)},
	}, map[string]string{"note": "hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	entries, meta, err := checkpoint.ReadTensors(buf.Bytes())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.DType, e.Tensor.Shape(), e.Tensor.Data())
	}
	fmt.Println(meta["note"])

	// A damaged file is an error, never a panic or a huge allocation.
	_, _, err = checkpoint.ReadTensors(buf.Bytes()[:buf.Len()-1])
	fmt.Println(errors.Is(err, checkpoint.ErrCorrupt))
	// Output:
	// steps I64 [] [10]
	// w F32 [2 2] [1 2 3 4]
	// hello
	// true
}

// *distributed.Group is a checkpoint.Group.
var _ checkpoint.Group = (*distributed.Group)(nil)

// Resume every rank of a job from rank 0's checkpoint, whether or not the
// ranks share a file system: rank 0 saves, and after a restart every rank
// carries on from what rank 0 saved.
func ExampleResumeFrom() {
	ctx := context.Background()
	pg, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pg.Destroy()

	model := nn.Sequential(nn.Linear(4, 2))
	opt := optim.NewSGD(nn.Parameters(model), 0.1)
	var extra struct{ Epochs int }
	st := checkpoint.TrainingState{Model: model, Optimizer: opt, Extra: &extra}
	resumed, err := checkpoint.ResumeFrom(ctx, pg, "run/ckpt.safetensors", &st)
	if err != nil {
		fmt.Println(err) // the same failure on every rank
		return
	}
	if resumed {
		fmt.Println("resuming at step", st.Step)
	}
	// ... train, and on rank 0 checkpoint.SaveTraining("run/ckpt.safetensors", st) ...
}
