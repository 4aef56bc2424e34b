package distributed_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/distributed"
)

// A one-rank group through the file store: the same code runs unchanged
// on N ranks, each with its own Rank (or under torchrun / gotrain run
// with the zero Config, which reads RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT).
func Example() {
	dir, _ := os.MkdirTemp("", "gotrain-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	g, err := distributed.Init(ctx, distributed.Config{
		InitMethod: "file://" + filepath.Join(dir, "store"),
		Rank:       0,
		WorldSize:  1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Destroy()

	grad := []float32{1, 2, 3}
	if err := g.AllReduce(ctx, grad, distributed.Avg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("rank", g.Rank(), "of", g.Size(), "averaged:", grad)
	// Output: rank 0 of 1 averaged: [1 2 3]
}
