package tensor

import (
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// gradCheckOpts tunes a finite-difference check.
type gradCheckOpts struct {
	eps  float64 // step of the central difference
	rtol float64 // relative tolerance per element
	atol float64 // absolute tolerance per element, scaled by the gradient's norm
}

var defaultGC = gradCheckOpts{eps: 1e-2, rtol: 2e-3, atol: 2e-3}

// gradCheck compares the autograd gradients of f with respect to inputs with
// central finite differences. f must be deterministic and build its output
// from the inputs. The scalar under test is L = Σ wᵢ·f()ᵢ with fixed random
// weights w, accumulated in float64, so every output element matters and
// gradients of symmetric outputs do not cancel.
func gradCheck(t *testing.T, name string, opts gradCheckOpts, f func() *Tensor, inputs ...*Tensor) {
	t.Helper()
	for _, in := range inputs {
		in.SetRequiresGrad(true)
		in.SetGrad(nil)
	}
	out := f()
	rng := NewRNG(99)
	w := Zeros(out.shape...)
	rng.FillUniform(w, -1, 1)
	proj := func() float64 {
		var o *Tensor
		NoGrad(func() { o = f() })
		var s float64
		for i, v := range o.data {
			s += float64(w.data[i]) * float64(v)
		}
		return s
	}
	if err := out.BackwardWith(w); err != nil {
		t.Fatalf("%s: Backward: %v", name, err)
	}
	for k, in := range inputs {
		got := in.Grad()
		if got == nil {
			t.Fatalf("%s: input %d %v got no gradient", name, k, in.shape)
		}
		fd := make([]float64, len(in.data))
		var norm float64
		for j := range in.data {
			orig := in.data[j]
			in.data[j] = orig + float32(opts.eps)
			hi := float64(in.data[j])
			lp := proj()
			in.data[j] = orig - float32(opts.eps)
			lo := float64(in.data[j])
			lm := proj()
			in.data[j] = orig
			fd[j] = (lp - lm) / (hi - lo) // the actual float32 step
			norm = math.Max(norm, math.Abs(fd[j]))
		}
		bad := 0
		for j, want := range fd {
			g := float64(got.data[j])
			if math.Abs(g-want) > opts.atol*math.Max(norm, 1e-3)+opts.rtol*math.Abs(want) {
				if bad < 5 {
					t.Errorf("%s: input %d %v: d/dx[%d] autograd %.6g, finite difference %.6g",
						name, k, in.shape, j, g, want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: input %d: %d of %d gradient entries differ", name, k, bad, len(fd))
		}
	}
}

// randT returns a tensor of uniform values in [lo, hi).
func randT(rng *RNG, lo, hi float32, shape ...int) *Tensor {
	x := Zeros(shape...)
	rng.FillUniform(x, lo, hi)
	return x
}

// awayFromZero returns values in ±[0.1, 1) with random sign, so kinks at 0
// lie far outside a finite-difference step.
func awayFromZero(rng *RNG, shape ...int) *Tensor {
	x := Zeros(shape...)
	for i := range x.data {
		v := rng.Uniform(0.1, 1)
		if rng.Bernoulli(0.5) {
			v = -v
		}
		x.data[i] = v
	}
	return x
}

func TestGradElementwise(t *testing.T) {
	rng := NewRNG(1)
	cases := []struct {
		name string
		f    func(a, b *Tensor) *Tensor
		a, b *Tensor
	}{
		{"Add", Add, randT(rng, -1, 1, 2, 3), randT(rng, -1, 1, 2, 3)},
		{"Add/broadcast row", Add, randT(rng, -1, 1, 4, 3), randT(rng, -1, 1, 3)},
		{"Add/broadcast both", Add, randT(rng, -1, 1, 4, 1, 3), randT(rng, -1, 1, 2, 1)},
		{"Add/scalar", Add, randT(rng, -1, 1, 2, 3), randT(rng, -1, 1)},
		{"Sub/broadcast", Sub, randT(rng, -1, 1, 2, 3, 2), randT(rng, -1, 1, 3, 1)},
		{"Mul", Mul, randT(rng, -1, 1, 3, 4), randT(rng, -1, 1, 3, 4)},
		{"Mul/broadcast", Mul, randT(rng, -1, 1, 2, 3, 4), randT(rng, -1, 1, 1, 3, 1)},
		{"Div/broadcast", Div, randT(rng, -1, 1, 3, 4), randT(rng, 0.5, 2, 4)},
		{"Div/0-d", Div, randT(rng, -1, 1, 3), Scalar(1.5)},
	}
	for _, c := range cases {
		gradCheck(t, c.name, defaultGC, func() *Tensor { return c.f(c.a, c.b) }, c.a, c.b)
	}
	unaries := []struct {
		name string
		f    func(*Tensor) *Tensor
		x    *Tensor
	}{
		{"AddScalar", func(x *Tensor) *Tensor { return AddScalar(x, 2.5) }, randT(rng, -1, 1, 5)},
		{"MulScalar", func(x *Tensor) *Tensor { return MulScalar(x, -1.5) }, randT(rng, -1, 1, 5)},
		{"Neg", Neg, randT(rng, -1, 1, 2, 2)},
		{"Exp", Exp, randT(rng, -2, 2, 7)},
		{"Log", Log, randT(rng, 0.5, 3, 7)},
		{"Sqrt", Sqrt, randT(rng, 0.5, 3, 7)},
		{"PowScalar", func(x *Tensor) *Tensor { return PowScalar(x, 3) }, randT(rng, -2, 2, 7)},
		{"PowScalar/frac", func(x *Tensor) *Tensor { return PowScalar(x, -0.5) }, randT(rng, 0.5, 2, 7)},
		{"Tanh", Tanh, randT(rng, -3, 3, 9)},
		{"Sigmoid", Sigmoid, randT(rng, -5, 5, 9)},
		{"ReLU", ReLU, awayFromZero(rng, 3, 5)},
		{"GELU", GELU, randT(rng, -3, 3, 11)},
		{"Clamp", func(x *Tensor) *Tensor { return Clamp(x, -0.5, 0.5) }, awayFromZero(rng, 12)},
	}
	for _, c := range unaries {
		gradCheck(t, c.name, defaultGC, func() *Tensor { return c.f(c.x) }, c.x)
	}
}

func TestGradReductions(t *testing.T) {
	rng := NewRNG(2)
	x := randT(rng, -1, 1, 2, 3, 4)
	for _, dims := range [][]int{nil, {0}, {1}, {2}, {0, 2}, {-1}} {
		for _, keep := range []bool{false, true} {
			name := fmt.Sprintf("dims=%v keep=%v", dims, keep)
			gradCheck(t, "Sum "+name, defaultGC, func() *Tensor { return Sum(x, keep, dims...) }, x)
			gradCheck(t, "Mean "+name, defaultGC, func() *Tensor { return Mean(x, keep, dims...) }, x)
			gradCheck(t, "Var "+name, defaultGC, func() *Tensor { return Var(x, true, keep, dims...) }, x)
		}
	}
	// Distinct values spaced well beyond eps keep the max unique.
	perm := rng.Perm(24)
	m := Zeros(2, 3, 4)
	for i, p := range perm {
		m.data[i] = float32(p) * 0.1
	}
	for dim := 0; dim < 3; dim++ {
		gradCheck(t, fmt.Sprintf("Max dim=%d", dim), defaultGC, func() *Tensor { return Max(m, dim, false) }, m)
	}
	gradCheck(t, "Max keepdim", defaultGC, func() *Tensor { return Max(m, -1, true) }, m)
}

func TestGradShapeOps(t *testing.T) {
	rng := NewRNG(3)
	x := randT(rng, -1, 1, 2, 3, 4)
	y := randT(rng, -1, 1, 2, 2, 4)
	m := randT(rng, -1, 1, 3, 5)
	gradCheck(t, "Transpose", defaultGC, func() *Tensor { return Transpose(m) }, m)
	gradCheck(t, "Permute", defaultGC, func() *Tensor { return Permute(x, 2, 0, 1) }, x)
	gradCheck(t, "Narrow", defaultGC, func() *Tensor { return Narrow(x, 1, 1, 2) }, x)
	gradCheck(t, "Slice", defaultGC, func() *Tensor { return Slice(x, 2, 1, 3) }, x)
	gradCheck(t, "Cat", defaultGC, func() *Tensor { return Cat([]*Tensor{x, y}, 1) }, x, y)
	gradCheck(t, "Flatten", defaultGC, func() *Tensor { return Flatten(x, 1) }, x)
	gradCheck(t, "Reshape", defaultGC, func() *Tensor { return x.Reshape(4, -1) }, x)
	a := randT(rng, -1, 1, 3, 4)
	b := randT(rng, -1, 1, 5, 4)
	gradCheck(t, "MatMul", defaultGC, func() *Tensor { return MatMul(a, b, false, true) }, a, b)
	c := randT(rng, -1, 1, 3, 2)
	gradCheck(t, "MatMul/transA", defaultGC, func() *Tensor { return MatMul(a, c, true, false) }, a, c)
	d := randT(rng, -1, 1, 2, 5)
	gradCheck(t, "MatMul/both", defaultGC, func() *Tensor { return MatMul(b, d, true, true) }, b, d)
}

func TestGradSoftmax(t *testing.T) {
	rng := NewRNG(4)
	x := randT(rng, -2, 2, 2, 3, 4)
	for _, dim := range []int{0, 1, 2, -1} {
		gradCheck(t, fmt.Sprintf("LogSoftmax dim=%d", dim), defaultGC, func() *Tensor { return LogSoftmax(x, dim) }, x)
		gradCheck(t, fmt.Sprintf("Softmax dim=%d", dim), defaultGC, func() *Tensor { return Softmax(x, dim) }, x)
	}
}

func TestGradLinearAndLosses(t *testing.T) {
	rng := NewRNG(5)
	x := randT(rng, -1, 1, 4, 3)
	w := randT(rng, -1, 1, 5, 3)
	b := randT(rng, -1, 1, 5)
	gradCheck(t, "Linear", defaultGC, func() *Tensor { return Linear(x, w, b) }, x, w, b)
	gradCheck(t, "Linear/no bias", defaultGC, func() *Tensor { return Linear(x, w, nil) }, x, w)
	x3 := randT(rng, -1, 1, 2, 2, 3)
	gradCheck(t, "Linear/3-d input", defaultGC, func() *Tensor { return Linear(x3, w, b) }, x3, w, b)

	logits := randT(rng, -3, 3, 6, 4)
	target := []int{0, 3, 1, 1, 2, 3}
	for _, red := range []string{"mean", "sum"} {
		gradCheck(t, "CrossEntropy "+red, defaultGC, func() *Tensor { return CrossEntropy(logits, target, red) }, logits)
		gradCheck(t, "NLLLoss "+red, defaultGC, func() *Tensor { return NLLLoss(LogSoftmax(logits, 1), target, red) }, logits)
		p, q := randT(rng, -1, 1, 3, 4), randT(rng, -1, 1, 3, 4)
		gradCheck(t, "MSELoss "+red, defaultGC, func() *Tensor { return MSELoss(p, q, red) }, p, q)
	}
}

func TestGradConv2d(t *testing.T) {
	rng := NewRNG(6)
	cases := []struct {
		name            string
		x, w            []int
		stride, padding [2]int
		bias            bool
	}{
		{"3x3", []int{2, 2, 5, 5}, []int{3, 2, 3, 3}, [2]int{1, 1}, [2]int{0, 0}, true},
		{"stride 2 pad 1", []int{2, 3, 6, 5}, []int{2, 3, 3, 3}, [2]int{2, 2}, [2]int{1, 1}, true},
		{"asymmetric", []int{1, 2, 7, 6}, []int{2, 2, 3, 2}, [2]int{2, 1}, [2]int{1, 0}, false},
		{"1x1", []int{2, 3, 3, 4}, []int{4, 3, 1, 1}, [2]int{1, 1}, [2]int{0, 0}, true},
	}
	for _, c := range cases {
		x := randT(rng, -1, 1, c.x...)
		w := randT(rng, -1, 1, c.w...)
		var b *Tensor
		ins := []*Tensor{x, w}
		if c.bias {
			b = randT(rng, -1, 1, c.w[0])
			ins = append(ins, b)
		}
		gradCheck(t, "Conv2d "+c.name, defaultGC, func() *Tensor { return Conv2d(x, w, b, c.stride, c.padding) }, ins...)
	}
}

// TestGradConv2dParallel runs a batch big enough to use several goroutines
// with per-worker weight gradients.
func TestGradConv2dParallel(t *testing.T) {
	rng := NewRNG(16)
	x := randT(rng, -1, 1, 8, 8, 12, 12)
	w := randT(rng, -1, 1, 16, 8, 3, 3)
	b := randT(rng, -1, 1, 16)
	want := conv2dRef(x, w, b, [2]int{1, 1}, [2]int{1, 1})
	defer kernels.SetNumThreads(kernels.SetNumThreads(3)) // force several workers
	x.SetRequiresGrad(true)
	w.SetRequiresGrad(true)
	b.SetRequiresGrad(true)
	y := Conv2d(x, w, b, [2]int{1, 1}, [2]int{1, 1})
	for i, v := range y.data {
		if math.Abs(float64(v)-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("Conv2d[%d] = %v, float64 reference %v", i, v, want[i])
		}
	}
	if err := Sum(y, false).Backward(); err != nil {
		t.Fatal(err)
	}
	for oc, v := range b.Grad().data {
		if v != 8*12*12 {
			t.Fatalf("db[%d] = %v, want %d outputs", oc, v, 8*12*12)
		}
	}
	// With an all-ones output gradient, dx[n,c,y,x] sums the weights whose
	// tap lands on (y, x) from a valid output position.
	gx := x.Grad().data
	for ci := 0; ci < 8; ci++ {
		for iy := 0; iy < 12; iy++ {
			for ix := 0; ix < 12; ix++ {
				var s float64
				for oc := 0; oc < 16; oc++ {
					for ki := 0; ki < 3; ki++ {
						for kj := 0; kj < 3; kj++ {
							oy, ox := iy-ki+1, ix-kj+1
							if oy >= 0 && oy < 12 && ox >= 0 && ox < 12 {
								s += float64(w.data[((oc*8+ci)*3+ki)*3+kj])
							}
						}
					}
				}
				for n := 0; n < 8; n++ {
					got := float64(gx[((n*8+ci)*12+iy)*12+ix])
					if math.Abs(got-s) > 1e-4*(1+math.Abs(s)) {
						t.Fatalf("dx[%d,%d,%d,%d] = %v, want %v", n, ci, iy, ix, got, s)
					}
				}
			}
		}
	}
	// With an all-ones output gradient, dW[o,c,i,j] is the sum of the input
	// values that tap (i,j) meets over the batch.
	gw := w.Grad().data
	for oc := 0; oc < 16; oc++ {
		for ci := 0; ci < 8; ci++ {
			for ki := 0; ki < 3; ki++ {
				for kj := 0; kj < 3; kj++ {
					var s float64
					for n := 0; n < 8; n++ {
						for oy := 0; oy < 12; oy++ {
							for ox := 0; ox < 12; ox++ {
								iy, ix := oy+ki-1, ox+kj-1
								if iy >= 0 && iy < 12 && ix >= 0 && ix < 12 {
									s += float64(x.data[((n*8+ci)*12+iy)*12+ix])
								}
							}
						}
					}
					got := float64(gw[((oc*8+ci)*3+ki)*3+kj])
					if math.Abs(got-s) > 1e-3*(1+math.Abs(s)) {
						t.Fatalf("dW[%d,%d,%d,%d] = %v, want %v", oc, ci, ki, kj, got, s)
					}
				}
			}
		}
	}
}

// conv2dRef is a direct float64 convolution.
func conv2dRef(x, w, b *Tensor, stride, pad [2]int) []float64 {
	n, c, h, wd := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	o, kh, kw := w.shape[0], w.shape[2], w.shape[3]
	oh := (h+2*pad[0]-kh)/stride[0] + 1
	ow := (wd+2*pad[1]-kw)/stride[1] + 1
	out := make([]float64, n*o*oh*ow)
	for i := 0; i < n; i++ {
		for oc := 0; oc < o; oc++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					var s float64
					if b != nil {
						s = float64(b.data[oc])
					}
					for ci := 0; ci < c; ci++ {
						for ky := 0; ky < kh; ky++ {
							for kx := 0; kx < kw; kx++ {
								iy, ix := oy*stride[0]+ky-pad[0], ox*stride[1]+kx-pad[1]
								if iy < 0 || iy >= h || ix < 0 || ix >= wd {
									continue
								}
								s += float64(x.data[((i*c+ci)*h+iy)*wd+ix]) * float64(w.data[((oc*c+ci)*kh+ky)*kw+kx])
							}
						}
					}
					out[((i*o+oc)*oh+oy)*ow+ox] = s
				}
			}
		}
	}
	return out
}

// distinct returns a tensor whose values are a random permutation of
// multiples of 0.05, so window maxima are unique and far apart.
func distinct(rng *RNG, shape ...int) *Tensor {
	x := Zeros(shape...)
	for i, p := range rng.Perm(len(x.data)) {
		x.data[i] = float32(p)*0.05 - 1
	}
	return x
}

func TestGradPooling(t *testing.T) {
	rng := NewRNG(7)
	cases := []struct {
		name                    string
		kernel, stride, padding [2]int
	}{
		{"2x2", [2]int{2, 2}, [2]int{2, 2}, [2]int{0, 0}},
		{"3x3 s2 p1", [2]int{3, 3}, [2]int{2, 2}, [2]int{1, 1}},
		{"overlap", [2]int{3, 2}, [2]int{1, 2}, [2]int{1, 0}},
	}
	gc := gradCheckOpts{eps: 1e-3, rtol: 2e-3, atol: 2e-3}
	for _, c := range cases {
		x := distinct(rng, 2, 2, 6, 5)
		gradCheck(t, "MaxPool2d "+c.name, gc, func() *Tensor { return MaxPool2d(x, c.kernel, c.stride, c.padding) }, x)
		gradCheck(t, "AvgPool2d "+c.name, defaultGC, func() *Tensor { return AvgPool2d(x, c.kernel, c.stride, c.padding) }, x)
	}
}

func TestGradBatchNorm(t *testing.T) {
	rng := NewRNG(8)
	for _, shape := range [][]int{{5, 3}, {2, 3, 4}, {2, 3, 2, 3}} {
		x := randT(rng, -1, 2, shape...)
		w := randT(rng, 0.5, 1.5, 3)
		b := randT(rng, -1, 1, 3)
		rm, rv := randT(rng, -0.5, 0.5, 3), randT(rng, 0.5, 2, 3)
		name := fmt.Sprint(shape)
		train := func() *Tensor {
			// Fresh running stats each call: training updates them.
			return BatchNorm(x, w, b, rm.Clone(), rv.Clone(), true, 0.1, 1e-5)
		}
		gradCheck(t, "BatchNorm train "+name, defaultGC, train, x, w, b)
		gradCheck(t, "BatchNorm train no affine "+name, defaultGC, func() *Tensor {
			return BatchNorm(x, nil, nil, nil, nil, true, 0.1, 1e-5)
		}, x)
		gradCheck(t, "BatchNorm eval "+name, defaultGC, func() *Tensor {
			return BatchNorm(x, w, b, rm, rv, false, 0.1, 1e-5)
		}, x, w, b)
	}
}

func TestBatchNormRunningStats(t *testing.T) {
	x := New([]float32{1, 10, 3, 20, 5, 30, 7, 40}, 4, 2)
	rm, rv := Zeros(2), Full(1, 2)
	y := BatchNorm(x, nil, nil, rm, rv, true, 0.1, 0)
	// Channel 0: mean 4, biased var 5, unbiased 20/3.
	if got, want := rm.data[0], float32(0.1*4); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("running mean %v, want %v", got, want)
	}
	if got, want := rv.data[0], float32(0.9+0.1*20.0/3); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("running var %v, want %v", got, want)
	}
	if got, want := y.data[0], float32(-3/math.Sqrt(5)); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("normalised %v, want %v", got, want)
	}
	if rm.RequiresGrad() || rm.Grad() != nil {
		t.Error("running stats must not be tracked")
	}
}

