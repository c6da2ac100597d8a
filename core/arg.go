// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/floatbits"
)

// ArgKind is the kind of a kernel argument (GPURT_ARG_*).
type ArgKind int32

// Argument kinds.
const (
	ArgKindBuffer ArgKind = abi.ArgBuffer
	ArgKindI8     ArgKind = abi.ArgI8
	ArgKindI16    ArgKind = abi.ArgI16
	ArgKindI32    ArgKind = abi.ArgI32
	ArgKindI64    ArgKind = abi.ArgI64
	ArgKindU8     ArgKind = abi.ArgU8
	ArgKindU16    ArgKind = abi.ArgU16
	ArgKindU32    ArgKind = abi.ArgU32
	ArgKindU64    ArgKind = abi.ArgU64
	ArgKindF16    ArgKind = abi.ArgF16
	ArgKindBF16   ArgKind = abi.ArgBF16
	ArgKindF32    ArgKind = abi.ArgF32
	ArgKindF64    ArgKind = abi.ArgF64
	ArgKindAny    ArgKind = abi.ArgAny // in ParamInfo only
)

var argKindNames = map[ArgKind]string{
	ArgKindBuffer: "buffer", ArgKindI8: "i8", ArgKindI16: "i16", ArgKindI32: "i32", ArgKindI64: "i64",
	ArgKindU8: "u8", ArgKindU16: "u16", ArgKindU32: "u32", ArgKindU64: "u64", ArgKindF16: "f16",
	ArgKindBF16: "bf16", ArgKindF32: "f32", ArgKindF64: "f64", ArgKindAny: "any",
}

func (k ArgKind) String() string {
	if s, ok := argKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind %d", int32(k))
}

// Arg is one typed kernel argument, made by ArgBuffer, ArgI32, ... It is
// a small value; the zero Arg is invalid.
type Arg struct {
	kind ArgKind
	size uint32
	val  uint64
	buf  *Buffer
	off  uint64
	n    uint64
}

// ArgBuffer passes the device address of a region (a buffer or a view).
func ArgBuffer(r Region) Arg {
	switch v := r.(type) {
	case *Buffer:
		if v != nil {
			return Arg{kind: ArgKindBuffer, size: 8, buf: v, n: v.size}
		}
	case View:
		if v.buf != nil {
			return Arg{kind: ArgKindBuffer, size: 8, buf: v.buf, off: v.off, n: v.n}
		}
	}
	return Arg{kind: ArgKindBuffer, size: 8} // nil: rejected by Launch
}

func scalar(k ArgKind, size uint32, v uint64) Arg { return Arg{kind: k, size: size, val: v} }

// Scalar arguments of each width.
func ArgI8(v int8) Arg     { return scalar(ArgKindI8, 1, uint64(uint8(v))) }
func ArgI16(v int16) Arg   { return scalar(ArgKindI16, 2, uint64(uint16(v))) }
func ArgI32(v int32) Arg   { return scalar(ArgKindI32, 4, uint64(uint32(v))) }
func ArgI64(v int64) Arg   { return scalar(ArgKindI64, 8, uint64(v)) }
func ArgU8(v uint8) Arg    { return scalar(ArgKindU8, 1, uint64(v)) }
func ArgU16(v uint16) Arg  { return scalar(ArgKindU16, 2, uint64(v)) }
func ArgU32(v uint32) Arg  { return scalar(ArgKindU32, 4, uint64(v)) }
func ArgU64(v uint64) Arg  { return scalar(ArgKindU64, 8, v) }
func ArgF32(v float32) Arg { return scalar(ArgKindF32, 4, uint64(math.Float32bits(v))) }
func ArgF64(v float64) Arg { return scalar(ArgKindF64, 8, math.Float64bits(v)) }

// ArgF16 passes v rounded to f16 (round to nearest even).
func ArgF16(v float32) Arg { return scalar(ArgKindF16, 2, uint64(floatbits.F16FromFloat32(v))) }

// ArgF16Bits passes raw f16 bits.
func ArgF16Bits(bits uint16) Arg { return scalar(ArgKindF16, 2, uint64(bits)) }

// ArgBF16 passes v rounded to bf16 (round to nearest even).
func ArgBF16(v float32) Arg { return scalar(ArgKindBF16, 2, uint64(floatbits.BF16FromFloat32(v))) }

// ArgBF16Bits passes raw bf16 bits.
func ArgBF16Bits(bits uint16) Arg { return scalar(ArgKindBF16, 2, uint64(bits)) }

// Kind is the argument's kind.
func (a Arg) Kind() ArgKind { return a.kind }
