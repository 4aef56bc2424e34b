package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func vecImpls() []*vecImpl { return append([]*vecImpl{genericVec}, allArchVecs()...) }

// vecLengths covers every tail length of a 4×16 unrolled loop plus large sizes.
func vecLengths() []int {
	var ns []int
	for n := 0; n <= 67; n++ {
		ns = append(ns, n)
	}
	return append(ns, 128, 1000, 4099)
}

// specialFill fills x with normal values salted with NaN, ±Inf, ±0 so the
// comparison and NaN rules of the assembly are checked, not just arithmetic.
func specialFill[T float32 | float64](r *rand.Rand, x []T) {
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1)}
	for i := range x {
		if r.IntN(8) == 0 {
			x[i] = T(specials[r.IntN(len(specials))])
		} else {
			x[i] = T(r.NormFloat64())
		}
	}
}

func sameBits[T float32 | float64](a, b T) bool {
	if a != a && b != b {
		return true // NaN payloads may differ
	}
	return a == b && math.Signbit(float64(a)) == math.Signbit(float64(b))
}

// checkSame compares got with want element by element, and that the guard
// elements after n (which the kernel must not touch) are unchanged.
func checkSame[T float32 | float64](t *testing.T, what string, n int, got, want []T) {
	t.Helper()
	for i := range got {
		if !sameBits(got[i], want[i]) {
			t.Fatalf("%s n=%d: element %d = %v, want %v", what, n, i, got[i], want[i])
		}
	}
}

func testBinary[T float32 | float64](t *testing.T, name string, impl *vecImpl, f, ref func(dst, src []T)) {
	r := rand.New(rand.NewPCG(7, 9))
	for _, n := range vecLengths() {
		for _, off := range []int{0, 1, 3} {
			src := make([]T, off+n)
			dst := make([]T, off+n+5) // 5 guard elements
			specialFill(r, src)
			specialFill(r, dst)
			want := append([]T(nil), dst...)
			ref(want[off:off+n], src[off:])
			f(dst[off:off+n], src[off:])
			checkSame(t, impl.name+" "+name, n, dst, want)
		}
	}
}

func TestVecBinary(t *testing.T) {
	for _, impl := range vecImpls() {
		testBinary(t, "add", impl, impl.add, addGeneric[float32])
		testBinary(t, "mul", impl, impl.mul, mulGeneric[float32])
		testBinary(t, "min", impl, impl.min, minGeneric[float32])
		testBinary(t, "max", impl, impl.max, maxGeneric[float32])
		testBinary(t, "relu", impl, impl.relu, reluGeneric)
		testBinary(t, "add64", impl, impl.add64, addGeneric[float64])
		testBinary(t, "mul64", impl, impl.mul64, mulGeneric[float64])
		testBinary(t, "min64", impl, impl.min64, minGeneric[float64])
		testBinary(t, "max64", impl, impl.max64, maxGeneric[float64])
	}
}

func TestVecScaleReluBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, impl := range vecImpls() {
		for _, n := range vecLengths() {
			x := make([]float32, n+3)
			specialFill(r, x)
			want := append([]float32(nil), x...)
			scaleGeneric(-1.75, want[:n])
			impl.scale(-1.75, x[:n])
			checkSame(t, impl.name+" scale", n, x, want)

			dx, dy, xv := make([]float32, n+3), make([]float32, n), make([]float32, n)
			specialFill(r, dx)
			specialFill(r, dy)
			specialFill(r, xv)
			want = append([]float32(nil), dx...)
			reluBackwardGeneric(want[:n], dy, xv)
			impl.reluBackward(dx[:n], dy, xv)
			checkSame(t, impl.name+" reluBackward", n, dx, want)
		}
	}
}

func TestVecTernary(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, impl := range vecImpls() {
		for _, op := range []struct {
			name   string
			f, ref func(dst, x, y []float32)
		}{
			{"reluBackwardSet", impl.reluBackwardSet, reluBackwardSetGeneric},
			{"mulTo", impl.mulTo, mulToGeneric},
			{"addMulTo", impl.addMulTo, addMulToGeneric},
		} {
			for _, n := range vecLengths() {
				dst, x, y := make([]float32, n+3), make([]float32, n), make([]float32, n)
				specialFill(r, dst)
				specialFill(r, x)
				specialFill(r, y)
				want := append([]float32(nil), dst...)
				op.ref(want[:n], x, y)
				op.f(dst[:n], x, y)
				checkSame(t, impl.name+" "+op.name, n, dst, want)
			}
		}
	}
}

