//go:build !noasm

#include "textflag.h"

// Both loops run 16 float32 lanes per iteration under mask K1: all ones
// for full vectors, the low n bits for the tail.

// func adamAVX512(p, grad, m, v *float32, n int, k *adamConsts)
TEXT ·adamAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Z20  // decay
	VBROADCASTSS 4(AX), Z21  // sign
	VBROADCASTSS 8(AX), Z22  // wd
	VBROADCASTSS 12(AX), Z23 // b1
	VBROADCASTSS 16(AX), Z24 // c1
	VBROADCASTSS 20(AX), Z25 // b2
	VBROADCASTSS 24(AX), Z26 // c2
	VBROADCASTSS 28(AX), Z27 // invBC2
	VBROADCASTSS 32(AX), Z28 // eps
	VBROADCASTSS 36(AX), Z29 // stepSize
	MOVQ $0xFFFF, BX
	KMOVW BX, K1

adam_loop:
	TESTQ CX, CX
	JLE adam_done
	CMPQ CX, $16
	JGE adam_body
	MOVQ $1, BX
	SHLQ CX, BX
	DECQ BX
	KMOVW BX, K1

adam_body:
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (R8), K1, Z2
	VMOVUPS.Z (R9), K1, Z3
	VMULPS Z20, Z0, Z0      // p' = p·decay
	VMULPS Z21, Z1, Z1      // sign·g
	VFMADD231PS Z22, Z0, Z1 // g' = sign·g + wd·p'
	VMULPS Z23, Z2, Z2      // b1·m
	VFMADD231PS Z24, Z1, Z2 // m = b1·m + c1·g'
	VMULPS Z1, Z1, Z4       // g'²
	VMULPS Z25, Z3, Z3      // b2·v
	VFMADD231PS Z26, Z4, Z3 // v = b2·v + c2·g'²
	VSQRTPS Z3, Z5
	VMULPS Z27, Z5, Z5      // √v·invBC2
	VADDPS Z28, Z5, Z5      // + eps
	VMULPS Z29, Z2, Z6      // stepSize·m
	VDIVPS Z5, Z6, Z6       // / denom
	VSUBPS Z6, Z0, Z0       // p = p' − update
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z2, K1, (R8)
	VMOVUPS Z3, K1, (R9)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	SUBQ $16, CX
	JMP adam_loop

adam_done:
	VZEROUPPER
	RET

// func adadeltaAVX512(p, grad, sq, acc *float32, n int, k *adadeltaConsts)
TEXT ·adadeltaAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ sq+16(FP), R8
	MOVQ acc+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Z20  // sign
	VBROADCASTSS 4(AX), Z21  // wd
	VBROADCASTSS 8(AX), Z22  // rho
	VBROADCASTSS 12(AX), Z23 // c = 1 − rho
	VBROADCASTSS 16(AX), Z24 // eps
	VBROADCASTSS 20(AX), Z25 // lr
	MOVQ $0xFFFF, BX
	KMOVW BX, K1

adadelta_loop:
	TESTQ CX, CX
	JLE adadelta_done
	CMPQ CX, $16
	JGE adadelta_body
	MOVQ $1, BX
	SHLQ CX, BX
	DECQ BX
	KMOVW BX, K1

adadelta_body:
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (R8), K1, Z2
	VMOVUPS.Z (R9), K1, Z3
	VMULPS Z20, Z1, Z1       // sign·g
	VFMADD231PS Z21, Z0, Z1  // g' = sign·g + wd·p
	VMULPS Z1, Z1, Z4        // g'²
	VMULPS Z22, Z2, Z2       // ρ·sq
	VFMADD231PS Z23, Z4, Z2  // sq = ρ·sq + c·g'²
	VADDPS Z24, Z3, Z5       // acc + eps
	VADDPS Z24, Z2, Z6       // sq + eps
	VDIVPS Z6, Z5, Z5
	VSQRTPS Z5, Z5
	VMULPS Z1, Z5, Z5        // δ
	VMULPS Z5, Z5, Z6        // δ²
	VMULPS Z22, Z3, Z3       // ρ·acc
	VFMADD231PS Z23, Z6, Z3  // acc = ρ·acc + c·δ²
	VFNMADD231PS Z25, Z5, Z0 // p = p − lr·δ
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z2, K1, (R8)
	VMOVUPS Z3, K1, (R9)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	SUBQ $16, CX
	JMP adadelta_loop

