package dist

import (
	"context"
	"fmt"
	"testing"
)

func TestQuickAllReduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		for _, size := range []int{0, 1, 7, 100003} {
			runGroup(t, n, nil, func(ctx context.Context, g *Group) error {
				buf := make([]float32, size)
				for i := range buf {
					buf[i] = float32(g.Rank() + i%7)
				}
				if err := g.AllReduce(ctx, buf, Sum); err != nil {
					return err
				}
				for i := range buf {
					want := float32(n*(n-1)/2 + n*(i%7))
					if buf[i] != want {
						return fmt.Errorf("n=%d size=%d buf[%d]=%v want %v", n, size, i, buf[i], want)
					}
				}
				return g.Barrier(ctx)
			})
		}
	}
}
