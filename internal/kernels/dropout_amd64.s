// Hand-written: AVX-512 dropout mask and product from 16-bit draws
// (DropoutMask16).

//go:build !noasm

#include "textflag.h"

// func dropoutMask16AVX512(out, mask, x *float32, draws *uint64, n int, th uint32, scale float32)
// n > 0 is a multiple of 16. The draws are read as n little-endian
// uint16 values (the lanes of the words in element order), widened and
// compared with th; the mask is scale where below, zero elsewhere, and
// out is x times the mask (so a dropped NaN or infinity gives NaN, and a
// dropped negative value −0, as a separate multiply would).
TEXT ·dropoutMask16AVX512(SB), NOSPLIT, $0-48
	MOVQ         out+0(FP), DI
	MOVQ         mask+8(FP), R8
	MOVQ         x+16(FP), SI
	MOVQ         draws+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVL         th+40(FP), AX
	VPBROADCASTD AX, Z1
	MOVSS        scale+44(FP), X2
	VBROADCASTSS X2, Z2

loop:
	VPMOVZXWD (DX), Z0
	VPCMPUD   $1, Z1, Z0, K1
	VMOVAPS.Z Z2, K1, Z3
	VMULPS    (SI), Z3, Z4
	VMOVUPS   Z3, (R8)
	VMOVUPS   Z4, (DI)
	ADDQ      $32, DX
	ADDQ      $64, SI
	ADDQ      $64, R8
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       loop
	VZEROUPPER
	RET
