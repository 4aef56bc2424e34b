package fsdp

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gotrain/gotrain/distributed"
)

// held is the number of float32 values the pool keeps.
func (b *buffers) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for size, l := range b.free {
		n += size * len(l)
	}
	return n
}

// TestBufferPoolBounded: after the first steps, the buffers a step takes
// from the pool are the ones it gives back, under every strategy: the
// pool does not grow step after step (a full gradient put back without
// being taken out would add a model's gradients per step), and under
// ShardOptimizer and ShardGradOp the gradients of the next step come from
// it, so that it holds at least one step's gradient memory between steps.
func TestBufferPoolBounded(t *testing.T) {
	for _, s := range []ShardingStrategy{ShardOptimizer, ShardGradOp, FullShard, HybridShard} {
		t.Run(s.String(), func(t *testing.T) {
			runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
				opts := []Option{Strategy(s)}
				if s == HybridShard {
					opts = append(opts, Nodes([][]int{{0}, {1}}))
				}
				fm, err := New(ctx, gptWorkload().build(), g, opts...)
				if err != nil {
					return err
				}
				defer fm.Close()
				if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 2); err != nil {
					return err
				}
				after2 := fm.bufs.held()
				if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 5); err != nil {
					return err
				}
				if after7 := fm.bufs.held(); after7 != after2 {
					return fmt.Errorf("the buffer pool holds %d values after 2 steps and %d after 7", after2, after7)
				}
				grads := 0
				for _, p := range fm.params {
					grads += p.numel
					if p.pooledGrad || p.t.Grad() != nil {
						return fmt.Errorf("%s still holds its full gradient after the step", p.name)
					}
				}
				if (s == ShardOptimizer || s == ShardGradOp) && after2 < grads {
					return fmt.Errorf("the buffer pool holds %d values between steps, less than the %d of the full gradients it lends", after2, grads)
				}
				return nil
			})
		})
	}
}

// TestCollectiveTransportsMatchDDP: the parameters' gathers and the
// gradients' reduce-scatters go through the shared-memory allreduce when
// the group has one (a gather sums blocks that are zero but for each
// rank's own, a reduce-scatter keeps this rank's block) and through the
// sockets' all-gather and reduce-scatter otherwise
// (GOTRAIN_ALLREDUCE_ALGO=ring): both train as DDP does, at an uneven
// world.
func TestCollectiveTransportsMatchDDP(t *testing.T) {
	for _, tc := range []struct {
		algo string
		shm  bool
	}{{"", true}, {"ring", false}} {
		t.Run(fmt.Sprintf("shm=%v", tc.shm), func(t *testing.T) {
			t.Setenv("GOTRAIN_ALLREDUCE_ALGO", tc.algo)
			var shm atomic.Bool
			runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
				shm.Store(g.SharedMemory())
				return nil
			})
			switch {
			case tc.shm && !shm.Load():
				t.Skip("no shared-memory arena on this machine (see the group's warning)")
			case !tc.shm && shm.Load():
				t.Fatalf("GOTRAIN_ALLREDUCE_ALGO=%s: the group still reduces through shared memory", tc.algo)
			}
			exactness(t, 3, gptWorkload(), 8, []ShardingStrategy{ShardOptimizer, ShardGradOp, FullShard})
		})
	}
}
