//go:build !noasm

package kernels

// cpuidVendor returns CPUID leaf 0's vendor string registers.
func cpuidVendor() (ebx, edx, ecx uint32)

// cpuVendorAMD reports whether the CPU says "AuthenticAMD".
func cpuVendorAMD() bool {
	b, d, c := cpuidVendor()
	le := func(x uint32) string { return string([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)}) }
	return le(b)+le(d)+le(c) == "AuthenticAMD"
}