func TestGradDropout(t *testing.T) {
	rng := NewRNG(9)
	x := randT(rng, -1, 1, 4, 50)
	// A fresh generator with one seed gives the same mask every call.
	gradCheck(t, "Dropout", defaultGC, func() *Tensor { return Dropout(x, 0.3, true, NewRNG(5)) }, x)
	y := Dropout(x, 0.3, true, NewRNG(5))
	zeros := 0
	for i, v := range y.data {
		switch {
		case v == 0:
			zeros++
		case math.Abs(float64(v-x.data[i]/0.7)) > 1e-6:
			t.Fatalf("kept value %v, want %v/0.7", v, x.data[i])
		}
	}
	if zeros < 30 || zeros > 90 { // 200 draws at p=0.3: mean 60, sd 6.5
		t.Errorf("%d of 200 dropped at p=0.3", zeros)
	}
	if Dropout(x, 0.3, false, rng) != x {
		t.Error("eval Dropout must return its input")
	}
}

// TestGradSmallCNN checks a whole network's parameter gradients end to
// end: composition, views and fused primitives together.
func TestGradSmallCNN(t *testing.T) {
	rng := NewRNG(15)
	x := randT(rng, -1, 1, 3, 1, 8, 8)
	cw, cb := randT(rng, -0.5, 0.5, 4, 1, 3, 3), randT(rng, -0.1, 0.1, 4)
	bw, bb := randT(rng, 0.5, 1.5, 4), randT(rng, -0.1, 0.1, 4)
	lw, lb := randT(rng, -0.3, 0.3, 5, 36), randT(rng, -0.1, 0.1, 5)
	target := []int{1, 4, 0}
	net := func() *Tensor {
		h := Conv2d(x, cw, cb, [2]int{1, 1}, [2]int{0, 0})  // [3,4,6,6]
		h = BatchNorm(h, bw, bb, nil, nil, true, 0.1, 1e-5) // batch statistics
		h = Tanh(h)
		h = AvgPool2d(h, [2]int{2, 2}, [2]int{2, 2}, [2]int{0, 0}) // [3,4,3,3]
		h = Dropout(Flatten(h, 1), 0.2, true, NewRNG(3))
		return CrossEntropy(Linear(h, lw, lb), target, "mean")
	}
	// The conv bias feeds BatchNorm, which removes any per-channel
	// constant: its true gradient is exactly zero, so finite differences
	// there measure only float32 rounding. Check it is (near) zero instead.
	cb.SetRequiresGrad(true)
	gradCheck(t, "small CNN", defaultGC, net, cw, bw, bb, lw, lb)
	for i, g := range cb.Grad().Data() {
		if math.Abs(float64(g)) > 1e-6 {
			t.Errorf("conv bias before BatchNorm: gradient[%d] = %g, want 0", i, g)
		}
	}
}

