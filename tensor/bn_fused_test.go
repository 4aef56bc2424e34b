package tensor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// bnReLUResult is what one run of BatchNormReLU or of the separate ops
// produces: the output, the running statistics and every gradient.
type bnReLUResult struct{ out, rm, rv, gx, gw, gb, gr []float32 }

// runBNReLU draws x, the parameters, the running statistics, a residual
// (if withRes) and an output gradient from seed, then runs relu(bn(x) +
// residual) fused or as BatchNorm, Add and ReLU, with threads threads,
// and runs Backward. With viaOp x and the residual enter through an op,
// as in a network, and their gradients are pass-local buffers the op
// writes; else they are leaves whose gradients it adds to.
func runBNReLU(t *testing.T, shape []int, seed uint64, training, withRes, fused, viaOp bool, threads int) bnReLUResult {
	t.Helper()
	defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
	rng := NewRNG(seed)
	c := shape[1]
	x := randT(rng, -2, 3, shape...).SetRequiresGrad(true)
	w := randT(rng, 0.5, 1.5, c).SetRequiresGrad(true)
	b := randT(rng, -1, 1, c).SetRequiresGrad(true)
	rm, rv := randT(rng, -1, 1, c), randT(rng, 0.5, 2, c)
	var res *Tensor
	if withRes {
		res = randT(rng, -1, 1, shape...).SetRequiresGrad(true)
	}
	gy := randT(rng, -1, 1, shape...)
	xin, rin := x, res
	if viaOp {
		xin = Mul(x, Scalar(1))
		if res != nil {
			rin = Mul(res, Scalar(1))
		}
	}
	var y *Tensor
	if fused {
		y = BatchNormReLU(xin, w, b, rm, rv, rin, training, 0.1, 1e-5)
	} else {
		y = BatchNorm(xin, w, b, rm, rv, training, 0.1, 1e-5)
		if rin != nil {
			y = Add(y, rin)
		}
		y = ReLU(y)
	}
	if err := Sum(Mul(y, gy), false).Backward(); err != nil {
		t.Fatal(err)
	}
	r := bnReLUResult{out: y.Data(), rm: rm.Data(), rv: rv.Data(), gx: x.Grad().Data(), gw: w.Grad().Data(), gb: b.Grad().Data()}
	if res != nil {
		r.gr = res.Grad().Data()
	}
	return r
}

// diffBNReLU names the first field in which a and b differ, or "".
func diffBNReLU(a, b bnReLUResult) string {
	for _, p := range []struct {
		what string
		a, b []float32
	}{{"output", a.out, b.out}, {"running mean", a.rm, b.rm}, {"running var", a.rv, b.rv},
		{"input grad", a.gx, b.gx}, {"weight grad", a.gw, b.gw}, {"bias grad", a.gb, b.gb}, {"residual grad", a.gr, b.gr}} {
		if !slices.Equal(p.a, p.b) {
			return p.what
		}
	}
	return ""
}

// TestBatchNormReLUMatchesSeparateOps checks that the fused op gives bit
// for bit the output, running statistics and gradients of BatchNorm, Add
// and ReLU, with and without a residual, in training and in eval, on 1
// and 3 threads, for odd channel counts, batch 1 and [N, C] inputs.
func TestBatchNormReLUMatchesSeparateOps(t *testing.T) {
	shapes := [][]int{{2, 3, 5, 7}, {1, 7, 9, 9}, {4, 65, 6, 6}, {3, 160, 17, 19}, {5, 13}}
	for _, shape := range shapes {
		for _, training := range []bool{true, false} {
			for _, withRes := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					for _, viaOp := range []bool{true, false} {
						name := fmt.Sprintf("%v/training=%v/residual=%v/threads=%d/viaOp=%v", shape, training, withRes, threads, viaOp)
						sep := runBNReLU(t, shape, 5, training, withRes, false, viaOp, threads)
						fused := runBNReLU(t, shape, 5, training, withRes, true, viaOp, threads)
						if d := diffBNReLU(sep, fused); d != "" {
							t.Errorf("%s: %s differs between the fused op and the separate ops", name, d)
						}
						if !slices.ContainsFunc(fused.out, func(v float32) bool { return v == 0 }) {
							t.Errorf("%s: no output clipped by ReLU: the test does not reach the mask", name)
						}
					}
				}
			}
		}
	}
}

