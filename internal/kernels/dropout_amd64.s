// Hand-written: AVX-512 dropout from 16-bit draws (DropoutMask16) and its
// gradient (DropoutBackward16).

//go:build !noasm

#include "textflag.h"

// func dropoutMask16AVX512(out, x *float32, mask *byte, draws *uint64, n int, th uint32, scale float32)
// n > 0 is a multiple of 16. The draws are read as n little-endian
// uint16 values (the lanes of the words in element order), widened and
// compared with th; the comparison's 16 bits are the mask, and out is x
// times a vector holding scale where kept and 0 where dropped (so a
// dropped NaN or infinity gives NaN, and a dropped negative value −0, as
// multiplying by a float mask does).
TEXT ·dropoutMask16AVX512(SB), NOSPLIT, $0-48
	MOVQ         out+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         mask+16(FP), R8
	MOVQ         draws+24(FP), DX
	MOVQ         n+32(FP), CX
	MOVL         th+40(FP), AX
	VPBROADCASTD AX, Z1
	MOVSS        scale+44(FP), X2
	VBROADCASTSS X2, Z2

mloop:
	VPMOVZXWD (DX), Z0
	VPCMPUD   $1, Z1, Z0, K1
	KMOVW     K1, (R8)
	VMOVAPS.Z Z2, K1, Z3
	VMULPS    (SI), Z3, Z4
	VMOVUPS   Z4, (DI)
	ADDQ      $32, DX
	ADDQ      $2, R8
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       mloop
	VZEROUPPER
	RET

// func dropoutBackward16AVX512(dst, grad *float32, mask *byte, n int, scale float32)
// n > 0 is a multiple of 16: dst = grad times scale-or-0 by the mask's bits.
TEXT ·dropoutBackward16AVX512(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         mask+16(FP), R8
	MOVQ         n+24(FP), CX
	MOVSS        scale+32(FP), X2
	VBROADCASTSS X2, Z2

bloop:
	KMOVW     (R8), K1
	VMOVAPS.Z Z2, K1, Z3
	VMULPS    (SI), Z3, Z4
	VMOVUPS   Z4, (DI)
	ADDQ      $2, R8
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       bloop
	VZEROUPPER
	RET
