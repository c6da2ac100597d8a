// SPDX-License-Identifier: Apache-2.0

// Package floatbits converts float32 to and from the bit patterns of the
// small float formats gpurt's kernels and GEMMs read and write: IEEE
// binary16 (f16), bfloat16 (bf16) and the OCP 8-bit formats e4m3 (fn) and
// e5m2. Narrowing rounds to nearest even. Use it to fill host buffers
// of f16, bf16 or fp8 elements and to read results back.
package floatbits

import "math"

// F16FromFloat32 rounds f to IEEE binary16 (round to nearest even).
func F16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		m := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// F16ToFloat32 widens IEEE binary16 bits.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// BF16FromFloat32 rounds f to bfloat16 (round to nearest even).
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16ToFloat32 widens bfloat16 bits.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// E4M3ToFloat32 decodes an OCP fp8 e4m3 (fn: no infinities, 0x7f and
// 0xff are NaN, largest finite 448).
func E4M3ToFloat32(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	e := int(b>>3) & 0xf
	m := float32(b & 7)
	if e == 0xf && b&7 == 7 {
		return float32(math.NaN())
	}
	if e == 0 {
		return sign * m / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + m/8) * float32(math.Ldexp(1, e-7))
}

// E5M2ToFloat32 decodes an OCP fp8 e5m2 (IEEE-like: infinities, NaNs).
func E5M2ToFloat32(b uint8) float32 { return F16ToFloat32(uint16(b) << 8) }

// E4M3FromFloat32 rounds f to fp8 e4m3 (nearest even; beyond 448
// saturates to ±448; NaN stays NaN).
func E4M3FromFloat32(f float32) uint8 {
	if f != f {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(float64(f)) {
		sign, f = 0x80, -f
	}
	if f >= 464 { // halfway between 448 and the next step rounds up: saturate
		return sign | 0x7e
	}
	// scale to units of the smallest subnormal (2^-9) when subnormal
	fr, exp := math.Frexp(float64(f)) // f = fr * 2^exp, fr in [0.5, 1)
	if f == 0 {
		return sign
	}
	e := exp - 1 + 7 // biased exponent of the normal form
	if e < 1 {
		q := math.RoundToEven(float64(f) * 512) // subnormal: m * 2^-9
		if q >= 8 {
			return sign | 0x08 // rounded up to the smallest normal
		}
		return sign | uint8(q)
	}
	m := math.RoundToEven((fr*2 - 1) * 8)
	if m == 8 {
		m, e = 0, e+1
	}
	if e > 15 || (e == 15 && m == 7) {
		return sign | 0x7e
	}
	return sign | uint8(e)<<3 | uint8(m)
}

// E5M2FromFloat32 rounds f to fp8 e5m2 (nearest even, through f16).
func E5M2FromFloat32(f float32) uint8 {
	h := F16FromFloat32(f)
	if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
		return uint8(h>>8) | 0x02 // NaN
	}
	lo := h & 0xff
	hi := h >> 8
	if lo > 0x80 || (lo == 0x80 && hi&1 == 1) {
		hi++
	}
	return uint8(hi)
}
