package kernels

import "math"

// genericOpt is the portable implementation of the optimizer loops, and
// the reference the assembly versions are tested against.
var genericOpt = &optImpl{name: "generic", adam: adamGeneric, adadelta: adadeltaGeneric, width: 1}

// adamGeneric is AdamUpdate's reference loop.
func adamGeneric(p, g, m, v []float32, k *AdamConsts) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		pi := p[i] * k.Decay
		gi := k.Sign*g[i] + k.WD*pi
		mi := k.B1*m[i] + k.C1*gi
		vi := k.B2*v[i] + k.C2*gi*gi
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))*k.InvBC2 + k.Eps
		p[i] = pi - k.StepSize*mi/denom
	}
}

// adadeltaGeneric is AdadeltaUpdate's reference loop.
func adadeltaGeneric(p, g, sq, acc []float32, k *AdadeltaConsts) {
	g, sq, acc = g[:len(p)], sq[:len(p)], acc[:len(p)]
	for i := range p {
		gi := k.Sign*g[i] + k.WD*p[i]
		s := k.Rho*sq[i] + k.C*gi*gi
		sq[i] = s
		delta := float32(math.Sqrt(float64((acc[i]+k.Eps)/(s+k.Eps)))) * gi
		acc[i] = k.Rho*acc[i] + k.C*delta*delta
		p[i] -= k.LR * delta
	}
}
