package images_test

import (
	"fmt"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/images"
)

// A Folder of the test images, a class per subfolder, augmented as for
// CIFAR and batched by a Loader that decodes on two goroutines.
func Example() {
	train, err := images.NewFolder("testdata/folder",
		images.Transforms(
			images.Resize(8, 8),
			images.RandomCrop(8, 1),
			images.RandomHorizontalFlip(0.5),
			images.ToTensor(),
			images.Normalize([]float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}),
		),
		images.Seed(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(train.Classes(), train.Len(), train.Shape(), train.Cached())
	sampler := data.NewDistributedSampler(train.Len(), 1, 0)
	loader := data.NewLoader(train, 4, sampler, data.Workers(2))
	for epoch := range 2 {
		sampler.SetEpoch(epoch)
		train.SetEpoch(epoch) // the random transforms' epoch
		for b := range loader.Batches() {
			fmt.Println(epoch, b.X.Shape(), len(b.Y))
		}
	}
	// Output:
	// [Cat bird dog] 9 [3 8 8] true
	// 0 [4 3 8 8] 4
	// 0 [4 3 8 8] 4
	// 0 [1 3 8 8] 1
	// 1 [4 3 8 8] 4
	// 1 [4 3 8 8] 4
	// 1 [1 3 8 8] 1
}
