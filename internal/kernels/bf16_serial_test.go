package kernels

import (
	"strings"
	"testing"
)

func TestBF16Missing(t *testing.T) {
	got := BF16Missing()
	if NativeBF16() != (got == "") {
		t.Fatalf("NativeBF16 %v but BF16Missing %q", NativeBF16(), got)
	}
	if !NativeBF16() && !strings.Contains(got, "AMX_BF16") {
		t.Fatalf("BF16Missing %q does not name AMX_BF16", got)
	}
}

// TestSgemmBF16SerialEqualsParallel: the serial entry point gives the
// bits of the threaded one.
func TestSgemmBF16SerialEqualsParallel(t *testing.T) {
	const m, n, k = 130, 150, 70
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(i%17) - 8.25
	}
	for i := range b {
		b[i] = float32(i%13)*0.5 - 3
	}
	c1, c2 := make([]float32, m*n), make([]float32, m*n)
	SgemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, c1, n)
	SgemmBF16Serial(false, false, m, n, k, 1, a, k, b, n, 0, c2, n)
	for i := range c1 {
		if c1[i] != c2[i] {
			t.Fatalf("c[%d]: SgemmBF16 %v, SgemmBF16Serial %v", i, c1[i], c2[i])
		}
	}
}
