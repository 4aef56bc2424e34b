//go:build !amd64 || noasm

package kernels

// GELU sets out[i] = x[i]·Φ(x[i]), the exact (erf) GELU, and deriv[i] =
// Φ(x[i]) + x[i]·φ(x[i]), its derivative, in float32 (erf to about 2e-7).
// out and deriv must be at least as long as x.
func GELU(out, deriv, x []float32) { geluGeneric(out[:len(x)], deriv[:len(x)], x) }

// The kernels gelu_test.go compares; never called here (rowAVX512 is false).

func geluAVX2(_, _, _ *float32, _ int) { panic("kernels: no assembly") }

func geluAVX512(_, _, _ *float32, _ int) { panic("kernels: no assembly") }
