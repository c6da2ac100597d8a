// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin

#include "textflag.h"

// trampoline is called by runtime.asmcgocall on the system stack with the
// System V C calling convention: DI points at a frame {fn, a1..a6, r1}.
TEXT trampoline<>(SB), NOSPLIT|NOFRAME, $0
	PUSHQ BP
	MOVQ  SP, BP
	PUSHQ BX
	SUBQ  $8, SP            // keep SP 16-byte aligned at the call
	MOVQ  DI, BX            // BX is callee-saved: keep the frame pointer
	MOVQ  8(BX), DI
	MOVQ  16(BX), SI
	MOVQ  24(BX), DX
	MOVQ  32(BX), CX
	MOVQ  40(BX), R8
	MOVQ  48(BX), R9
	XORL  AX, AX            // no vector registers used (varargs convention)
	MOVQ  0(BX), R10
	CALL  R10
	MOVQ  AX, 56(BX)
	ADDQ  $8, SP
	POPQ  BX
	POPQ  BP
	RET

GLOBL ·trampolineABI0(SB), NOPTR|RODATA, $8
DATA ·trampolineABI0(SB)/8, $trampoline<>(SB)
