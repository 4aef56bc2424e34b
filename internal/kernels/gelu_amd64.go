//go:build !noasm

package kernels

// n is a multiple of 8 in both (gelu_amd64.s).

//go:noescape
func geluAVX2(out, deriv, x *float32, n int)

//go:noescape
func geluAVX512(out, deriv, x *float32, n int)

// GELU sets out[i] = x[i]·Φ(x[i]), the exact (erf) GELU, and deriv[i] =
// Φ(x[i]) + x[i]·φ(x[i]), its derivative, in float32 (erf to about 2e-7).
// out and deriv must be at least as long as x. With AVX2 and FMA it
// computes eight at a time, with AVX-512 sixteen (the same bits),
// branch-free; the last len(x)%8 go through the Go code either way.
func GELU(out, deriv, x []float32) {
	n := len(x)
	out, deriv = out[:n], deriv[:n]
	body := 0
	if hasAVX2 && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			geluAVX512(&out[0], &deriv[0], &x[0], body)
		} else {
			geluAVX2(&out[0], &deriv[0], &x[0], body)
		}
	}
	geluGeneric(out[body:], deriv[body:], x[body:])
}
