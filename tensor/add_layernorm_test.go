package tensor

import (
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// addLayerNormGraph runs sum = x + y, norm = LayerNorm(sum) (fused or as
// two ops), then backward of Σ norm·r1 + Σ sum·r2, so that sum's gradient
// comes from norm and from another reader, as in a transformer block. It
// returns sum, norm and the gradients of x, y, w and b.
func addLayerNormGraph(t *testing.T, fused bool, x, y, w, b, r1, r2 *Tensor) [][]float32 {
	t.Helper()
	for _, p := range []*Tensor{x, y, w, b} {
		if p != nil {
			p.ZeroGrad()
		}
	}
	var sum, norm *Tensor
	if fused {
		sum, norm = AddLayerNorm(x, y, w, b, 1e-5)
	} else {
		sum = Add(x, y)
		norm = LayerNorm(sum, w, b, 1e-5)
	}
	out := [][]float32{append([]float32(nil), sum.Data()...), append([]float32(nil), norm.Data()...)}
	loss := Add(Sum(Mul(norm, r1), false), Sum(Mul(sum, r2), false))
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Tensor{x, y, w, b} {
		if p != nil {
			out = append(out, append([]float32(nil), p.Grad().Data()...))
		}
	}
	return out
}

// TestAddLayerNormMatchesSeparate checks that AddLayerNorm gives Add's
// and LayerNorm's results and gradients bit for bit, with and without
// the affine parameters, on one thread and on several.
func TestAddLayerNormMatchesSeparate(t *testing.T) {
	for _, threads := range []int{1, 3} {
		prev := kernels.SetNumThreads(threads)
		for _, affine := range []bool{true, false} {
			rng := NewRNG(5)
			// 300 rows: several goroutines' worth; 40 columns: a vector
			// body and a tail.
			x, y := randT(rng, -2, 2, 3, 100, 40), randT(rng, -2, 2, 3, 100, 40)
			r1, r2 := randT(rng, -1, 1, 3, 100, 40), randT(rng, -1, 1, 3, 100, 40)
			var w, b *Tensor
			if affine {
				w, b = randT(rng, 0.5, 1.5, 40), randT(rng, -1, 1, 40)
			}
			for _, p := range []*Tensor{x, y, w, b} {
				if p != nil {
					p.SetRequiresGrad(true)
				}
			}
			want := addLayerNormGraph(t, false, x, y, w, b, r1, r2)
			got := addLayerNormGraph(t, true, x, y, w, b, r1, r2)
			names := []string{"sum", "norm", "dx", "dy", "dweight", "dbias"}
			for i := range want {
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("threads %d affine %v: %s[%d] = %v, separate ops give %v", threads, affine, names[i], j, got[i][j], want[i][j])
					}
				}
			}
		}
		kernels.SetNumThreads(prev)
	}
}

// TestAddLayerNormNoGrad checks the results without autograd.
func TestAddLayerNormNoGrad(t *testing.T) {
	rng := NewRNG(6)
	x, y, w, b := randT(rng, -2, 2, 7, 24), randT(rng, -2, 2, 7, 24), randT(rng, 0.5, 1.5, 24), randT(rng, -1, 1, 24)
	var sum, norm *Tensor
	NoGrad(func() { sum, norm = AddLayerNorm(x, y, w, b, 1e-5) })
	wantSum := Add(x, y)
	wantNorm := LayerNorm(wantSum, w, b, 1e-5)
	for i := range wantSum.Data() {
		if sum.Data()[i] != wantSum.Data()[i] || norm.Data()[i] != wantNorm.Data()[i] {
			t.Fatalf("[%d]: sum %v norm %v, want %v %v", i, sum.Data()[i], norm.Data()[i], wantSum.Data()[i], wantNorm.Data()[i])
		}
	}
	if sum.RequiresGrad() || norm.RequiresGrad() {
		t.Fatal("results under NoGrad require grad")
	}
}

// TestAddLayerNormShapeMismatch checks the panics name the shapes.
func TestAddLayerNormShapeMismatch(t *testing.T) {
	for _, c := range []struct {
		x, y, w *Tensor
		want    []string
	}{
		{Zeros(2, 8), Zeros(2, 6), nil, []string{"[2 8]", "[2 6]"}},
		{Zeros(2, 8), Zeros(2, 8), Zeros(6), []string{"[6]", "[2 8]"}},
	} {
		func() {
			defer func() {
				r := recover()
				s, _ := r.(string)
				for _, w := range c.want {
					if !strings.Contains(s, w) {
						t.Fatalf("panic %v, want one naming %v", r, c.want)
					}
				}
			}()
			AddLayerNorm(c.x, c.y, c.w, nil, 1e-5)
		}()
	}
}
