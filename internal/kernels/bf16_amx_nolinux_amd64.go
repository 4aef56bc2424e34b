//go:build !noasm && !linux

package kernels

// requestAMXPermission reports false: only the Linux permission protocol
// is implemented, so other systems use the emulated bf16 GEMM.
func requestAMXPermission() bool { return false }
