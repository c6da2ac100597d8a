// SPDX-License-Identifier: Apache-2.0

package floatbits

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestKnownValues: exact values, rounding to nearest even, the limits and
// the special values of each format, from the formats' definitions.
func TestKnownValues(t *testing.T) {
	inf := float32(math.Inf(1))
	t.Run("f16", func(t *testing.T) {
		for _, c := range []struct {
			f    float32
			bits uint16
		}{
			{0, 0x0000}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff},
			{65520, 0x7c00}, // rounds up past the largest finite value
			{inf, 0x7c00}, {-inf, 0xfc00},
			{5.960464477539063e-08, 0x0001}, // smallest subnormal
			{1 + 1.0/2048, 0x3c00},          // a tie: to even (down)
			{1 + 3.0/2048, 0x3c02},          // a tie: to even (up)
		} {
			assert.Equal(t, c.bits, F16FromFloat32(c.f), "F16FromFloat32(%g)", c.f)
			if c.f != 65520 && c.f != 1+1.0/2048 && c.f != 1+3.0/2048 {
				assert.Equal(t, c.f, F16ToFloat32(c.bits), "F16ToFloat32(%#04x)", c.bits)
			}
		}
		assert.True(t, math.IsNaN(float64(F16ToFloat32(F16FromFloat32(float32(math.NaN()))))))
	})
	t.Run("bf16", func(t *testing.T) {
		for _, c := range []struct {
			f    float32
			bits uint16
		}{
			{0, 0x0000}, {1, 0x3f80}, {-2, 0xc000}, {inf, 0x7f80},
			{1 + 1.0/256, 0x3f80}, // a tie: to even (down)
			{1 + 3.0/256, 0x3f82}, // a tie: to even (up)
		} {
			assert.Equal(t, c.bits, BF16FromFloat32(c.f), "BF16FromFloat32(%g)", c.f)
		}
		assert.Equal(t, float32(1), BF16ToFloat32(0x3f80))
		assert.Equal(t, float32(-2), BF16ToFloat32(0xc000))
		assert.True(t, math.IsNaN(float64(BF16ToFloat32(BF16FromFloat32(float32(math.NaN()))))))
	})
	t.Run("e4m3", func(t *testing.T) {
		for _, c := range []struct {
			f    float32
			bits uint8
		}{
			{0, 0x00}, {1, 0x38}, {-1, 0xb8}, {448, 0x7e}, {2, 0x40},
			{1000, 0x7e}, // saturates: e4m3fn has no infinity
		} {
			assert.Equal(t, c.bits, E4M3FromFloat32(c.f), "E4M3FromFloat32(%g)", c.f)
		}
		assert.Equal(t, float32(448), E4M3ToFloat32(0x7e))
		assert.Equal(t, float32(1), E4M3ToFloat32(0x38))
		assert.True(t, math.IsNaN(float64(E4M3ToFloat32(0x7f))))
	})
	t.Run("e5m2", func(t *testing.T) {
		for _, c := range []struct {
			f    float32
			bits uint8
		}{
			{0, 0x00}, {1, 0x3c}, {-2, 0xc0}, {57344, 0x7b}, {inf, 0x7c},
		} {
			assert.Equal(t, c.bits, E5M2FromFloat32(c.f), "E5M2FromFloat32(%g)", c.f)
			assert.Equal(t, c.f, E5M2ToFloat32(c.bits), "E5M2ToFloat32(%#02x)", c.bits)
		}
		assert.True(t, math.IsNaN(float64(E5M2ToFloat32(E5M2FromFloat32(float32(math.NaN()))))))
	})
}

// TestRoundTrip: every f16, bf16 and fp8 bit pattern that is not a NaN
// survives widening and narrowing again.
func TestRoundTrip(t *testing.T) {
	roundTrips(t, "f16 %#04x", F16ToFloat32, F16FromFloat32)
	roundTrips(t, "bf16 %#04x", BF16ToFloat32, BF16FromFloat32)
	roundTrips(t, "e4m3 %#02x", E4M3ToFloat32, E4M3FromFloat32)
	roundTrips(t, "e5m2 %#02x", E5M2ToFloat32, E5M2FromFloat32)
}

// roundTrips checks that every bit pattern of T that to does not widen to
// a NaN narrows back to itself through from; msg formats the pattern.
func roundTrips[T uint8 | uint16](t *testing.T, msg string, to func(T) float32, from func(float32) T) {
	for b := T(0); ; b++ {
		if f := to(b); !math.IsNaN(float64(f)) {
			assert.Equal(t, b, from(f), msg, b)
		}
		if b == ^T(0) {
			return
		}
	}
}
