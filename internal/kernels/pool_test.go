package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveMaxPool2x2 is the reference loop of MaxPool2x2's doc comment,
// written independently of the kernels.
func naiveMaxPool2x2(src []float32, planes, h, w int) ([]float32, []int32) {
	oh, ow := h/2, w/2
	dst := make([]float32, planes*oh*ow)
	arg := make([]int32, planes*oh*ow)
	for p := 0; p < planes; p++ {
		for y := 0; y < oh; y++ {
			for x := 0; x < ow; x++ {
				idx := []int{2*y*w + 2*x, 2*y*w + 2*x + 1, (2*y+1)*w + 2*x, (2*y+1)*w + 2*x + 1}
				best, bi := src[p*h*w+idx[0]], idx[0]
				for _, i := range idx[1:] {
					if v := src[p*h*w+i]; v > best || (math.IsNaN(float64(v)) && !math.IsNaN(float64(best))) {
						best, bi = v, i
					}
				}
				dst[(p*oh+y)*ow+x], arg[(p*oh+y)*ow+x] = best, int32(bi)
			}
		}
	}
	return dst, arg
}

// poolFill fills x with small integers (so windows often tie) salted with
// NaN, ±Inf and ±0.
func poolFill(r *rand.Rand, x []float32) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
	for i := range x {
		if r.IntN(10) == 0 {
			x[i] = specials[r.IntN(len(specials))]
		} else {
			x[i] = float32(r.IntN(5) - 2)
		}
	}
}

func TestMaxPool2x2(t *testing.T) {
	defer func(v *vecImpl) { vec = v }(vec)
	r := rand.New(rand.NewPCG(3, 4))
	for _, impl := range vecImpls() {
		vec = impl
		for _, h := range []int{0, 1, 2, 3, 5, 24, 26} {
			for _, w := range []int{1, 2, 3, 4, 7, 24, 31, 32, 33, 34, 65, 70} {
				planes := 1 + r.IntN(3)
				oh, ow := h/2, w/2
				src := make([]float32, planes*h*w)
				poolFill(r, src)
				want, wantArg := naiveMaxPool2x2(src, planes, h, w)
				// Guard elements after the outputs must stay untouched.
				dst := make([]float32, len(want)+3)
				arg := make([]int32, len(want)+3)
				for i := range dst {
					dst[i], arg[i] = 7, 7
				}
				MaxPool2x2(src, dst, arg, planes, h, w)
				for i := range want {
					if !sameBits(dst[i], want[i]) || arg[i] != wantArg[i] {
						t.Fatalf("%s %d planes %dx%d: output %d = %v at %d, want %v at %d", impl.name, planes, h, w, i, dst[i], arg[i], want[i], wantArg[i])
					}
				}
				for i := len(want); i < len(dst); i++ {
					if dst[i] != 7 || arg[i] != 7 {
						t.Fatalf("%s %d planes %dx%d: guard %d overwritten", impl.name, planes, h, w, i)
					}
				}

				// Backward: the gradient lands on the chosen elements, the
				// rest of gx (including a guard plane row) is unchanged.
				grad := make([]float32, planes*oh*ow)
				for i := range grad {
					grad[i] = float32(r.NormFloat64())
				}
				gx := make([]float32, planes*h*w+5)
				for i := range gx {
					gx[i] = float32(r.IntN(3))
				}
				wantGx := append([]float32(nil), gx...)
				for j, i := range wantArg {
					p := j / max(oh*ow, 1)
					wantGx[p*h*w+int(i)] += grad[j]
				}
				MaxPool2x2Backward(gx, grad, wantArg, planes, h, w, true)
				for i := range gx {
					if gx[i] != wantGx[i] {
						t.Fatalf("%s backward %d planes %dx%d: gx[%d] = %v, want %v", impl.name, planes, h, w, i, gx[i], wantGx[i])
					}
				}

				// Overwriting: gx's old contents (NaN here) must not leak
				// into the planes; the guard after them stays.
				for i := range gx {
					gx[i] = float32(math.NaN())
				}
				clear(wantGx[:planes*h*w])
				for j, i := range wantArg {
					p := j / max(oh*ow, 1)
					wantGx[p*h*w+int(i)] += grad[j]
				}
				MaxPool2x2Backward(gx, grad, wantArg, planes, h, w, false)
				for i := range planes * h * w {
					if gx[i] != wantGx[i] {
						t.Fatalf("%s backward (set) %d planes %dx%d: gx[%d] = %v, want %v", impl.name, planes, h, w, i, gx[i], wantGx[i])
					}
				}
				for i := planes * h * w; i < len(gx); i++ {
					if gx[i] == gx[i] {
						t.Fatalf("%s backward (set) %d planes %dx%d: guard %d overwritten", impl.name, planes, h, w, i)
					}
				}
			}
		}
	}
}

func TestMaxPool2x2ShortBuffers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MaxPool2x2 with a short dst did not panic")
		}
	}()
	MaxPool2x2(make([]float32, 16), make([]float32, 3), make([]int32, 4), 1, 4, 4)
}

func BenchmarkMaxPool2x2(b *testing.B) {
	const planes, h, w = 64 * 64, 24, 24
	src := make([]float32, planes*h*w)
	poolFill(rand.New(rand.NewPCG(1, 2)), src)
	dst := make([]float32, planes*h*w/4)
	arg := make([]int32, len(dst))
	gx := make([]float32, len(src))
	for _, impl := range vecImpls() {
		b.Run(impl.name, func(b *testing.B) {
			defer func(v *vecImpl) { vec = v }(vec)
			vec = impl
			for b.Loop() {
				MaxPool2x2(src, dst, arg, planes, h, w)
				MaxPool2x2Backward(gx, dst, arg, planes, h, w, false)
			}
		})
	}
}