adadelta_done:
	VZEROUPPER
	RET

// func adamAVX2(p, grad, m, v *float32, n int, k *adamConsts)
// n must be a multiple of 8.
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y6   // decay
	VBROADCASTSS 4(AX), Y7   // sign
	VBROADCASTSS 8(AX), Y8   // wd
	VBROADCASTSS 12(AX), Y9  // b1
	VBROADCASTSS 16(AX), Y10 // c1
	VBROADCASTSS 20(AX), Y11 // b2
	VBROADCASTSS 24(AX), Y12 // c2
	VBROADCASTSS 28(AX), Y13 // invBC2
	VBROADCASTSS 32(AX), Y14 // eps
	VBROADCASTSS 36(AX), Y15 // stepSize

adam2_loop:
	CMPQ CX, $8
	JL adam2_done
	VMOVUPS (DI), Y0
	VMOVUPS (SI), Y1
	VMOVUPS (R8), Y2
	VMOVUPS (R9), Y3
	VMULPS Y6, Y0, Y0
	VMULPS Y7, Y1, Y1
	VFMADD231PS Y8, Y0, Y1
	VMULPS Y9, Y2, Y2
	VFMADD231PS Y10, Y1, Y2
	VMULPS Y1, Y1, Y4
	VMULPS Y11, Y3, Y3
	VFMADD231PS Y12, Y4, Y3
	VSQRTPS Y3, Y4
	VMULPS Y13, Y4, Y4
	VADDPS Y14, Y4, Y4
	VMULPS Y15, Y2, Y5
	VDIVPS Y4, Y5, Y5
	VSUBPS Y5, Y0, Y0
	VMOVUPS Y0, (DI)
	VMOVUPS Y2, (R8)
	VMOVUPS Y3, (R9)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, CX
	JMP adam2_loop

adam2_done:
	VZEROUPPER
	RET

// func adadeltaAVX2(p, grad, sq, acc *float32, n int, k *adadeltaConsts)
// n must be a multiple of 8.
TEXT ·adadeltaAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ sq+16(FP), R8
	MOVQ acc+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y10  // sign
	VBROADCASTSS 4(AX), Y11  // wd
	VBROADCASTSS 8(AX), Y12  // rho
	VBROADCASTSS 12(AX), Y13 // c = 1 − rho
	VBROADCASTSS 16(AX), Y14 // eps
	VBROADCASTSS 20(AX), Y15 // lr

adadelta2_loop:
	CMPQ CX, $8
	JL adadelta2_done
	VMOVUPS (DI), Y0
	VMOVUPS (SI), Y1
	VMOVUPS (R8), Y2
	VMOVUPS (R9), Y3
	VMULPS Y10, Y1, Y1
	VFMADD231PS Y11, Y0, Y1
	VMULPS Y1, Y1, Y4
	VMULPS Y12, Y2, Y2
	VFMADD231PS Y13, Y4, Y2
	VADDPS Y14, Y3, Y5
	VADDPS Y14, Y2, Y6
	VDIVPS Y6, Y5, Y5
	VSQRTPS Y5, Y5
	VMULPS Y1, Y5, Y5
	VMULPS Y5, Y5, Y6
	VMULPS Y12, Y3, Y3
	VFMADD231PS Y13, Y6, Y3
	VFNMADD231PS Y15, Y5, Y0
	VMOVUPS Y0, (DI)
	VMOVUPS Y2, (R8)
	VMOVUPS Y3, (R9)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, CX
	JMP adadelta2_loop

adadelta2_done:
	VZEROUPPER
	RET
