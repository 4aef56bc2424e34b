package tensor

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// linearGELURun runs f (forward, then backward with a fixed random output
// gradient) from zeroed gradients and returns the output and the
// gradients of the inputs that require grad, in order.
func linearGELURun(t *testing.T, f func() *Tensor, inputs ...*Tensor) (out []float32, grads [][]float32) {
	t.Helper()
	for _, in := range inputs {
		in.SetGrad(nil)
	}
	y := f()
	g := Zeros(y.shape...)
	NewRNG(7).FillUniform(g, -1, 1)
	if err := y.BackwardWith(g); err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		if !in.RequiresGrad() {
			grads = append(grads, nil)
			continue
		}
		grads = append(grads, slices.Clone(in.Grad().Data()))
	}
	return slices.Clone(y.data), grads
}

// TestLinearGELUMatchesUnfused checks LinearGELU against GELU(Linear(...))
// on shapes with vector tails, 3-d inputs, no bias, inputs without grad
// and several threads: the output and the x and w gradients are the same
// kernels on the same numbers, so bit for bit; the bias gradient is summed
// per thread and then merged, so to float32 rounding (bit for bit on one
// thread).
func TestLinearGELUMatchesUnfused(t *testing.T) {
	cases := []struct {
		name       string
		xShape     []int
		in, out    int
		bias       bool
		xGrad      bool
		threads    int
		exactBias  bool
		accumulate bool
	}{
		{"2d", []int{37, 19}, 19, 23, true, true, 1, true, false},
		{"3d-wide", []int{4, 33, 40}, 40, 160, true, true, 1, true, false},
		{"no-bias", []int{5, 8, 16}, 16, 64, false, true, 1, true, false},
		{"x-constant", []int{9, 12}, 12, 20, true, false, 1, true, false},
		{"threads", []int{8, 64, 32}, 32, 96, true, true, 4, false, false},
		{"accumulate", []int{3, 7, 16}, 16, 24, true, true, 1, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer kernels.SetNumThreads(kernels.SetNumThreads(c.threads))
			rng := NewRNG(11)
			x := randT(rng, -2, 2, c.xShape...)
			w := randT(rng, -0.5, 0.5, c.out, c.in)
			var b *Tensor
			inputs := []*Tensor{x, w}
			if c.bias {
				b = randT(rng, -1, 1, c.out)
				inputs = append(inputs, b)
			}
			x.SetRequiresGrad(c.xGrad)
			w.SetRequiresGrad(true)
			if b != nil {
				b.SetRequiresGrad(true)
			}
			fused := func() *Tensor { return LinearGELU(x, w, b) }
			unfused := func() *Tensor { return GELU(Linear(x, w, b)) }
			if c.accumulate { // two uses: the gradients add up
				fused = func() *Tensor { return Add(LinearGELU(x, w, b), LinearGELU(x, w, b)) }
				unfused = func() *Tensor { return Add(GELU(Linear(x, w, b)), GELU(Linear(x, w, b))) }
			}
			out, grads := linearGELURun(t, fused, inputs...)
			wantOut, wantGrads := linearGELURun(t, unfused, inputs...)
			if !slices.Equal(out, wantOut) {
				t.Fatalf("output differs from GELU(Linear): %v vs %v", out[:4], wantOut[:4])
			}
			for i := range grads {
				if (grads[i] == nil) != (wantGrads[i] == nil) {
					t.Fatalf("input %d: gradient presence differs", i)
				}
				if i == 2 && !c.exactBias {
					for j := range grads[i] {
						if d := math.Abs(float64(grads[i][j] - wantGrads[i][j])); d > 1e-5*math.Max(1, math.Abs(float64(wantGrads[i][j]))) {
							t.Fatalf("bias gradient[%d] = %v, unfused %v", j, grads[i][j], wantGrads[i][j])
						}
					}
					continue
				}
				if !slices.Equal(grads[i], wantGrads[i]) {
					t.Fatalf("gradient of input %d differs from GELU(Linear)", i)
				}
			}
		})
	}
}

