package tensor

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/gotrain/gotrain/internal/kernels"
)

// BFloat16 is a bfloat16 number: the upper 16 bits of a float32 (sign, 8
// exponent bits, 7 fraction bits), float32's range at 8 significant bits.
type BFloat16 uint16

// ToBFloat16 rounds f to the nearest bfloat16, ties to even; a NaN stays
// a NaN.
func ToBFloat16(f float32) BFloat16 {
	return BFloat16(kernels.RoundBF16Bits(math.Float32bits(f)))
}

// Float32 returns b's value, exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Precision is the number format matrix products and convolutions take
// their operands in (see Autocast).
type Precision int

const (
	// FP32 is float32 throughout, the default.
	FP32 Precision = iota
	// BF16 is mixed precision: the operands of matmuls and convolutions
	// (and their gradients' products) rounded to bfloat16, products
	// accumulated in float32; every other op, the outputs and the master
	// weights stay float32, like PyTorch's CPU autocast to bfloat16.
	BF16
)

// String is the name ParsePrecision accepts.
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision parses "fp32" or "bf16".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "bf16":
		return BF16, nil
	}
	return 0, fmt.Errorf("precision %q: want fp32 or bf16", s)
}

// ErrBF16Unsupported is returned (wrapped, naming what is missing) by
// CheckPrecision and Autocast when bf16 cannot run natively and
// emulation was not asked for.
var ErrBF16Unsupported = errors.New("bf16 not supported")

var (
	// autocast is the process-wide precision, like GradEnabled: a training
	// loop runs its forward and backward on one goroutine.
	autocast atomic.Int32
	// bf16Emulated is SetBF16Emulation's opt-in.
	bf16Emulated atomic.Bool
)

// SetBF16Emulation turns emulated bf16 on (or off again): under bf16
// autocast, operands are rounded to bf16 and multiplied by the float32
// GEMM, which gives the numerics of a bf16 kernel up to summation order,
// at float32 speed plus the rounding passes. On a CPU without a native
// bf16 kernel it is the only way to run bf16, an explicit opt-in (for
// tests and accuracy studies) because it is slower than plain float32; on
// a CPU with one it replaces the native kernel, to compare the two. It
// returns the previous setting.
func SetBF16Emulation(on bool) (prev bool) { return bf16Emulated.Swap(on) }

// CheckPrecision reports whether p can run here: FP32 always; BF16 with a
// native bf16 kernel, or emulated after SetBF16Emulation(true). The error
// names the missing CPU feature.
func CheckPrecision(p Precision) error {
	switch p {
	case FP32:
		return nil
	case BF16:
		if kernels.NativeBF16() || bf16Emulated.Load() {
			return nil
		}
		return fmt.Errorf("%w: %s (emulation must be asked for)", ErrBF16Unsupported, kernels.BF16Missing())
	}
	return fmt.Errorf("tensor: unknown precision %d", int(p))
}

// BF16Native reports whether bf16 runs on a native bf16 GEMM kernel
// here; if not, it can only run emulated (see SetBF16Emulation).
func BF16Native() bool { return kernels.NativeBF16() }

// Autocast runs f with matmuls (MatMul, Linear, ScaledDotProductAttention's
// q, k and v) and convolutions (Conv2d) in precision p, like
// torch.autocast("cpu", dtype=torch.bfloat16): their operands are rounded
// to p forward, and backward rounds the incoming gradient and reuses the
// rounded operands for the input and weight gradients; sums stay float32,
// and so do results, gradients and weights.
// An op records the precision it ran in, so backward may run after f
// returns. If p cannot run here (see CheckPrecision), f is not run and
// the error is returned. The setting is process-wide; nested calls
// restore the outer precision on return.
func Autocast(p Precision, f func()) error {
	if err := CheckPrecision(p); err != nil {
		return err
	}
	prev := Precision(autocast.Swap(int32(p)))
	defer autocast.Store(int32(prev))
	f()
	return nil
}

// AutocastPrecision is the precision Autocast set, FP32 outside it.
func AutocastPrecision() Precision { return Precision(autocast.Load()) }

// bf16Cast holds one op's operands rounded to bf16 under autocast, until
// its backward is done with them. A nil *bf16Cast is float32: its methods
// hand the operands back as they are. A native cast rounds nothing
// itself: its GEMM (kernels.SgemmBF16) rounds the operands as it packs
// them, which gives the same products without a rounded copy.
type bf16Cast struct {
	bufs   [][]float32
	native bool
}

// gemmFunc is the signature of kernels.Sgemm and its variants.
type gemmFunc = func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// newBF16Cast returns the cast for an op starting now: nil unless autocast
// is BF16.
func newBF16Cast() *bf16Cast {
	if AutocastPrecision() != BF16 {
		return nil
	}
	return &bf16Cast{native: kernels.NativeBF16() && !bf16Emulated.Load()}
}

// of returns d rounded to bf16 in a recycled buffer the cast owns, or d
// itself for a nil or native cast.
func (c *bf16Cast) of(d []float32) []float32 {
	if c == nil || c.native {
		return d
	}
	b := getBuf(len(d))
	kernels.RoundBF16(b, d)
	c.bufs = append(c.bufs, b)
	return b
}

// into rounds d into buf (len(d) or more) and returns it, or d for a nil
// or native cast: for per-image operands in scratch space the caller owns.
func (c *bf16Cast) into(buf, d []float32) []float32 {
	if c == nil || c.native {
		return d
	}
	kernels.RoundBF16(buf, d)
	return buf[:len(d)]
}

// gemm is the GEMM for this cast's operands: the bf16 kernel for a native
// cast, else the float32 one (an emulated cast's operands are rounded).
func (c *bf16Cast) gemm() gemmFunc {
	if c != nil && c.native {
		return kernels.SgemmBF16
	}
	return kernels.Sgemm
}

// gemmSerial is gemm on the caller's goroutine only.
func (c *bf16Cast) gemmSerial() gemmFunc {
	if c != nil && c.native {
		return kernels.SgemmBF16Serial
	}
	return kernels.SgemmSerial
}

// release recycles the cast's buffers.
func (c *bf16Cast) release() {
	if c == nil {
		return
	}
	for _, b := range c.bufs {
		putBuf(b)
	}
	c.bufs = nil
}
