package distributed

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAllReduce measures 2-rank float32 allreduce with both ranks in
// this process (over loopback and the shared-memory ring). For the
// numbers to compare with gloo, use `gotrain bench allreduce`, which runs
// one process per rank.
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			groups := make([]*Group, 2)
			runGroupKeep(b, 2, groups)
			bufs := [][]float32{make([]float32, size/4), make([]float32, size/4)}
			b.SetBytes(int64(size))
			b.ResetTimer()
			var wg sync.WaitGroup
			for r, g := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						if err := g.AllReduce(context.Background(), bufs[r], Sum); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// runGroupKeep initialises n ranks in this process and leaves them in
// groups, destroyed when the benchmark ends.
func runGroupKeep(b *testing.B, n int, groups []*Group) {
	addr := startStore(b)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := Init(context.Background(), Config{InitMethod: "tcp://" + addr, Rank: r, WorldSize: n,
				Token: testToken, JobID: b.Name(), AgentStore: true})
			if err != nil {
				b.Error(err)
				return
			}
			groups[r] = g
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Cleanup(func() {
		for _, g := range groups {
			g.Destroy()
		}
	})
}
