// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"encoding/binary"
	"math"

	"github.com/metrale/gpurt/core"
)

// checkRopeFreqs: rope_neox_freqs_T (gpurt.h) against float64 with its
// roundings: c and s are cos and sin of f32(pos) * inv_freq[j] rounded to
// f32 and then to T, each product and the sum rounded to T. A backend's
// double cos and sin may differ from Go's in the last bit, which can move c
// or s by one unit of T when the value lies on a rounding boundary: the
// slack is two units of T at the pair's magnitude (a wrong frequency,
// position or pairing is off by far more). Pairs past the grid stay as
// they were. A plugin without the kernel (after ABI 1.8) is skipped
// (checkRowKernel).
func checkRopeFreqs(e *env, t core.DType) error {
	ulp := map[core.DType]float64{core.F32: 0x1p-23, core.F16: 0x1p-10, core.BF16: 0x1p-7}[t]
	r := func(v float64) float64 { return roundTo(t, v) }
	for _, k := range []struct{ tokens, heads, hd, block, grid int }{ // grid 0: cover every pair
		{1, 1, 2, 1, 0}, {7, 3, 64, 32, 0}, {5, 2, 128, 256, 0}, {4, 4, 64, 64, 5}, {3, 40, 128, 256, 0},
	} {
		half := k.hd / 2
		c, err := newRopeCase(e, t, k.tokens, k.heads, k.hd, k.block, k.grid, 131072)
		if err != nil {
			return err
		}
		defer c.free()
		// Llama 3.1-like frequencies: theta^(-2j/hd), the low ones divided by 8.
		inv := make([]float32, half)
		invBytes := make([]byte, 4*half)
		for j := range inv {
			inv[j] = float32(math.Pow(500000, -float64(2*j)/float64(k.hd)))
			if j > half/2 {
				inv[j] /= 8
			}
			binary.LittleEndian.PutUint32(invBytes[4*j:], math.Float32bits(inv[j]))
		}
		fb, err := newRowBuf(e, invBytes, 4)
		if err != nil {
			return err
		}
		defer fb.free()
		if err := launchRow(e, "rope_neox_freqs", t, c.grid, k.block, core.ArgBuffer(c.xb.v), core.ArgBuffer(c.pb.v), core.ArgBuffer(fb.v),
			core.ArgScalar[uint64](uint64(k.tokens)), core.ArgScalar[uint64](uint64(k.heads)), core.ArgScalar[uint64](uint64(k.hd))); err != nil {
			return err
		}
		err = c.check(false, func(tk, j int, u, v float64) (float64, float64, float64) {
			a := float64(float32(c.pos[tk]) * inv[j])
			cs, sn := r(float64(float32(math.Cos(a)))), r(float64(float32(math.Sin(a))))
			return r(r(u*cs) - r(v*sn)), r(r(v*cs) + r(u*sn)), 2*ulp*(math.Abs(u)+math.Abs(v)) + tinyOf(t)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
