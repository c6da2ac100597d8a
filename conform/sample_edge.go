// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
)

// Non-finite logits in argmax_T and sample_T (gpurt.h, "Non-finite
// logits"): NaN ranks below every number and weighs nothing; a row whose
// maximum is +Inf gives its first +Inf; a row with no finite value gives
// the argmax (all NaN: index 0). Never -1, never an index outside the
// row, never a NaN. A row of no columns is refused at launch.

// sampleEdgeChecks: one check per element type.
func sampleEdgeChecks() []check {
	var cs []check
	for _, t := range elemTypes {
		cs = append(cs, check{"kernel/sample_nonfinite/" + t.String(), func(e *env) error { return checkSampleNonFinite(e, t) }})
	}
	return cs
}

// edgeRow is one row of an edge case: how to fill it and, where the rules
// fix it whatever the parameters, the index sample_T and argmax_T return
// (-1: any token of the reference's kept set that is a number).
type edgeRow struct {
	name string
	fill func(row []float64, big float64)
	want int
}

// edgeRows are the rows, cols wide each (cols >= 8); big is a value that
// overflows the element type to +Inf (an f16 logit of 1e5).
func edgeRows() []edgeRow {
	nan, inf := math.NaN(), math.Inf(1)
	return []edgeRow{
		{"NaN among numbers", func(r []float64, _ float64) { r[0], r[3], r[len(r)-1] = nan, nan, nan }, -1},
		{"NaN where the maximum would be", func(r []float64, _ float64) { r[5] = nan; r[2] = 3.5 }, -1},
		{"one +Inf", func(r []float64, _ float64) { r[6] = inf }, 6},
		{"two +Inf: the first", func(r []float64, _ float64) { r[7], r[4] = inf, inf }, 4},
		{"+Inf and NaN", func(r []float64, _ float64) { r[1], r[2] = nan, inf }, 2},
		{"a logit overflowing to +Inf", func(r []float64, big float64) { r[3] = big }, 3},
		{"-Inf among numbers", func(r []float64, _ float64) {
			for i := 0; i < len(r); i += 2 {
				r[i] = math.Inf(-1)
			}
		}, -1},
		{"all -Inf", func(r []float64, _ float64) {
			for i := range r {
				r[i] = math.Inf(-1)
			}
		}, 0},
		{"all NaN", func(r []float64, _ float64) {
			for i := range r {
				r[i] = nan
			}
		}, 0},
		{"-Inf and NaN only", func(r []float64, _ float64) {
			for i := range r {
				r[i] = nan
			}
			r[5], r[6] = math.Inf(-1), math.Inf(-1)
		}, 5},
		{"one number among NaN", func(r []float64, _ float64) {
			for i := range r {
				r[i] = nan
			}
			r[3] = -2
		}, 3},
	}
}

// overflowValue is a finite float64 that rounds to +Inf in t.
func overflowValue(t core.DType) float64 {
	if t == core.F16 {
		return 1e5 // f16's largest is 65504
	}
	return 1e39 // beyond float32's and bfloat16's largest
}

func checkSampleNonFinite(e *env, t core.DType) error {
	const cols = 37
	rows := edgeRows()
	n := len(rows)
	big := overflowValue(t)
	if v := roundTo(t, big); !math.IsInf(v, 1) {
		return fmt.Errorf("internal: %g does not overflow %v (rounds to %g)", big, t, v)
	}
	x := randomValues(e.rng, t, n*cols, 3)
	for r, er := range rows {
		er.fill(x[r*cols:(r+1)*cols], big)
	}
	ref := make([]float64, len(x)) // what the device holds
	for i, v := range x {
		ref[i] = roundTo(t, v)
	}
	// A row of no columns has no index to give: the launch is refused
	// (csrc/gp_contract.c: cols from 1 to 2^31-1), by every backend alike.
	for _, k := range []struct {
		name  string
		extra []core.Arg
	}{
		{"argmax", nil},
		{"sample", []core.Arg{core.ArgScalar[uint64](0), core.ArgScalar[float32](1), core.ArgScalar[float32](1), core.ArgScalar[uint64](e.rng.Uint64())}},
	} {
		_, err := rowArgmax(e, k.name, t, nil, 3, 0, 3, 32, k.extra...)
		if !errors.Is(err, core.ErrInvalidArgument) {
			return fmt.Errorf("%s, cols 0: error %v, want one matching ErrInvalidArgument", k.name, err)
		}
	}
	params := []struct {
		topK       int
		topP, temp float64
	}{
		{0, 1, 1}, {5, 0.9, 0.7}, {0, 0.5, 2}, {3, 1, 0.05}, {0, 1, math.Inf(1)}, {1, 1, 1}, {0, 1, 0},
	}
	for _, block := range []int{1, 32, 128} {
		am, err := rowArgmax(e, "argmax", t, x, n, cols, n, block)
		if err != nil {
			return err
		}
		for r, er := range rows {
			row := ref[r*cols : (r+1)*cols]
			want := rowOrder(row)[0]
			if er.want >= 0 && want != er.want {
				return fmt.Errorf("internal: %s: the reference argmax is %d, the rule says %d", er.name, want, er.want)
			}
			if int(am[r]) != want {
				return fmt.Errorf("argmax, block %d: %s: index %d, want %d", block, er.name, am[r], want)
			}
		}
		for _, p := range params {
			seed := e.rng.Uint64()
			extra := []core.Arg{core.ArgScalar[uint64](uint64(p.topK)), core.ArgScalar[float32](float32(p.topP)), core.ArgScalar[float32](float32(p.temp)), core.ArgScalar[uint64](seed)}
			got, err := rowArgmax(e, "sample", t, x, n, cols, n, block, extra...)
			if err != nil {
				return err
			}
			for r, er := range rows {
				row := ref[r*cols : (r+1)*cols]
				g := int(got[r])
				where := fmt.Sprintf("sample top_k %d top_p %g temperature %g seed %#x, block %d: %s", p.topK, p.topP, p.temp, seed, block, er.name)
				if g < 0 || g >= cols {
					return fmt.Errorf("%s: token %d is not an index of the row (0 to %d)", where, g, cols-1)
				}
				if er.want >= 0 {
					if g != er.want {
						return fmt.Errorf("%s: token %d (%g), want %d (%g)", where, g, row[g], er.want, row[er.want])
					}
					continue
				}
				if math.IsNaN(row[g]) || math.IsInf(row[g], -1) {
					return fmt.Errorf("%s: token %d is %g, which weighs nothing", where, g, row[g])
				}
				tok, near, allowed := sampleRef(row, p.topK, float64(float32(p.topP)), float64(float32(p.temp)), seed, r)
				if !allowed[g] {
					return fmt.Errorf("%s: token %d is outside the kept set (%d tokens)", where, g, len(allowed))
				}
				if !near && g != tok {
					return fmt.Errorf("%s: token %d, want %d", where, g, tok)
				}
			}
		}
	}
	return nil
}
