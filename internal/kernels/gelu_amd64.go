//go:build !noasm

package kernels

// geluAVX2 adds bias to x before the GELU, advancing it bstep bytes per
// eight elements: 32 for a bias row, 0 for geluZeros (no bias).
//
//go:noescape
func geluAVX2(out, deriv, x, bias *float32, bstep, n int)

// geluZeros is the bias of a GELU without one.
var geluZeros [8]float32

// GELU sets out[i] = x[i]·Φ(x[i]), the exact (erf) GELU, and deriv[i] =
// Φ(x[i]) + x[i]·φ(x[i]), its derivative, in float32 (erf to about 2e-7).
// out and deriv must be at least as long as x. With AVX2 and FMA it
// computes eight at a time, branch-free.
func GELU(out, deriv, x []float32) { geluBias(out, deriv, x, nil) }

// geluBias is GELUBias, or GELU with a nil bias.
func geluBias(out, deriv, x, bias []float32) {
	n := len(x)
	out, deriv = out[:n], deriv[:n]
	body := 0
	if hasAVX2 && n >= 8 {
		body = n &^ 7
		bp, step := &geluZeros[0], 0
		if bias != nil {
			bp, step = &bias[0], 32
		}
		geluAVX2(&out[0], &deriv[0], &x[0], bp, step, body)
	}
	var tail []float32
	if bias != nil {
		tail = bias[body:]
	}
	geluGeneric(out[body:], deriv[body:], x[body:], tail)
}
