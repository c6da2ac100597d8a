// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"

	"github.com/metrale/gpurt/core"
)

// checkAddRMSNorm: add_rmsnorm_T (gpurt.h) against float64: r becomes
// x + r rounded to T exactly (an f32 sum rounded to T is the float64 sum
// rounded to T: f32 holds more than twice T's digits), and x the RMSNorm of
// that rounded r, within rmsnorm_T's tolerance; rows at or past the grid
// keep both. A plugin without the kernel (it came after ABI 1.8) is skipped
// (checkRowKernel).
func checkAddRMSNorm(e *env, t core.DType) error {
	sz := t.Size()
	for _, c := range []struct{ rows, cols, grid, block int }{
		{3, 1, 3, 1}, {5, 64, 5, 32}, {4, 1000, 4, 256}, {2, 4096, 2, 1024}, {2, 4099, 2, 1024}, {6, 333, 4, 100}, {3, 512, 3, 37},
	} {
		x := randomValues(e.rng, t, c.rows*c.cols, 2)
		r := randomValues(e.rng, t, c.rows*c.cols, 2)
		w := randomValues(e.rng, t, c.cols, 1.5)
		eps := float32(1e-5 + e.rng.Float64()*1e-3)
		// x's view is 16-byte aligned (the vector path), r's by one element less
		// when the case has an odd number of columns (the scalar path).
		rpad := 16
		if c.cols%2 == 1 {
			rpad = sz
		}
		raw, err := runNorm(e, "add_rmsnorm", t, c.rows, c.cols, c.grid, c.block, eps,
			[3]rowSpec{{encode(t, x), 16}, {encode(t, r), rpad}, {encode(t, w), 0}}, "x", "r")
		if err != nil {
			return err
		}
		gotX, gotR := decode(t, raw[0]), decode(t, raw[1])
		what := fmt.Sprintf("rows %d cols %d grid %d block %d", c.rows, c.cols, c.grid, c.block)
		for row := 0; row < c.rows; row++ {
			lo := row * c.cols
			if row >= c.grid { // rows past the grid stay as they were
				for j := 0; j < c.cols; j++ {
					if gotX[lo+j] != x[lo+j] || gotR[lo+j] != r[lo+j] {
						return fmt.Errorf("%s: row %d past the grid was written", what, row)
					}
				}
				continue
			}
			sum := make([]float64, c.cols)
			for j := range sum {
				sum[j] = roundTo(t, x[lo+j]+r[lo+j])
				if gotR[lo+j] != sum[j] {
					return fmt.Errorf("%s: r[%d][%d] is %g, want %g + %g = %g (rounded to %s)", what, row, j, gotR[lo+j], x[lo+j], r[lo+j], sum[j], t)
				}
			}
			if j, want := normMiss(t, sum, w, gotX[lo:lo+c.cols], eps); j >= 0 {
				return fmt.Errorf("%s: x[%d][%d] is %g, want %g", what, row, j, gotX[lo+j], want)
			}
		}
	}
	return nil
}
