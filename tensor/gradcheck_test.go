package tensor

import (
	"fmt"
	"math"
	"testing"
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
