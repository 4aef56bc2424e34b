//go:build !noasm

#include "textflag.h"

// func streamCopyAVX512(dst, src *float32, n int)
// Copies n floats (a multiple of 64) with non-temporal stores; dst must be
// 64-byte aligned.
TEXT ·streamCopyAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   done
loop:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVNTPS Z0, 0(DI)
	VMOVNTPS Z1, 64(DI)
	VMOVNTPS Z2, 128(DI)
	VMOVNTPS Z3, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	DECQ CX
	JNZ  loop
	SFENCE
done:
	VZEROUPPER
	RET
