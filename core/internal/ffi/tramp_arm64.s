// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin

#include "textflag.h"

// trampoline is called by runtime.asmcgocall on the system stack with the
// AAPCS64 C calling convention: R0 points at a frame {fn, a1..a6, r1}.
TEXT trampoline<>(SB), NOSPLIT|NOFRAME, $0
	STP.W (R29, R30), -32(RSP)
	MOVD  RSP, R29
	MOVD  R19, 16(RSP)      // R19 is callee-saved: keep the frame pointer
	MOVD  R0, R19
	MOVD  8(R19), R0
	MOVD  16(R19), R1
	MOVD  24(R19), R2
	MOVD  32(R19), R3
	MOVD  40(R19), R4
	MOVD  48(R19), R5
	MOVD  0(R19), R16
	CALL  (R16)
	MOVD  R0, 56(R19)
	MOVD  16(RSP), R19
	LDP.P 32(RSP), (R29, R30)
	RET

GLOBL ·trampolineABI0(SB), NOPTR|RODATA, $8
DATA ·trampolineABI0(SB)/8, $trampoline<>(SB)
