package tensor

import (
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

func TestArgMaxAndMax(t *testing.T) {
	x := New([]float32{
		1, 5, 3,
		7, 2, 7,
	}, 2, 3)
	if got := ArgMax(x, 1); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("ArgMax dim 1 = %v, want [1 0] (first of ties)", got)
	}
	if got := ArgMax(x, 0); !slices.Equal(got, []int{1, 0, 1}) {
		t.Errorf("ArgMax dim 0 = %v, want [1 0 1]", got)
	}
	m := Max(x, 1, true)
	if !slices.Equal(m.Shape(), []int{2, 1}) || !slices.Equal(m.Data(), []float32{5, 7}) {
		t.Errorf("Max keepdim = %v", m)
	}
}

func TestBroadcastValues(t *testing.T) {
	a := New([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b := New([]float32{10, 20}, 2, 1)
	if got := Add(a, b).Data(); !slices.Equal(got, []float32{11, 12, 13, 24, 25, 26}) {
		t.Errorf("[2,3]+[2,1] = %v", got)
	}
	c := New([]float32{1, 2, 3}, 3)
	if got := Mul(a, c).Data(); !slices.Equal(got, []float32{1, 4, 9, 4, 10, 18}) {
		t.Errorf("[2,3]*[3] = %v", got)
	}
	o := Sub(New([]float32{1, 2}, 2, 1, 1), New([]float32{1, 2, 3}, 1, 3))
	if !slices.Equal(o.Shape(), []int{2, 1, 3}) || !slices.Equal(o.Data(), []float32{0, -1, -2, 1, 0, -1}) {
		t.Errorf("[2,1,1]-[1,3] = %v", o)
	}
}

func TestReductionValues(t *testing.T) {
	x := New([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if got := Sum(x, false).Item(); got != 21 {
		t.Errorf("Sum = %v", got)
	}
	s := Sum(x, false, 0)
	if !slices.Equal(s.Shape(), []int{3}) || !slices.Equal(s.Data(), []float32{5, 7, 9}) {
		t.Errorf("Sum dim 0 = %v", s)
	}
	m := Mean(x, true, 1)
	if !slices.Equal(m.Shape(), []int{2, 1}) || !slices.Equal(m.Data(), []float32{2, 5}) {
		t.Errorf("Mean dim 1 keepdim = %v", m)
	}
	if got := Var(x, true, false).Item(); math.Abs(float64(got)-3.5) > 1e-6 {
		t.Errorf("unbiased Var = %v, want 3.5", got)
	}
	if got := Var(x, false, false).Item(); math.Abs(float64(got)-35.0/12) > 1e-6 {
		t.Errorf("biased Var = %v, want 35/12", got)
	}
}

func TestShapeOpValues(t *testing.T) {
	x := New([]float32{0, 1, 2, 3, 4, 5}, 2, 3)
	if got := Transpose(x).Data(); !slices.Equal(got, []float32{0, 3, 1, 4, 2, 5}) {
		t.Errorf("Transpose = %v", got)
	}
	if got := Narrow(x, 1, 1, 2).Data(); !slices.Equal(got, []float32{1, 2, 4, 5}) {
		t.Errorf("Narrow = %v", got)
	}
	c := Cat([]*Tensor{x, New([]float32{9, 9}, 2, 1)}, 1)
	if !slices.Equal(c.Shape(), []int{2, 4}) || !slices.Equal(c.Data(), []float32{0, 1, 2, 9, 3, 4, 5, 9}) {
		t.Errorf("Cat = %v", c)
	}
	f := Flatten(Zeros(2, 3, 4, 5), 1)
	if !slices.Equal(f.Shape(), []int{2, 60}) {
		t.Errorf("Flatten shape %v", f.Shape())
	}
	p := Permute(Zeros(2, 3, 4), 2, 0, 1)
	if !slices.Equal(p.Shape(), []int{4, 2, 3}) {
		t.Errorf("Permute shape %v", p.Shape())
	}
}

func TestSoftmaxAndLossesAreStable(t *testing.T) {
	x := New([]float32{1e4, 0, -1e4, 3e4}, 1, 4)
	ls := LogSoftmax(x, 1).Data()
	sm := Softmax(x, 1).Data()
	for i := range ls {
		if math.IsNaN(float64(ls[i])) || math.IsInf(float64(ls[i]), 1) || math.IsNaN(float64(sm[i])) {
			t.Fatalf("unstable: log_softmax %v softmax %v", ls, sm)
		}
	}
	if sm[3] != 1 || ls[3] != 0 {
		t.Errorf("softmax %v log_softmax %v, want the largest logit to take all", sm, ls)
	}
	x.SetRequiresGrad(true)
	loss := CrossEntropy(x, []int{0}, "mean")
	if got := loss.Item(); math.Abs(float64(got)-2e4) > 1 {
		t.Errorf("CrossEntropy = %v, want 2e4", got)
	}
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if g := x.Grad().Data(); g[0] != -1 || g[3] != 1 {
		t.Errorf("CrossEntropy grad %v, want [-1 0 0 1]", g)
	}
}

func TestLinearMatchesFloat64(t *testing.T) {
	rng := NewRNG(12)
	x, w, b := Randn(rng, 7, 33), Randn(rng, 5, 33), Randn(rng, 5)
	y := Linear(x, w, b)
	for i := 0; i < 7; i++ {
		for o := 0; o < 5; o++ {
			want := float64(b.data[o])
			for k := 0; k < 33; k++ {
				want += float64(x.data[i*33+k]) * float64(w.data[o*33+k])
			}
			if got := float64(y.data[i*5+o]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("Linear[%d,%d] = %v, want %v", i, o, got, want)
			}
		}
	}
}

// TestPoolingLargeBatch covers the multi-goroutine and 2×2 fast paths
// against a direct reference.
func TestPoolingLargeBatch(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(3))
	x := Randn(NewRNG(13), 8, 32, 24, 24).SetRequiresGrad(true)
	for _, k := range [][2]int{{2, 2}, {3, 3}} {
		y := MaxPool2d(x, k, k, [2]int{0, 0})
		a := AvgPool2d(x, k, k, [2]int{0, 0})
		oh := 24 / k[0]
		for pl := 0; pl < 8*32; pl++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < oh; ox++ {
					best, sum := float32(math.Inf(-1)), 0.0
					for i := 0; i < k[0]; i++ {
						for j := 0; j < k[1]; j++ {
							v := x.data[pl*576+(oy*k[0]+i)*24+ox*k[1]+j]
							best = max(best, v)
							sum += float64(v)
						}
					}
					o := (pl*oh+oy)*oh + ox
					if y.data[o] != best {
						t.Fatalf("k=%v MaxPool2d[%d] = %v, want %v", k, o, y.data[o], best)
					}
					if want := sum / float64(k[0]*k[1]); math.Abs(float64(a.data[o])-want) > 1e-5 {
						t.Fatalf("k=%v AvgPool2d[%d] = %v, want %v", k, o, a.data[o], want)
					}
				}
			}
		}
	}
	// Each 2×2 window passes its gradient to exactly one input.
	x.SetGrad(nil)
	if err := Sum(MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{0, 0}), false).Backward(); err != nil {
		t.Fatal(err)
	}
	if got := kernels.Sum(x.Grad().data); got != 8*32*12*12 {
		t.Fatalf("MaxPool2d gradient mass %v, want %d", got, 8*32*12*12)
	}
}
