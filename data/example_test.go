package data_test

import (
	"encoding/json"
	"fmt"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/tensor"
)

// Two replicas share a dataset of 10 examples with PyTorch's
// DistributedSampler rules: each gets ceil(10/2) = 5 indices per epoch.
// Shuffling is off here to keep the output readable; with it on (the
// default), SetEpoch changes the order every epoch.
func ExampleDistributedSampler() {
	x := make([]float32, 10*2)
	y := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	ds := data.NewTensorDataset(tensor.New(x, 10, 2), y)

	for rank := range 2 {
		sampler := data.NewDistributedSampler(ds.Len(), 2, rank, data.Shuffle(false))
		loader := data.NewLoader(ds, 2, sampler)
		for epoch := range 2 {
			sampler.SetEpoch(epoch)
			for b := range loader.Batches() {
				fmt.Printf("rank %d epoch %d: X %v Y %v\n", rank, epoch, b.X.Shape(), b.Y)
			}
		}
	}
	// Output:
	// rank 0 epoch 0: X [2 2] Y [0 2]
	// rank 0 epoch 0: X [2 2] Y [4 6]
	// rank 0 epoch 0: X [1 2] Y [8]
	// rank 0 epoch 1: X [2 2] Y [0 2]
	// rank 0 epoch 1: X [2 2] Y [4 6]
	// rank 0 epoch 1: X [1 2] Y [8]
	// rank 1 epoch 0: X [2 2] Y [1 3]
	// rank 1 epoch 0: X [2 2] Y [5 7]
	// rank 1 epoch 0: X [1 2] Y [9]
	// rank 1 epoch 1: X [2 2] Y [1 3]
	// rank 1 epoch 1: X [2 2] Y [5 7]
	// rank 1 epoch 1: X [1 2] Y [9]
}

// A job saves its sampler's position with its checkpoint and, after a
// restart, resumes mid-epoch without repeating the batches it trained on.
func ExampleSamplerState() {
	ds := data.NewTensorDataset(tensor.New(make([]float32, 8), 8, 1), []int{0, 1, 2, 3, 4, 5, 6, 7})
	sampler := data.NewDistributedSampler(ds.Len(), 1, 0, data.Shuffle(false))
	loader := data.NewLoader(ds, 2, sampler)
	for b := range loader.Batches() {
		fmt.Println("before the crash:", b.Y)
		if b.Y[0] == 2 {
			break
		}
	}
	checkpoint, _ := json.Marshal(sampler.State())
	fmt.Println("checkpoint:", string(checkpoint))

	// After the restart: a fresh sampler, restored.
	var st data.SamplerState
	_ = json.Unmarshal(checkpoint, &st)
	sampler = data.NewDistributedSampler(ds.Len(), 1, 0, data.Shuffle(false))
	if err := sampler.Restore(st); err != nil {
		panic(err)
	}
	loader = data.NewLoader(ds, 2, sampler)
	for epoch := st.Epoch; epoch < 1; epoch++ {
		sampler.SetEpoch(epoch)
		for b := range loader.Batches() {
			fmt.Println("after the restart:", b.Y)
		}
	}
	// Output:
	// before the crash: [0 1]
	// before the crash: [2 3]
	// checkpoint: {"epoch":0,"seen":4,"replicas":1}
	// after the restart: [4 5]
	// after the restart: [6 7]
}
