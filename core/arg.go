// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"

	"github.com/metrale/gpurt/internal/abi"
)

// argKind is the kind of a kernel argument (GPURT_ARG_*).
type argKind int32

// Argument kinds.
const (
	argKindBuffer argKind = abi.ArgBuffer
	argKindI8     argKind = abi.ArgI8
	argKindI16    argKind = abi.ArgI16
	argKindI32    argKind = abi.ArgI32
	argKindI64    argKind = abi.ArgI64
	argKindU8     argKind = abi.ArgU8
	argKindU16    argKind = abi.ArgU16
	argKindU32    argKind = abi.ArgU32
	argKindU64    argKind = abi.ArgU64
	argKindF16    argKind = abi.ArgF16
	argKindBF16   argKind = abi.ArgBF16
	argKindF32    argKind = abi.ArgF32
	argKindF64    argKind = abi.ArgF64
	argKindAny    argKind = abi.ArgAny // in a kernel's parameters only
)

var argKindNames = map[argKind]string{
	argKindBuffer: "buffer", argKindI8: "i8", argKindI16: "i16", argKindI32: "i32", argKindI64: "i64",
	argKindU8: "u8", argKindU16: "u16", argKindU32: "u32", argKindU64: "u64", argKindF16: "f16",
	argKindBF16: "bf16", argKindF32: "f32", argKindF64: "f64", argKindAny: "any",
}

func (k argKind) String() string {
	if s, ok := argKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind %d", int32(k))
}

// Arg is one typed kernel argument, made by ArgBuffer, ArgScalar,
// ArgF16Bits or ArgBF16Bits. It is a small value; the zero Arg is invalid.
type Arg struct {
	kind argKind
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
			return Arg{kind: argKindBuffer, size: 8, buf: v, n: v.size}
		}
	case View:
		if v.buf != nil {
			return Arg{kind: argKindBuffer, size: 8, buf: v.buf, off: v.off, n: v.n}
		}
	}
	return Arg{kind: argKindBuffer, size: 8} // nil: rejected by Launch
}

func scalar(k argKind, size uint32, v uint64) Arg { return Arg{kind: k, size: size, val: v} }

// ArgScalar passes v as a scalar argument of v's type: a fixed-width
// integer (int8 .. uint64) or a float (float32, float64). Give the type
// where v is an untyped constant: ArgScalar[uint32](256). For f16 and
// bf16 see ArgF16Bits and ArgBF16Bits.
func ArgScalar[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64](v T) Arg {
	switch x := any(v).(type) {
	case int8:
		return scalar(argKindI8, 1, uint64(uint8(x)))
	case int16:
		return scalar(argKindI16, 2, uint64(uint16(x)))
	case int32:
		return scalar(argKindI32, 4, uint64(uint32(x)))
	case int64:
		return scalar(argKindI64, 8, uint64(x))
	case uint8:
		return scalar(argKindU8, 1, uint64(x))
	case uint16:
		return scalar(argKindU16, 2, uint64(x))
	case uint32:
		return scalar(argKindU32, 4, uint64(x))
	case uint64:
		return scalar(argKindU64, 8, x)
	case float32:
		return scalar(argKindF32, 4, uint64(math.Float32bits(x)))
	case float64:
		return scalar(argKindF64, 8, math.Float64bits(x))
	}
	panic("unreachable: ArgScalar's type set is the cases above")
}

// ArgF16Bits passes an f16 scalar: its bits, passed as they are (NaN
// payloads too). For a float32 v rounded to f16 (to nearest even):
// ArgF16Bits(floatbits.F16FromFloat32(v)).
func ArgF16Bits(bits uint16) Arg { return scalar(argKindF16, 2, uint64(bits)) }

// ArgBF16Bits passes a bf16 scalar: its bits, passed as they are. For a
// float32 v rounded to bf16 (to nearest even):
// ArgBF16Bits(floatbits.BF16FromFloat32(v)).
func ArgBF16Bits(bits uint16) Arg { return scalar(argKindBF16, 2, uint64(bits)) }
