package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

// poolGeom is the geometry of one 2-d pooling call over [N, C, H, W].
type poolGeom struct {
	planes, h, w   int
	kh, kw         int
	sh, sw, ph, pw int
	oh, ow         int
}

func newPoolGeom(op string, x *Tensor, kernel, stride, padding [2]int) (poolGeom, []int) {
	if x.Dim() != 4 {
		panic(fmt.Sprintf("tensor: %s: input %v is not [N, C, H, W]", op, x.shape))
	}
	if kernel[0] < 1 || kernel[1] < 1 || stride[0] < 1 || stride[1] < 1 {
		panic(fmt.Sprintf("tensor: %s: invalid kernel %v or stride %v", op, kernel, stride))
	}
	if padding[0] < 0 || padding[1] < 0 || 2*padding[0] > kernel[0] || 2*padding[1] > kernel[1] {
		// PyTorch's rule: padding at most half the kernel.
		panic(fmt.Sprintf("tensor: %s: padding %v must be at most half of kernel %v", op, padding, kernel))
	}
	g := poolGeom{
		planes: x.shape[0] * x.shape[1], h: x.shape[2], w: x.shape[3],
		kh: kernel[0], kw: kernel[1], sh: stride[0], sw: stride[1], ph: padding[0], pw: padding[1],
	}
	if g.h+2*g.ph < g.kh || g.w+2*g.pw < g.kw {
		panic(fmt.Sprintf("tensor: %s: kernel %v larger than padded input %v", op, kernel, x.shape))
	}
	g.oh = (g.h+2*g.ph-g.kh)/g.sh + 1
	g.ow = (g.w+2*g.pw-g.kw)/g.sw + 1
	return g, []int{x.shape[0], x.shape[1], g.oh, g.ow}
}

// poolMinItems is the number of input elements per goroutine below which
// pooling stays on one goroutine.
const poolMinItems = 1 << 16

// MaxPool2d takes the maximum over kernel windows moved by stride over x
// [N, C, H, W] padded with −∞. The gradient flows to the first maximum of
// each window (a NaN counts as the maximum, as in PyTorch).
func MaxPool2d(x *Tensor, kernel, stride, padding [2]int) *Tensor {
	g, shape := newPoolGeom("MaxPool2d", x, kernel, stride, padding)
	out := Zeros(shape...)
	inP, outP := g.h*g.w, g.oh*g.ow
	// arg holds, per output, the index of its maximum within the plane.
	arg := make([]int32, len(out.data))
	// 2×2 windows at stride 2 without padding (the CNN's case) have a
	// vector kernel.
	is2x2 := g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0
	parallelFor(g.planes, poolMinItems/max(inP, 1)+1, func(_, lo, hi int) {
		if is2x2 {
			kernels.MaxPool2x2(x.data[lo*inP:hi*inP], out.data[lo*outP:hi*outP], arg[lo*outP:hi*outP], hi-lo, g.h, g.w)
			return
		}
		for pl := lo; pl < hi; pl++ {
			src := x.data[pl*inP : (pl+1)*inP]
			dst := out.data[pl*outP : (pl+1)*outP]
			am := arg[pl*outP : (pl+1)*outP]
			for oy := 0; oy < g.oh; oy++ {
				y0 := oy*g.sh - g.ph
				for ox := 0; ox < g.ow; ox++ {
					x0 := ox*g.sw - g.pw
					best, bi := float32(math.Inf(-1)), int32(-1)
					for ky := max(y0, 0); ky < min(y0+g.kh, g.h); ky++ {
						for kx := max(x0, 0); kx < min(x0+g.kw, g.w); kx++ {
							// NaN wins and stays, as in PyTorch.
							if v := src[ky*g.w+kx]; bi < 0 || (best == best && (v > best || v != v)) {
								best, bi = v, int32(ky*g.w+kx)
							}
						}
					}
					dst[oy*g.ow+ox] = best
					am[oy*g.ow+ox] = bi
				}
			}
		}
	})
	return record(out, "max_pool2d", func(grad []float32) {
		var gx []float32
		fresh := false
		if is2x2 {
			gx, fresh = x.gradDst()
		} else {
			gx = x.accGrad()
		}
		parallelFor(g.planes, poolMinItems/max(inP, 1)+1, func(_, lo, hi int) {
			if is2x2 {
				kernels.MaxPool2x2Backward(gx[lo*inP:hi*inP], grad[lo*outP:hi*outP], arg[lo*outP:hi*outP], hi-lo, g.h, g.w, !fresh)
				return
			}
			for pl := lo; pl < hi; pl++ {
				gp := gx[pl*inP : (pl+1)*inP]
				for j, i := range arg[pl*outP : (pl+1)*outP] {
					gp[i] += grad[pl*outP+j]
				}
			}
		})
	}, x)
}

// AvgPool2d averages kernel windows moved by stride over x [N, C, H, W]
// padded with zeros, dividing by the full window size (PyTorch's default
// count_include_pad=True).
func AvgPool2d(x *Tensor, kernel, stride, padding [2]int) *Tensor {
	g, shape := newPoolGeom("AvgPool2d", x, kernel, stride, padding)
	out := Zeros(shape...)
	inP, outP := g.h*g.w, g.oh*g.ow
	inv := 1 / float32(g.kh*g.kw)
	parallelFor(g.planes, poolMinItems/max(inP, 1)+1, func(_, lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			src := x.data[pl*inP : (pl+1)*inP]
			dst := out.data[pl*outP : (pl+1)*outP]
			for oy := 0; oy < g.oh; oy++ {
				y0 := oy*g.sh - g.ph
				for ox := 0; ox < g.ow; ox++ {
					x0 := ox*g.sw - g.pw
					var s float32
					for ky := max(y0, 0); ky < min(y0+g.kh, g.h); ky++ {
						for kx := max(x0, 0); kx < min(x0+g.kw, g.w); kx++ {
							s += src[ky*g.w+kx]
						}
					}
					dst[oy*g.ow+ox] = s * inv
				}
			}
		}
	})
	return record(out, "avg_pool2d", func(grad []float32) {
		gx := x.accGrad()
		parallelFor(g.planes, poolMinItems/max(inP, 1)+1, func(_, lo, hi int) {
			for pl := lo; pl < hi; pl++ {
				gp := gx[pl*inP : (pl+1)*inP]
				gr := grad[pl*outP : (pl+1)*outP]
				for oy := 0; oy < g.oh; oy++ {
					y0 := oy*g.sh - g.ph
					for ox := 0; ox < g.ow; ox++ {
						x0 := ox*g.sw - g.pw
						v := gr[oy*g.ow+ox] * inv
						for ky := max(y0, 0); ky < min(y0+g.kh, g.h); ky++ {
							for kx := max(x0, 0); kx < min(x0+g.kw, g.w); kx++ {
								gp[ky*g.w+kx] += v
							}
						}
					}
				}
			}
		})
	}, x)
}
