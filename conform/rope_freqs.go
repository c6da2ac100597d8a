// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// they were. A plugin without the kernel (after ABI 1.8) is skipped.
func checkRopeFreqs(e *env, t core.DType) error {
	if _, err := kernel(e.dev, "rope_neox_freqs_"+t.String()); errors.Is(err, core.ErrNotFound) {
		return skip("the plugin has no rope_neox_freqs_%s (it came after ABI 1.8)", t)
	}
	sz := t.Size()
	ulp := map[core.DType]float64{core.F32: 0x1p-23, core.F16: 0x1p-10, core.BF16: 0x1p-7}[t]
	for _, c := range []struct{ tokens, heads, hd, block, grid int }{ // grid 0: cover every pair
		{1, 1, 2, 1, 0}, {7, 3, 64, 32, 0}, {5, 2, 128, 256, 0}, {4, 4, 64, 64, 5}, {3, 40, 128, 256, 0},
	} {
		n := c.tokens * c.heads * c.hd
		pairs, half := n/2, c.hd/2
		grid := c.grid
		if grid == 0 {
			grid = (pairs + c.block - 1) / c.block
		}
		covered := min(pairs, grid*c.block)
		x := randomValues(e.rng, t, n, 2)
		pos := make([]int32, c.tokens)
		for i := range pos {
			pos[i] = int32(e.rng.IntN(131072))
		}
		pos[0] = 0
		// Llama 3.1-like frequencies: theta^(-2j/hd), the low ones divided by 8.
		inv := make([]float32, half)
		invBytes := make([]byte, 4*half)
		for j := range inv {
			inv[j] = float32(math.Pow(500000, -float64(2*j)/float64(c.hd)))
			if j > half/2 {
				inv[j] /= 8
			}
			binary.LittleEndian.PutUint32(invBytes[4*j:], math.Float32bits(inv[j]))
		}
		xb, err := newRowBuf(e, encode(t, x), sz)
		if err != nil {
			return err
		}
		defer xb.free()
		pb, err := newRowBuf(e, i32Bytes(pos), 4)
		if err != nil {
			return err
		}
		defer pb.free()
		fb, err := newRowBuf(e, invBytes, 4)
		if err != nil {
			return err
		}
		defer fb.free()
		if err := launchRow(e, "rope_neox_freqs", t, grid, c.block, core.ArgBuffer(xb.v), core.ArgBuffer(pb.v), core.ArgBuffer(fb.v),
			core.ArgScalar[uint64](uint64(c.tokens)), core.ArgScalar[uint64](uint64(c.heads)), core.ArgScalar[uint64](uint64(c.hd))); err != nil {
			return err
		}
		raw, err := xb.read("x")
		if err != nil {
			return err
		}
		got := decode(t, raw)
		r := func(v float64) float64 { return roundTo(t, v) }
		for p := 0; p < pairs; p++ {
			tk, rem := p/(c.heads*half), p%(c.heads*half)
			h, j := rem/half, rem%half
			i0 := (tk*c.heads+h)*c.hd + j
			i1 := i0 + half
			u, v := x[i0], x[i1]
			w0, w1, slack := u, v, 0.0
			if p < covered {
				a := float64(float32(pos[tk]) * inv[j])
				cs, sn := r(float64(float32(math.Cos(a)))), r(float64(float32(math.Sin(a))))
				w0, w1 = r(r(u*cs)-r(v*sn)), r(r(v*cs)+r(u*sn))
				slack = 2*ulp*(math.Abs(u)+math.Abs(v)) + tinyOf(t)
			}
			if math.Abs(got[i0]-w0) > slack || math.Abs(got[i1]-w1) > slack || math.IsNaN(got[i0]+got[i1]) {
				return fmt.Errorf("tokens %d heads %d head_dim %d grid %d: pair %d (token %d pos %d head %d j %d) is (%g, %g), want (%g, %g)",
					c.tokens, c.heads, c.hd, grid, p, tk, pos[tk], h, j, got[i0], got[i1], w0, w1)
			}
		}
	}
	return nil
}
