//go:build !noasm

package kernels

import "testing"

// TestCPUVendorAMD: the vendor string is read; this package's test machines
// are Intel or AMD.
func TestCPUVendorAMD(t *testing.T) {
	if !hasAVX2 {
		t.Skip("not an x86 CPU with AVX2")
	}
	amd := cpuVendorAMD()
	if dpbf16FullRate() != amd {
		t.Fatalf("dpbf16FullRate %v on a CPU with AMD vendor %v", dpbf16FullRate(), amd)
	}
}
