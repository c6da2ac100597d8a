// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"

	"github.com/metrale/gpurt/internal/abi"
)

// argKind is the kind of a kernel argument: a GPURT_ARG_* value, which
// internal/abi names (abi.ArgBuffer, ...).
type argKind int32

func (k argKind) String() string {
	if s, ok := abi.ArgKindNames[int32(k)]; ok {
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
			return Arg{kind: abi.ArgBuffer, size: 8, buf: v, n: v.size}
		}
	case View:
		if v.buf != nil {
			return Arg{kind: abi.ArgBuffer, size: 8, buf: v.buf, off: v.off, n: v.n}
		}
	}
	return Arg{kind: abi.ArgBuffer, size: 8} // nil: rejected by Launch
}

func scalar(k argKind, size uint32, v uint64) Arg { return Arg{kind: k, size: size, val: v} }

// ArgScalar passes v as a scalar argument of v's type: a fixed-width
// integer (int8 .. uint64) or a float (float32, float64). Give the type
// where v is an untyped constant: ArgScalar[uint32](256). For f16 and
// bf16 see ArgF16Bits and ArgBF16Bits.
func ArgScalar[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64](v T) Arg {
	switch x := any(v).(type) {
	case int8:
		return scalar(abi.ArgI8, 1, uint64(uint8(x)))
	case int16:
		return scalar(abi.ArgI16, 2, uint64(uint16(x)))
	case int32:
		return scalar(abi.ArgI32, 4, uint64(uint32(x)))
	case int64:
		return scalar(abi.ArgI64, 8, uint64(x))
	case uint8:
		return scalar(abi.ArgU8, 1, uint64(x))
	case uint16:
		return scalar(abi.ArgU16, 2, uint64(x))
	case uint32:
		return scalar(abi.ArgU32, 4, uint64(x))
	case uint64:
		return scalar(abi.ArgU64, 8, x)
	case float32:
		return scalar(abi.ArgF32, 4, uint64(math.Float32bits(x)))
	case float64:
		return scalar(abi.ArgF64, 8, math.Float64bits(x))
	}
	panic("unreachable: ArgScalar's type set is the cases above")
}

// ArgF16Bits passes an f16 scalar: its bits, passed as they are (NaN
// payloads too). For a float32 v rounded to f16 (to nearest even):
// ArgF16Bits(floatbits.F16FromFloat32(v)).
func ArgF16Bits(bits uint16) Arg { return scalar(abi.ArgF16, 2, uint64(bits)) }

// ArgBF16Bits passes a bf16 scalar: its bits, passed as they are. For a
// float32 v rounded to bf16 (to nearest even):
// ArgBF16Bits(floatbits.BF16FromFloat32(v)).
func ArgBF16Bits(bits uint16) Arg { return scalar(abi.ArgBF16, 2, uint64(bits)) }
