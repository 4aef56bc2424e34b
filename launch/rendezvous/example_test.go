package rendezvous_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gotrain/gotrain/launch/rendezvous"
)

// Two nodes of a job with --nnodes 2:3 meet; the round closes after the
// last call with both, and each gets its node rank. A launcher would now
// start its workers with the round's ranks, call Watch beside them, and
// End or Complete the round when they stop.
func Example() {
	ctx := context.Background()
	b := rendezvous.NewMemBackend() // the c10d store or etcd in a real job
	rounds := make([]rendezvous.Round, 2)
	var wg sync.WaitGroup
	for i, id := range []string{"node-a", "node-b"} {
		r, err := rendezvous.New(ctx, b, rendezvous.Config{
			RunID: "job-1", NodeID: id, Addr: "127.0.0.1",
			MinNodes: 2, MaxNodes: 3, LastCall: 100 * time.Millisecond,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer r.Close()
		wg.Go(func() {
			if rounds[i], err = r.Next(ctx); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("round", rounds[0].Number, "of", rounds[0].NNodes(), "nodes")
	fmt.Println("node ranks", rounds[0].NodeRank+rounds[1].NodeRank == 1 && rounds[0].NodeRank != rounds[1].NodeRank)
	// Output:
	// round 0 of 2 nodes
	// node ranks true
}
