package tensor

import (
	"fmt"
	"testing"
)

// TestBatchNormChannelBlocks checks that the passes over channel blocks
// (image by image within a block) give bit for bit the results of one
// channel at a time, whatever the block size and the thread count: the
// output, running statistics and every gradient of the fused op and of
// BatchNorm, for short rows (ResNet's 4×4 and 8×8 planes), channel counts
// that blocks do not divide, batch 1 and [N, C] inputs.
func TestBatchNormChannelBlocks(t *testing.T) {
	defer func(f func(batchNormGeom, int) int) { bnChannelBlock = f }(bnChannelBlock)
	shapes := [][]int{{6, 37, 4, 4}, {1, 19, 8, 8}, {3, 160, 17, 19}, {7, 21}, {2, 5, 3, 3}}
	for _, shape := range shapes {
		for _, training := range []bool{true, false} {
			for _, fused := range []bool{true, false} {
				bnChannelBlock = func(batchNormGeom, int) int { return 1 }
				want := runBNReLU(t, shape, 9, training, fused, fused, true, 1)
				for _, cb := range []int{3, 16, 1 << 20} {
					for _, threads := range []int{1, 3} {
						bnChannelBlock = func(bn batchNormGeom, _ int) int { return min(cb, bn.c) }
						got := runBNReLU(t, shape, 9, training, fused, fused, true, threads)
						if d := diffBNReLU(want, got); d != "" {
							t.Errorf("%s: %s differs from one channel at a time",
								fmt.Sprintf("%v/training=%v/fused=%v/block=%d/threads=%d", shape, training, fused, cb, threads), d)
						}
					}
				}
			}
		}
	}
}
