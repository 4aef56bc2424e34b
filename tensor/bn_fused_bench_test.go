package tensor

import (
	"fmt"
	"testing"
)

// BenchmarkBatchNormReLU times a training step's BatchNorm, residual
// addition and ReLU, forward and backward, fused (BatchNormReLU) and as
// the separate ops, on ResNet-18's CIFAR shapes at batch 128 and a tiny
// shape that checks the benchmark itself. GOTRAIN_NUM_THREADS sets the
// threads.
func BenchmarkBatchNormReLU(b *testing.B) {
	shapes := [][]int{{2, 3, 4, 4}, {128, 64, 32, 32}, {128, 128, 16, 16}, {128, 256, 8, 8}, {128, 512, 4, 4}}
	for _, shape := range shapes {
		name := fmt.Sprintf("%dx%dx%dx%d", shape[0], shape[1], shape[2], shape[3])
		if shape[0] == 2 {
			name = "tiny"
		}
		for _, fused := range []bool{true, false} {
			kind := "fused"
			if !fused {
				kind = "separate"
			}
			b.Run(name+"/"+kind, func(b *testing.B) {
				rng := NewRNG(1)
				c := shape[1]
				x := randT(rng, -2, 2, shape...).SetRequiresGrad(true)
				res := randT(rng, -1, 1, shape...).SetRequiresGrad(true)
				w := randT(rng, 0.5, 1.5, c).SetRequiresGrad(true)
				bias := randT(rng, -1, 1, c).SetRequiresGrad(true)
				rm, rv := Zeros(c), Full(1, c)
				gy := randT(rng, -1, 1, shape...)
				b.SetBytes(int64(4 * len(x.data)))
				b.ResetTimer()
				for range b.N {
					xin, rin := Mul(x, Scalar(1)), Mul(res, Scalar(1))
					var y *Tensor
					if fused {
						y = BatchNormReLU(xin, w, bias, rm, rv, rin, true, 0.1, 1e-5)
					} else {
						y = ReLU(Add(BatchNorm(xin, w, bias, rm, rv, true, 0.1, 1e-5), rin))
					}
					if err := Sum(Mul(y, gy), false).Backward(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
