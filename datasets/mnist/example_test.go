package mnist_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/datasets/mnist"
)

// Each of 2 ranks loads the shipped test split and iterates over its half
// in batches of 64, as a DDP worker does.
func Example() {
	test, err := mnist.Embedded(mnist.Test, mnist.Normalize(0.1307, 0.3081))
	if err != nil {
		panic(err)
	}
	const worldSize = 2
	for rank := range worldSize {
		sampler := data.NewDistributedSampler(test.Len(), worldSize, rank, data.Seed(1))
		loader := data.NewLoader(test, 64, sampler)
		sampler.SetEpoch(0)
		batches, examples := 0, 0
		for b := range loader.Batches() {
			if batches == 0 {
				fmt.Printf("rank %d: first batch X %v, %d labels\n", rank, b.X.Shape(), len(b.Y))
			}
			batches++
			examples += len(b.Y)
		}
		fmt.Printf("rank %d: %d batches (Len %d), %d examples\n", rank, batches, loader.Len(), examples)
	}
	// Output:
	// rank 0: first batch X [64 1 28 28], 64 labels
	// rank 0: 79 batches (Len 79), 5000 examples
	// rank 1: first batch X [64 1 28 28], 64 labels
	// rank 1: 79 batches (Len 79), 5000 examples
}

// Load reads the IDX files from a directory, for example one filled by
// Download or by torchvision.
func ExampleLoad() {
	_, err := mnist.Load(filepath.Join("nonexistent", "mnist"), mnist.Train)
	fmt.Println("missing:", errors.Is(err, fs.ErrNotExist))
	// Output:
	// missing: true
}
