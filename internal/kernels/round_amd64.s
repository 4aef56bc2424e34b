// Hand-written: AVX-512 rounding of float32 values to bfloat16 (RoundBF16).

//go:build !noasm

#include "textflag.h"

// func roundBF16AVX512(dst, src *float32, n int)
// n > 0 is a multiple of 16. Each value is rounded to the nearest
// bfloat16, ties to even, as RoundBF16Bits: add 0x7fff plus the lowest
// kept bit and clear the low half; a NaN keeps its top bits and is made
// quiet instead.
TEXT ·roundBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z1
	MOVL $1, AX
	VPBROADCASTD AX, Z2
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z3
	MOVL $0x00400000, AX
	VPBROADCASTD AX, Z4

loop:
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z5
	VPANDD    Z2, Z5, Z5
	VPADDD    Z1, Z5, Z5
	VPADDD    Z0, Z5, Z5
	VPANDD    Z3, Z5, Z5
	VCMPPS    $3, Z0, Z0, K1
	VPORD     Z4, Z0, Z6
	VPANDD    Z3, Z6, Z6
	VMOVDQA32 Z6, K1, Z5
	VMOVDQU32 Z5, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       loop
	VZEROUPPER
	RET
