package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func optImpls() []*optImpl { return append([]*optImpl{genericOpt}, allArchOpts()...) }

// optLengths covers the tails of both vector widths (8 and 16) and a
// length that is not a multiple of either.
func optLengths() []int {
	return []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1001}
}

// TestOptimizerConstsLayout: the assembly reads AdamConsts and
// AdadeltaConsts as consecutive float32s in declaration order.
func TestOptimizerConstsLayout(t *testing.T) {
	var a AdamConsts
	for i, off := range []uintptr{
		unsafe.Offsetof(a.Decay), unsafe.Offsetof(a.Sign), unsafe.Offsetof(a.WD),
		unsafe.Offsetof(a.B1), unsafe.Offsetof(a.C1), unsafe.Offsetof(a.B2), unsafe.Offsetof(a.C2),
		unsafe.Offsetof(a.InvBC2), unsafe.Offsetof(a.Eps), unsafe.Offsetof(a.StepSize),
	} {
		if off != uintptr(4*i) {
			t.Errorf("AdamConsts field %d at offset %d, want %d", i, off, 4*i)
		}
	}
	var d AdadeltaConsts
	for i, off := range []uintptr{
		unsafe.Offsetof(d.Sign), unsafe.Offsetof(d.WD), unsafe.Offsetof(d.Rho),
		unsafe.Offsetof(d.C), unsafe.Offsetof(d.Eps), unsafe.Offsetof(d.LR),
	} {
		if off != uintptr(4*i) {
			t.Errorf("AdadeltaConsts field %d at offset %d, want %d", i, off, 4*i)
		}
	}
}

// TestOptimizerUsesBest: the exported functions use the fastest
// implementation this CPU runs.
func TestOptimizerUsesBest(t *testing.T) {
	impls := optImpls()
	if best := impls[len(impls)-1]; opt != best {
		t.Errorf("the optimizer loops use %s, want %s", opt.name, best.name)
	}
}

// TestOptimizerMatchesGeneric compares every implementation with the
// reference loops: within a few ulps of them, bit for bit with the
// assembly's own order of operations (adamAsmOrder, adadeltaAsmOrder) on
// the elements the assembly computes and with the reference on the tail
// it leaves to Go; nothing past the end may be touched.
func TestOptimizerMatchesGeneric(t *testing.T) {
	if len(allArchOpts()) == 0 {
		t.Log("no assembly on this CPU or build: checking the reference against itself")
	}
	for _, impl := range optImpls() {
		t.Run(impl.name, func(t *testing.T) { testOpt(t, impl) })
	}
}

func testOpt(t *testing.T, impl *optImpl) {
	const guard = 17
	rng := rand.New(rand.NewPCG(11, 12))
	// fill returns n random values followed by guard sentinels.
	fill := func(n int, positive bool) []float32 {
		x := make([]float32, n+guard)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if positive {
				x[i] = float32(rng.Float64())
			}
		}
		for i := n; i < len(x); i++ {
			x[i] = 12345
		}
		return x
	}
	clone := func(x []float32) []float32 { return append([]float32(nil), x...) }
	// check compares got with the reference loop's want (within a few
	// ulps) and with exact (bit for bit), and the guard elements.
	check := func(t *testing.T, what string, n int, got, want, exact []float32) {
		t.Helper()
		for i := range got {
			if i >= n {
				if got[i] != 12345 {
					t.Fatalf("%s n=%d: element %d past the end changed to %v", what, n, i, got[i])
				}
				continue
			}
			if d := math.Abs(float64(got[i] - want[i])); d > 4e-7*math.Max(math.Abs(float64(want[i])), 1) {
				t.Fatalf("%s n=%d [%d]: %s %v, reference %v", what, n, i, impl.name, got[i], want[i])
			}
			if math.Float32bits(got[i]) != math.Float32bits(exact[i]) {
				t.Fatalf("%s n=%d [%d]: %s %v (%#08x), want exactly %v (%#08x)", what, n, i, impl.name,
					got[i], math.Float32bits(got[i]), exact[i], math.Float32bits(exact[i]))
			}
		}
	}
	// exact runs the assembly-order loop on the elements the assembly
	// computes and the reference on the rest.
	exact := func(n int, asmOrder, ref func(lo, hi int)) {
		vn := 0
		if impl != genericOpt {
			vn = n &^ (impl.width - 1)
			asmOrder(0, vn)
		}
		ref(vn, n)
	}
	// Adam with L2 decay and maximize, then AdamW; Adadelta with PyTorch's
	// default lr of 1, then with an lr whose product with δ rounds.
	adams := []AdamConsts{
		{Decay: 0.999, Sign: -1, WD: 0.01, B1: 0.9, C1: 0.1, B2: 0.999, C2: 0.001, InvBC2: 3.2, Eps: 1e-8, StepSize: 0.01},
		{Decay: 0.9999, Sign: 1, B1: 0.8, C1: 0.2, B2: 0.99, C2: 0.01, InvBC2: 1.7, Eps: 1e-6, StepSize: 0.003},
	}
	adadeltas := []AdadeltaConsts{
		{Sign: 1, WD: 0.05, Rho: 0.9, C: 0.1, Eps: 1e-6, LR: 1},
		{Sign: -1, Rho: 0.95, C: 0.05, Eps: 1e-5, LR: 0.7},
	}
	for _, n := range optLengths() {
		for _, k := range adams {
			p, g, m, v := fill(n, false), fill(n, false), fill(n, false), fill(n, true)
			pr, mr, vr := clone(p), clone(m), clone(v)
			adamGeneric(pr[:n], g[:n], mr[:n], vr[:n], &k)
			pe, me, ve := clone(p), clone(m), clone(v)
			exact(n, func(lo, hi int) { adamAsmOrder(pe[lo:hi], g[lo:hi], me[lo:hi], ve[lo:hi], &k) },
				func(lo, hi int) { adamGeneric(pe[lo:hi], g[lo:hi], me[lo:hi], ve[lo:hi], &k) })
			if n > 0 {
				impl.adam(p[:n], g[:n], m[:n], v[:n], &k)
			}
			check(t, "adam p", n, p, pr, pe)
			check(t, "adam m", n, m, mr, me)
			check(t, "adam v", n, v, vr, ve)
		}
		for _, k := range adadeltas {
			p, g, sq, acc := fill(n, false), fill(n, false), fill(n, true), fill(n, true)
			pr, sqr, accr := clone(p), clone(sq), clone(acc)
			adadeltaGeneric(pr[:n], g[:n], sqr[:n], accr[:n], &k)
			pe, sqe, acce := clone(p), clone(sq), clone(acc)
			exact(n, func(lo, hi int) { adadeltaAsmOrder(pe[lo:hi], g[lo:hi], sqe[lo:hi], acce[lo:hi], &k) },
				func(lo, hi int) { adadeltaGeneric(pe[lo:hi], g[lo:hi], sqe[lo:hi], acce[lo:hi], &k) })
			if n > 0 {
				impl.adadelta(p[:n], g[:n], sq[:n], acc[:n], &k)
			}
			check(t, "adadelta p", n, p, pr, pe)
			check(t, "adadelta sq", n, sq, sqr, sqe)
			check(t, "adadelta acc", n, acc, accr, acce)
		}
	}
}