// TestConv2dWeightGradLayouts checks the weight gradient against a float64
// reference in both of Conv2d's GEMM layouts (dWᵀ = col·gᵀ when O < C·KH·KW,
// dW = g·colᵀ otherwise), on one worker and on several.
func TestConv2dWeightGradLayouts(t *testing.T) {
	// C·KH·KW = 9 < O = 16, and 72 > 16; each batch is big enough for
	// Conv2d to use three workers when allowed.
	for _, sz := range []struct{ c, n, h int }{{1, 24, 28}, {8, 8, 12}} {
		for _, threads := range []int{1, 3} {
			func() {
				defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
				const o = 16
				c, n, h, wd := sz.c, sz.n, sz.h, sz.h
				rng := NewRNG(uint64(17 + c))
				x := randT(rng, -1, 1, n, c, h, wd)
				w := randT(rng, -1, 1, o, c, 3, 3).SetRequiresGrad(true)
				g := randT(rng, -1, 1, n, o, h, wd)
				y := Conv2d(x, w, nil, [2]int{1, 1}, [2]int{1, 1})
				if err := y.BackwardWith(g); err != nil {
					t.Fatal(err)
				}
				for oc := 0; oc < o; oc++ {
					for ci := 0; ci < c; ci++ {
						for ki := 0; ki < 3; ki++ {
							for kj := 0; kj < 3; kj++ {
								var s, mag float64
								for b := 0; b < n; b++ {
									for oy := 0; oy < h; oy++ {
										for ox := 0; ox < wd; ox++ {
											iy, ix := oy+ki-1, ox+kj-1
											if iy >= 0 && iy < h && ix >= 0 && ix < wd {
												v := float64(g.data[((b*o+oc)*h+oy)*wd+ox]) * float64(x.data[((b*c+ci)*h+iy)*wd+ix])
												s += v
												mag += math.Abs(v)
											}
										}
									}
								}
								got := float64(w.Grad().data[((oc*c+ci)*3+ki)*3+kj])
								if math.Abs(got-s) > 1e-5*mag {
									t.Fatalf("C=%d threads=%d: dW[%d,%d,%d,%d] = %v, want %v", c, threads, oc, ci, ki, kj, got, s)
								}
							}
						}
					}
				}
			}()
		}
	}
}
