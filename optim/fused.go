package optim

import "math"

// The fused per-element update loops of Adam/AdamW and Adadelta. Each has a
// portable Go version (the reference, below) and, on amd64 with AVX-512, an
// assembly version selected at start-up (fused_amd64.go). Both are
// elementwise, so splitting a parameter into chunks never changes a result.

// adamConsts holds the per-step scalars of adamFused, in the order the
// assembly reads them.
type adamConsts struct {
	decay    float32 // AdamW's 1 − lr·weight_decay; 1 for Adam
	sign     float32 // −1 to maximize
	wd       float32 // Adam's L2 weight decay; 0 for AdamW
	b1, c1   float32 // β1, 1 − β1
	b2, c2   float32 // β2, 1 − β2
	invBC2   float32 // 1/√(1 − β2ᵗ)
	eps      float32
	stepSize float32 // lr/(1 − β1ᵗ)
}

// adamFusedGeneric is the reference loop:
//
//	p' = p·decay;  g' = sign·g + wd·p'
//	m = b1·m + c1·g';  v = b2·v + c2·g'²
//	p = p' − stepSize·m / (√v·invBC2 + eps)
func adamFusedGeneric(p, g, m, v []float32, k *adamConsts) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		pi := p[i] * k.decay
		gi := k.sign*g[i] + k.wd*pi
		mi := k.b1*m[i] + k.c1*gi
		vi := k.b2*v[i] + k.c2*gi*gi
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))*k.invBC2 + k.eps
		p[i] = pi - k.stepSize*mi/denom
	}
}

// adadeltaConsts holds the per-step scalars of adadeltaFused, in the order
// the assembly reads them.
type adadeltaConsts struct {
	sign   float32 // −1 to maximize
	wd     float32
	rho, c float32 // ρ, 1 − ρ
	eps    float32
	lr     float32
}

// adadeltaFusedGeneric is the reference loop:
//
//	g' = sign·g + wd·p
//	sq = ρ·sq + c·g'²
//	δ = √((acc + eps)/(sq + eps))·g'
//	acc = ρ·acc + c·δ²
//	p = p − lr·δ
//
// (√a/√b as √(a/b): one square root instead of PyTorch's two, within an
// ulp or two of its result.)
func adadeltaFusedGeneric(p, g, sq, acc []float32, k *adadeltaConsts) {
	g, sq, acc = g[:len(p)], sq[:len(p)], acc[:len(p)]
	for i := range p {
		gi := k.sign*g[i] + k.wd*p[i]
		s := k.rho*sq[i] + k.c*gi*gi
		sq[i] = s
		delta := float32(math.Sqrt(float64((acc[i]+k.eps)/(s+k.eps)))) * gi
		acc[i] = k.rho*acc[i] + k.c*delta*delta
		p[i] -= k.lr * delta
	}
}

// fusedImpl is one implementation of both loops.
type fusedImpl struct {
	name     string
	adam     func(p, g, m, v []float32, k *adamConsts)
	adadelta func(p, g, sq, acc []float32, k *adadeltaConsts)
}

// fusedImpls lists the implementations this CPU can run, best last;
// fused_amd64.go appends the assembly ones. Tests check each against the
// first, the Go reference.
var fusedImpls = []fusedImpl{{"go", adamFusedGeneric, adadeltaFusedGeneric}}

// The implementations in use: the last of fusedImpls.
var (
	adamFused     = adamFusedGeneric
	adadeltaFused = adadeltaFusedGeneric
)