// TestOptimizerPublic: the exported functions accept empty parameters and
// panic, touching nothing, when an operand is shorter than p.
func TestOptimizerPublic(t *testing.T) {
	AdamUpdate(nil, nil, nil, nil, &AdamConsts{})
	AdadeltaUpdate(nil, nil, nil, nil, &AdadeltaConsts{})
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", what)
			}
		}()
		f()
	}
	p, short := []float32{1, 2, 3}, []float32{1, 2}
	mustPanic("AdamUpdate short v", func() {
		AdamUpdate(p, p[:3:3], []float32{0, 0, 0}, short, &AdamConsts{Decay: 1, Sign: 1, B1: 0.9, C1: 0.1, B2: 0.9, C2: 0.1, InvBC2: 1, Eps: 1, StepSize: 1})
	})
	mustPanic("AdadeltaUpdate short g", func() {
		AdadeltaUpdate(p, short, []float32{0, 0, 0}, []float32{0, 0, 0}, &AdadeltaConsts{Sign: 1, Rho: 0.9, C: 0.1, Eps: 1, LR: 1})
	})
	if p[0] != 1 || p[1] != 2 || p[2] != 3 {
		t.Errorf("p changed to %v by a call that panicked", p)
	}
}

// adamAsmOrder is adamGeneric in the order of operations of the assembly,
// with its fused multiply-adds (fma32). The explicit conversions stop the
// compiler from fusing anything else.
func adamAsmOrder(p, g, m, v []float32, k *AdamConsts) {
	for i := range p {
		pi := float32(p[i] * k.Decay)
		gi := fma32(k.WD, pi, float32(k.Sign*g[i]))
		mi := fma32(k.C1, gi, float32(k.B1*m[i]))
		vi := fma32(k.C2, float32(gi*gi), float32(k.B2*v[i]))
		denom := float32(float32(sqrt32(vi)*k.InvBC2) + k.Eps)
		m[i], v[i] = mi, vi
		p[i] = float32(pi - float32(float32(k.StepSize*mi)/denom))
	}
}

// adadeltaAsmOrder is adadeltaGeneric in the order of operations of the
// assembly, like adamAsmOrder.
func adadeltaAsmOrder(p, g, sq, acc []float32, k *AdadeltaConsts) {
	for i := range p {
		gi := fma32(k.WD, p[i], float32(k.Sign*g[i]))
		s := fma32(k.C, float32(gi*gi), float32(k.Rho*sq[i]))
		delta := float32(sqrt32(float32(float32(acc[i]+k.Eps)/float32(s+k.Eps))) * gi)
		sq[i] = s
		acc[i] = fma32(k.C, float32(delta*delta), float32(k.Rho*acc[i]))
		p[i] = fma32(-k.LR, delta, p[i])
	}
}

// sqrt32 is the correctly rounded float32 square root (VSQRTPS): rounding
// the float64 root again is exact for a float32 argument.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// fma32 is a·b + c rounded once to float32, as VFMADD231PS computes it
// (computed exactly with big.Float: rounding a float64 fused result to
// float32 would round twice).
func fma32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// TestFMA32 checks the test's own fused multiply-add where fused and
// separate rounding differ: (1+2⁻¹²)² − 1 is 2⁻¹¹ + 2⁻²⁴, while the float32
// product alone rounds the 2⁻²⁴ away.
func TestFMA32(t *testing.T) {
	a := float32(1 + 1.0/4096)
	want := float32(1.0/2048 + 1.0/(1<<24))
	if got := fma32(a, a, -1); got != want {
		t.Errorf("fma32(1+2⁻¹², 1+2⁻¹², −1) = %g, want %g", got, want)
	}
	if unfused := float32(a*a) - 1; unfused == want {
		t.Errorf("the example does not tell fused from unfused: both %g", unfused)
	}
}
