package distributed_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/distributed"
)

// The flight recorder always holds a group's last collectives; a program
// can read it, or dump it where `gotrain trace DIR` reads every rank's.
func ExampleGroup_FlightRecord() {
	dir, _ := os.MkdirTemp("", "gotrain-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "file://" + filepath.Join(dir, "store"), WorldSize: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Destroy()
	_ = g.AllReduce(ctx, []float32{1, 2, 3}, distributed.Sum)
	_ = g.Barrier(ctx)
	for _, r := range g.FlightRecord() {
		fmt.Println(r.Op, "#", r.Seq, r.DType, r.Count, r.State)
	}
	path, err := g.DumpFlightRecorder(dir, "example")
	fmt.Println(filepath.Base(path), err)
	// Output:
	// allreduce # 0 float32 3 completed
	// barrier # 1 none 0 completed
	// flight_rank0.json <nil>
}
