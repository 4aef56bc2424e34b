package kernels

import (
	"math"

	"golang.org/x/sys/cpu"
)

// RoundBF16 writes to dst each value of src rounded to the nearest
// bfloat16 (ties to even), still as a float32: the value a bf16 matrix
// unit (VDPBF16PS, AMX TDPBF16PS) multiplies. A product of such values is
// exact in float32, so a float32 GEMM over rounded operands gives what a
// bf16 kernel with float32 accumulation gives, up to summation order.
// Infinities stay; a NaN stays a (quiet) NaN, never becomes an infinity.
// dst and src may be the same slice; dst must be at least as long as src.
func RoundBF16(dst, src []float32) {
	dst = dst[:len(src)]
	done := roundBF16Vec(dst, src)
	for i := done; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(RoundBF16Bits(math.Float32bits(src[i]))) << 16)
	}
}

// RoundBF16Bits returns the bfloat16 nearest (ties to even) to the
// float32 with bits b, as its 16 bits: the upper half of b rounded.
func RoundBF16Bits(b uint32) uint16 {
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and payload's top, force quiet
		return uint16(b>>16) | 0x40
	}
	// Adding 0x7fff plus the lowest kept bit carries into the kept half
	// exactly when the dropped half is above one half, or equal to it with
	// an odd kept half; a carry out of the mantissa bumps the exponent,
	// and past the largest finite value gives the infinity, as it should.
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16Features names this CPU's bfloat16 matrix instructions in the
// order a kernel would prefer them ("AMX_BF16", "AVX512_BF16"); empty
// when it has none. SgemmBF16 uses AMX_BF16 when the OS grants it, else
// AVX512_BF16 (see NativeBF16): the AMX unit is several times faster on
// the CPUs that have both.
func BF16Features() []string {
	var f []string
	if cpu.X86.HasAMXBF16 && cpu.X86.HasAMXTile {
		f = append(f, "AMX_BF16")
	}
	if cpu.X86.HasAVX512BF16 {
		f = append(f, "AVX512_BF16")
	}
	return f
}

// NativeBF16 reports whether SgemmBF16 runs on a bfloat16 kernel here:
// AMX tiles where the CPU has AMX_BF16 and Linux granted this process the
// tile state (several times the float32 FMA rate), else VDPBF16PS on AMD
// CPUs with AVX512_BF16 and AVX-512F/BW (Zen 4 and later); BF16Kernel
// names which. A VDPBF16PS does twice an FMA's products, so that kernel
// approaches twice the float32 rate where the CPU issues it as often as
// an FMA; an Intel core issues it at a quarter of the FMA rate (measured
// on Sapphire Rapids: the kernel reached 0.65× the float32 SGEMM), so
// Intel CPUs without usable AMX are not native.
// Otherwise SgemmBF16 is emulated (rounded operands, float32 GEMM), which
// gives the numerics without the speed. The noasm build and other
// architectures are always emulated.
func NativeBF16() bool { return nativeBF16Impl() != bf16Emulated }
