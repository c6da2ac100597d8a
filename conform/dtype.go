// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// encode packs values as t, rounding to nearest even.
func encode(t core.DType, v []float64) []byte {
	sz := t.Size()
	out := make([]byte, len(v)*sz)
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
			panic("conform: no encoder for " + t.String())
		}
	}
	return out
}

// decode unpacks t values.
func decode(t core.DType, b []byte) []float64 {
	sz := t.Size()
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
			panic("conform: no decoder for " + t.String())
		}
	}
	return out
}

// roundTo rounds x to the nearest value of t.
func roundTo(t core.DType, x float64) float64 {
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
	panic("conform: cannot round to " + t.String())
}

// randomValues returns n values of t, uniform in [-r, r], none of them
// zero, already rounded to t (so the reference sees exactly what the
// device does).
func randomValues(rng *rand.Rand, t core.DType, n int, r float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		for {
			x := roundTo(t, (rng.Float64()*2-1)*r)
			if x != 0 {
				v[i] = x
				break
			}
		}
	}
	return v
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32() | 1)
	}
	return b
}