// TestGradLinearGELU checks LinearGELU's gradients against finite
// differences.
func TestGradLinearGELU(t *testing.T) {
	rng := NewRNG(6)
	x := randT(rng, -1, 1, 4, 3)
	w := randT(rng, -1, 1, 5, 3)
	b := randT(rng, -1, 1, 5)
	gradCheck(t, "LinearGELU", defaultGC, func() *Tensor { return LinearGELU(x, w, b) }, x, w, b)
	gradCheck(t, "LinearGELU/no bias", defaultGC, func() *Tensor { return LinearGELU(x, w, nil) }, x, w)
	x3 := randT(rng, -1, 1, 2, 2, 3)
	gradCheck(t, "LinearGELU/3-d input", defaultGC, func() *Tensor { return LinearGELU(x3, w, b) }, x3, w, b)
}

// TestLinearGELUNoGradAndBF16 checks the forward without autograd (no
// graph, same numbers) and under bf16 autocast against GELU(Linear(...))
// there: on the native kernel the fused op runs the same bf16 GEMMs on
// the same numbers, so the output and the x and w gradients are the same
// bits and the bias gradient (summed row by row rather than by sumRows)
// agrees to float32 rounding; emulated, it is GELU(Linear(...)).
func TestLinearGELUNoGradAndBF16(t *testing.T) {
	rng := NewRNG(8)
	x := randT(rng, -2, 2, 70, 24)
	w := randT(rng, -0.5, 0.5, 40, 24)
	b := randT(rng, -1, 1, 40)
	w.SetRequiresGrad(true)
	var y, want *Tensor
	NoGrad(func() { y, want = LinearGELU(x, w, b), GELU(Linear(x, w, b)) })
	if y.RequiresGrad() || !slices.Equal(y.data, want.data) {
		t.Fatalf("no-grad LinearGELU differs from GELU(Linear) or records a graph")
	}
	if !BF16Native() {
		// Autocast refuses bf16 without the native kernel; the emulated
		// numerics take the same path through LinearGELU.
		defer SetBF16Emulation(SetBF16Emulation(true))
	}
	x.SetRequiresGrad(true)
	b.SetRequiresGrad(true)
	var got, wantRun [][]float32
	for _, fused := range []bool{true, false} {
		for _, p := range []*Tensor{x, w, b} {
			p.SetGrad(nil)
		}
		var out *Tensor
		if err := Autocast(BF16, func() {
			if fused {
				out = LinearGELU(x, w, b)
			} else {
				out = GELU(Linear(x, w, b))
			}
		}); err != nil {
			t.Fatal(err)
		}
		g := Zeros(out.shape...)
		NewRNG(9).FillUniform(g, -1, 1)
		if err := out.BackwardWith(g); err != nil {
			t.Fatal(err)
		}
		r := [][]float32{slices.Clone(out.data), slices.Clone(x.Grad().Data()), slices.Clone(w.Grad().Data()), slices.Clone(b.Grad().Data())}
		if fused {
			got = r
		} else {
			wantRun = r
		}
	}
	for i, what := range []string{"output", "x gradient", "w gradient"} {
		if !slices.Equal(got[i], wantRun[i]) {
			t.Fatalf("bf16 autocast LinearGELU: %s differs from GELU(Linear)", what)
		}
	}
	for j, v := range wantRun[3] {
		if d := math.Abs(float64(got[3][j] - v)); d > 1e-5*math.Max(1, math.Abs(float64(v))) {
			t.Fatalf("bf16 autocast LinearGELU: bias gradient[%d] = %v, GELU(Linear) %v", j, got[3][j], v)
		}
	}
}

// TestLinearGELUBadShapes checks that mismatched shapes panic with one
// line naming them.
func TestLinearGELUBadShapes(t *testing.T) {
	for _, c := range []struct {
		x, w, b *Tensor
		want    string
	}{
		{Zeros(2, 3), Zeros(4, 5), nil, "tensor: LinearGELU: input [2 3] does not match weight [4 5] ([out, in])"},
		{Zeros(2, 3), Zeros(4, 3), Zeros(5), "tensor: LinearGELU: bias [5] does not match weight [4 3]"},
		{Scalar(1), Zeros(4, 3), nil, "tensor: LinearGELU: input [] does not match weight [4 3] ([out, in])"},
	} {
		func() {
			defer func() {
				r, _ := recover().(string)
				if r != c.want || strings.Contains(r, "\n") {
					t.Fatalf("panic %q, want %q", r, c.want)
				}
			}()
			LinearGELU(c.x, c.w, c.b)
		}()
	}
}