// TestVecReluMask compares ReluMask and ReluBackwardMask (both modes)
// with the generic loops and with Relu/ReluBackward, on NaN, ±0 and ±Inf.
func TestVecReluMask(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, impl := range vecImpls() {
		for _, n := range vecLengths() {
			src := make([]float32, n)
			specialFill(r, src)
			nb := (n + 7) / 8
			dst, want := make([]float32, n+3), make([]float32, n+3)
			specialFill(r, dst)
			copy(want[n:], dst[n:])
			mask := make([]byte, ReluMaskLen(n)+2)
			for i := range mask {
				mask[i] = 0xa5
			}
			wantMask := append([]byte(nil), mask...)
			reluMaskGeneric(want[:n], src, wantMask)
			impl.reluMask(dst[:n], src, mask[:ReluMaskLen(n)])
			checkSame(t, impl.name+" reluMask", n, dst, want)
			for i := 0; i < nb; i++ {
				if mask[i] != wantMask[i] {
					t.Fatalf("%s reluMask n=%d: mask byte %d = %08b, want %08b", impl.name, n, i, mask[i], wantMask[i])
				}
			}
			for i := ReluMaskLen(n); i < len(mask); i++ {
				if mask[i] != 0xa5 {
					t.Fatalf("%s reluMask n=%d: byte %d past the mask written", impl.name, n, i)
				}
			}
			// The mask must select exactly what ReluBackward's x > 0 does.
			for _, add := range []bool{true, false} {
				dx, dy := make([]float32, n+3), make([]float32, n)
				specialFill(r, dx)
				specialFill(r, dy)
				want := append([]float32(nil), dx...)
				if add {
					reluBackwardGeneric(want[:n], dy, src)
				} else {
					reluBackwardSetGeneric(want[:n], dy, src)
				}
				impl.reluBackwardMask(dx[:n], dy, mask[:ReluMaskLen(n)], add)
				checkSame(t, impl.name+" reluBackwardMask", n, dx, want)
			}
		}
	}
}

// TestVecAxpy allows rounding differences: assembly fuses the multiply-add.
func TestVecAxpy(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, impl := range vecImpls() {
		for _, n := range vecLengths() {
			x := randSlice(r, n)
			y := randSlice(r, n+3)
			y0 := append([]float32(nil), y...)
			impl.axpy(0.3, x, y[:n])
			for i := range y {
				if i >= n {
					if y[i] != y0[i] {
						t.Fatalf("%s axpy n=%d: guard %d changed", impl.name, n, i)
					}
					continue
				}
				want := float64(y0[i]) + 0.3*float64(x[i])
				scale := math.Abs(float64(y0[i])) + math.Abs(0.3*float64(x[i]))
				if math.Abs(float64(y[i])-want) > 1e-6*scale {
					t.Fatalf("%s axpy n=%d: y[%d]=%g want %g", impl.name, n, i, y[i], want)
				}
			}
		}
	}
}

func TestVecSum(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, impl := range vecImpls() {
		for _, n := range vecLengths() {
			x := randSlice(r, n)
			var want, mag float64
			for _, v := range x {
				want += float64(v)
				mag += math.Abs(float64(v))
			}
			got := impl.sum(x)
			if math.Abs(float64(got)-want) > 1e-6*math.Sqrt(float64(n)+1)*(mag+1e-30) {
				t.Fatalf("%s sum n=%d: got %g want %g", impl.name, n, got, want)
			}
		}
		if got := impl.sum([]float32{1, float32(math.Inf(1)), 2}); !math.IsInf(float64(got), 1) {
			t.Fatalf("%s sum with +Inf: got %g", impl.name, got)
		}
	}
}

func TestAddBiasSumRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	rows, n := 5, 37
	x := randSlice(r, rows*n)
	bias := randSlice(r, n)
	want := append([]float32(nil), x...)
	for i := 0; i < rows; i++ {
		for j := 0; j < n; j++ {
			want[i*n+j] += bias[j]
		}
	}
	AddBias(x, rows, bias)
	checkSame(t, "AddBias", n, x, want)

	dst := randSlice(r, n)
	wantSum := make([]float64, n)
	for j := range wantSum {
		wantSum[j] = float64(dst[j])
		for i := 0; i < rows; i++ {
			wantSum[j] += float64(x[i*n+j])
		}
	}
	SumRows(dst, x, rows)
	AddBias(nil, 0, bias) // no rows: no-op, no panic
	SumRows(dst, nil, 0)
	for j, v := range dst {
		if math.Abs(float64(v)-wantSum[j]) > 1e-5*(1+math.Abs(wantSum[j])) {
			t.Fatalf("SumRows[%d]=%g want %g", j, v, wantSum[j])
		}
	}
}

func BenchmarkVec(b *testing.B) {
	const n = 1 << 16
	x, y := make([]float32, n), make([]float32, n)
	for _, impl := range vecImpls() {
		b.Run(impl.name+"/add", func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				impl.add(y, x)
			}
		})
		b.Run(impl.name+"/axpy", func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				impl.axpy(0.5, x, y)
			}
		})
		b.Run(impl.name+"/sum576", func(b *testing.B) { // a conv bias-gradient row
			b.SetBytes(4 * 576)
			for b.Loop() {
				sinkF32 = impl.sum(x[:576])
			}
		})
		b.Run(impl.name+"/reluBackward", func(b *testing.B) {
			b.SetBytes(4 * 4 * n)
			for b.Loop() {
				impl.reluBackward(y, x, x)
			}
		})
	}
}

var sinkF32 float32

func TestStreamCopy(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 1000, 1024, 1025, 4096 + 17, 100000} {
		for _, off := range []int{0, 1, 16} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(i) + 0.5
			}
			buf := make([]float32, n+off+32)
			dst := buf[off : off+n]
			StreamCopy(dst, src)
			for i := range src {
				if dst[i] != src[i] {
					t.Fatalf("n=%d off=%d: dst[%d]=%v, want %v", n, off, i, dst[i], src[i])
				}
			}
			for i, v := range buf[off+n:] {
				if v != 0 {
					t.Fatalf("n=%d off=%d: wrote past the end at %d", n, off, i)
				}
			}
		}
	}
}