// TestBatchNormReLUThreadsAgree checks that the fused op spread over 3
// threads gives the one-thread results bit for bit.
func TestBatchNormReLUThreadsAgree(t *testing.T) {
	shape := []int{3, 161, 17, 19}
	bn := batchNormGeom{n: 3, c: 161, s: 17 * 19}
	prev := kernels.SetNumThreads(3)
	stats, grads := parallelWorkers(bn.blocks(bn.channelBlock(1))), parallelWorkers(bn.blocks(bn.channelBlock(4)))
	rows := parallelWorkers(bn.n*bn.c, poolMinItems/bn.s+1)
	kernels.SetNumThreads(prev)
	if stats < 2 || grads < 2 || rows < 2 {
		t.Fatalf("shape %v does not split over 3 threads (%d, %d and %d workers)", shape, stats, grads, rows)
	}
	for _, training := range []bool{true, false} {
		one := runBNReLU(t, shape, 11, training, true, true, true, 1)
		three := runBNReLU(t, shape, 11, training, true, true, true, 3)
		if d := diffBNReLU(one, three); d != "" {
			t.Errorf("training=%v: %s differs between 1 and 3 threads", training, d)
		}
	}
}

// TestBatchNormReLUValues checks the fused op against relu(x̂·γ + β + r)
// computed here in float64 from the batch statistics, and its residual
// gradient against the output gradient masked by ReLU.
func TestBatchNormReLUValues(t *testing.T) {
	rng := NewRNG(21)
	n, c, s := 2, 3, 4
	x := randT(rng, -2, 2, n, c, 2, 2)
	w := randT(rng, 0.5, 1.5, c)
	b := randT(rng, -0.5, 0.5, c)
	r := randT(rng, -1, 1, n, c, 2, 2).SetRequiresGrad(true)
	y := BatchNormReLU(x, w, b, nil, nil, r, true, 0.1, 1e-5)
	if err := Sum(y, false).Backward(); err != nil {
		t.Fatal(err)
	}
	xd, yd, rg := x.Data(), y.Data(), r.Grad().Data()
	for ch := 0; ch < c; ch++ {
		var sum, sq float64
		for i := 0; i < n; i++ {
			for j := 0; j < s; j++ {
				sum += float64(xd[(i*c+ch)*s+j])
			}
		}
		mu := sum / float64(n*s)
		for i := 0; i < n; i++ {
			for j := 0; j < s; j++ {
				d := float64(xd[(i*c+ch)*s+j]) - mu
				sq += d * d
			}
		}
		std := math.Sqrt(sq/float64(n*s) + 1e-5)
		for i := 0; i < n; i++ {
			for j := 0; j < s; j++ {
				k := (i*c+ch)*s + j
				want := math.Max((float64(xd[k])-mu)/std*float64(w.Data()[ch])+float64(b.Data()[ch])+float64(r.Data()[k]), 0)
				if math.Abs(float64(yd[k])-want) > 1e-5 {
					t.Fatalf("output[%d] = %v, want %v", k, yd[k], want)
				}
				wantG := float32(0)
				if want > 0 {
					wantG = 1
				}
				if rg[k] != wantG {
					t.Fatalf("residual grad[%d] = %v, want %v (output %v)", k, rg[k], wantG, yd[k])
				}
			}
		}
	}
}

// TestBatchNormReLUResidualIsInput checks relu(bn(x) + x), where both
// gradient contributions go to x, against the separate ops.
func TestBatchNormReLUResidualIsInput(t *testing.T) {
	run := func(fused bool) []float32 {
		rng := NewRNG(8)
		x := randT(rng, -2, 2, 2, 5, 3, 3).SetRequiresGrad(true)
		w, b := randT(rng, 0.5, 1.5, 5), randT(rng, -1, 1, 5)
		xin := Mul(x, Scalar(1))
		var y *Tensor
		if fused {
			y = BatchNormReLU(xin, w, b, nil, nil, xin, true, 0.1, 1e-5)
		} else {
			y = ReLU(Add(BatchNorm(xin, w, b, nil, nil, true, 0.1, 1e-5), xin))
		}
		if err := Sum(Mul(y, randT(rng, -1, 1, 2, 5, 3, 3)), false).Backward(); err != nil {
			t.Fatal(err)
		}
		return x.Grad().Data()
	}
	sep, fused := run(false), run(true)
	for i := range sep {
		if math.Abs(float64(sep[i]-fused[i])) > 1e-5*(1+math.Abs(float64(sep[i]))) {
			t.Fatalf("input grad[%d] = %v fused, %v separate", i, fused[i], sep[i])
		}
	}
}

// TestBatchNormReLUBadResidual checks that a residual of another shape
// panics with a message naming both shapes.
func TestBatchNormReLUBadResidual(t *testing.T) {
	defer func() {
		msg := fmt.Sprint(recover())
		if !strings.Contains(msg, "residual [2 3 4 5] does not match input [2 3 4 4]") {
			t.Fatalf("panic %q does not name the shapes", msg)
		}
	}()
	BatchNormReLU(Zeros(2, 3, 4, 4), nil, nil, nil, nil, Zeros(2, 3, 4, 5), true, 0.1, 1e-5)
}
