// SPDX-License-Identifier: Apache-2.0

// Package elems converts float64 values to and from the bytes of a device
// buffer of a core.DType (little-endian, rounded to nearest even): the
// conversions the conformance checks and the tests build their inputs and
// read their outputs with. The floating-point types are supported: F32,
// F16, BF16, FP8E4M3 and FP8E5M2; any other type panics.
package elems

import (
	"encoding/binary"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// Encode packs v as t, rounding to nearest even.
func Encode(t core.DType, v []float64) []byte {
	out := make([]byte, len(v)*t.Size())
	for i, x := range v {
		f := float32(x)
		switch t {
		case core.F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		case core.F16:
			binary.LittleEndian.PutUint16(out[2*i:], floatbits.F16FromFloat32(f))
		case core.BF16:
			binary.LittleEndian.PutUint16(out[2*i:], floatbits.BF16FromFloat32(f))
		case core.FP8E4M3:
			out[i] = floatbits.E4M3FromFloat32(f)
		case core.FP8E5M2:
			out[i] = floatbits.E5M2FromFloat32(f)
		default:
			panic("elems: no encoder for " + t.String())
		}
	}
	return out
}

// Decode unpacks the t values of b (a partial last element is ignored).
func Decode(t core.DType, b []byte) []float64 {
	sz := t.Size()
	if sz == 0 {
		panic("elems: no decoder for " + t.String())
	}
	out := make([]float64, len(b)/sz)
	for i := range out {
		switch t {
		case core.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		case core.F16:
			out[i] = float64(floatbits.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
		case core.BF16:
			out[i] = float64(floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
		case core.FP8E4M3:
			out[i] = float64(floatbits.E4M3ToFloat32(b[i]))
		case core.FP8E5M2:
			out[i] = float64(floatbits.E5M2ToFloat32(b[i]))
		default:
			panic("elems: no decoder for " + t.String())
		}
	}
	return out
}

// Round rounds x to the nearest value of t.
func Round(t core.DType, x float64) float64 {
	f := float32(x)
	switch t {
	case core.F32:
		return float64(f)
	case core.F16:
		return float64(floatbits.F16ToFloat32(floatbits.F16FromFloat32(f)))
	case core.BF16:
		return float64(floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(f)))
	case core.FP8E4M3:
		return float64(floatbits.E4M3ToFloat32(floatbits.E4M3FromFloat32(f)))
	case core.FP8E5M2:
		return float64(floatbits.E5M2ToFloat32(floatbits.E5M2FromFloat32(f)))
	}
	panic("elems: cannot round to " + t.String())
}
