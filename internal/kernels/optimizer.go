package kernels

// The optimizers' fused per-element update loops (Adam/AdamW, Adadelta):
// one read of each operand and one write of each result per element,
// instead of one pass per tensor operation. Both are elementwise, so
// splitting a parameter into chunks never changes a result.

// AdamConsts holds the per-step scalars of AdamUpdate. The assembly reads
// the fields by offset: keep their order and types.
type AdamConsts struct {
	Decay    float32 // AdamW's 1 − lr·weight_decay; 1 for Adam
	Sign     float32 // −1 to maximize, else 1
	WD       float32 // Adam's L2 weight decay; 0 for AdamW
	B1, C1   float32 // β1, 1 − β1
	B2, C2   float32 // β2, 1 − β2
	InvBC2   float32 // 1/√(1 − β2ᵗ)
	Eps      float32
	StepSize float32 // lr/(1 − β1ᵗ)
}

// AdamUpdate is one Adam/AdamW step over a parameter p with gradient g and
// moments m and v, updated in place. Its reference loop (the portable
// implementation) is
//
//	for i := range p {
//		pi := p[i] * k.Decay
//		gi := k.Sign*g[i] + k.WD*pi
//		mi := k.B1*m[i] + k.C1*gi
//		vi := k.B2*v[i] + k.C2*gi*gi
//		m[i], v[i] = mi, vi
//		denom := float32(math.Sqrt(float64(vi)))*k.InvBC2 + k.Eps
//		p[i] = pi - k.StepSize*mi/denom
//	}
//
// The assembly versions fuse multiply-adds, so a result may differ from
// the loop's in the last bit. g, m and v must be at least as long as p.
func AdamUpdate(p, g, m, v []float32, k *AdamConsts) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n] // the assembly trusts n
	if n > 0 {
		opt.adam(p, g, m, v, k)
	}
}

// AdadeltaConsts holds the per-step scalars of AdadeltaUpdate. The assembly
// reads the fields by offset: keep their order and types.
type AdadeltaConsts struct {
	Sign   float32 // −1 to maximize, else 1
	WD     float32 // L2 weight decay
	Rho, C float32 // ρ, 1 − ρ
	Eps    float32
	LR     float32
}

// AdadeltaUpdate is one Adadelta step over a parameter p with gradient g,
// the running average of squared gradients sq and of squared updates acc,
// updated in place. Its reference loop (the portable implementation) is
//
//	for i := range p {
//		gi := k.Sign*g[i] + k.WD*p[i]
//		s := k.Rho*sq[i] + k.C*gi*gi
//		sq[i] = s
//		delta := float32(math.Sqrt(float64((acc[i]+k.Eps)/(s+k.Eps)))) * gi
//		acc[i] = k.Rho*acc[i] + k.C*delta*delta
//		p[i] -= k.LR * delta
//	}
//
// (√a/√b as √(a/b): one square root instead of PyTorch's two, within an
// ulp or two of its result.) The assembly versions fuse multiply-adds, so
// a result may differ from the loop's in the last bit. g, sq and acc must
// be at least as long as p.
func AdadeltaUpdate(p, g, sq, acc []float32, k *AdadeltaConsts) {
	n := len(p)
	g, sq, acc = g[:n], sq[:n], acc[:n]
	if n > 0 {
		opt.adadelta(p, g, sq, acc, k)
	}
}

// optImpl is one implementation of the update loops; they take slices of
// equal, non-zero length.
type optImpl struct {
	name     string
	adam     func(p, g, m, v []float32, k *AdamConsts)
	adadelta func(p, g, sq, acc []float32, k *AdadeltaConsts)
	// width is how many leading elements, a multiple of it, the assembly
	// computes; the generic loops do the rest.
	width int
}

// opt is the implementation AdamUpdate and AdadeltaUpdate use, chosen at init.
var opt = defaultOpt()
