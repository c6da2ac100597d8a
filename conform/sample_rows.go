// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/sampling"
)

// sample_rows_T (gpurt.h, 1.8): per-request sampling against the float64
// reference of package sampling. Per row: the token (exactly, unless the
// draw lies at a boundary within summation noise), the logprob, the
// penalised logits written back (exactly), nothing written outside the
// views or past the grid; the same request in another row gives the same
// token and logprob; and the draws of one request over many offsets
// follow the reference distribution (chi-square at 1e-6).

// runSampleRows launches sample_rows_T over x (rows x cols, the values
// the device holds) with ps on grid rows of block threads and returns the
// tokens, logprobs and the logits after the launch.
func runSampleRows(e *env, t core.DType, x []float64, ps []sampling.Params, hist, grid, block int) ([]int32, []float32, []float64, error) {
	rows := len(ps)
	cols := len(x) / rows
	b, err := sampling.NewBatch(rows, cols, hist)
	if err != nil {
		return nil, nil, nil, err
	}
	for r := range ps {
		if err := b.Set(r, &ps[r]); err != nil {
			return nil, nil, nil, err
		}
	}
	bufs, free, err := newRowBufs(e, rowSpec{encode(t, x), 3 * t.Size()}, rowSpec{b.Bytes(), 5 /* any alignment */}, outSpec(sampling.OutBytes(rows), 4))
	if err != nil {
		return nil, nil, nil, err
	}
	defer free()
	xb, pb, ob := bufs[0], bufs[1], bufs[2]
	err = launchRow(e, "sample_rows", t, grid, block, core.ArgBuffer(ob.v), core.ArgBuffer(xb.v), core.ArgBuffer(pb.v),
		core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(cols)), core.ArgScalar[uint64](uint64(hist)))
	if err != nil {
		return nil, nil, nil, err
	}
	raw, err := ob.read("out")
	if err != nil {
		return nil, nil, nil, err
	}
	after, err := xb.read("logits")
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := pb.read("params"); err != nil {
		return nil, nil, nil, err
	}
	tok, lp := make([]int32, rows), make([]float32, rows)
	if err := sampling.Decode(raw, rows, tok, lp); err != nil {
		return nil, nil, nil, err
	}
	return tok, lp, decode(t, after), nil
}

func roundFunc(t core.DType) func(float64) float64 {
	return func(v float64) float64 { return roundTo(t, v) }
}

// sampleRowsParams is a request of one of the kinds the check mixes.
func sampleRowsParams(e *env, kind, cols, hist int) sampling.Params {
	p := sampling.Params{Temperature: float32(0.3 + 1.4*e.rng.Float64()), TopP: 1, Seed: e.rng.Uint64(), Offset: e.rng.Uint64N(1 << 40)}
	switch kind % 6 {
	case 0:
		p.Temperature = 0
	case 1:
		p.TopK = 1 + e.rng.IntN(cols)
	case 2:
		p.TopP = float32(0.1 + 0.85*e.rng.Float64())
	case 3:
		p.MinP = float32(0.01 + 0.4*e.rng.Float64())
	case 4:
		p.TopK, p.TopP, p.MinP = 1+e.rng.IntN(cols), float32(0.5+0.45*e.rng.Float64()), float32(0.05*e.rng.Float64())
	}
	if kind%2 == 1 && hist > 0 {
		p.RepetitionPenalty = float32(0.6 + 0.8*e.rng.Float64())
		p.PresencePenalty = float32(e.rng.Float64() - 0.5)
		for range e.rng.IntN(hist + 1) {
			p.History = append(p.History, int32(e.rng.IntN(cols)))
		}
	}
	return p
}

func checkSampleRows(e *env, t core.DType) error {
	if _, _, minor := inspect.PluginVersion(e.rt); minor < 8 {
		return skip("the plugin speaks ABI 1.%d; sample_rows_T needs 1.8", minor)
	}
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct{ rows, cols, hist, grid, block int }{
		{6, 1, 0, 6, 1}, {12, 100, 8, 12, 32}, {8, 1000, 4, 8, 256}, {5, 4099, 16, 5, 1024}, {7, 333, 2, 4, 100},
	} {
		x := randomValues(e.rng, t, c.rows*c.cols, 3)
		ps := make([]sampling.Params, c.rows)
		for r := range ps {
			ps[r] = sampleRowsParams(e, r, c.cols, c.hist)
		}
		if c.cols >= 8 { // sample_T's non-finite rule, per request
			row := x[2*c.cols : 3*c.cols]
			row[0], row[3] = nan, inf // +Inf: the argmax, logprob NaN
			row = x[3*c.cols : 4*c.cols]
			row[1], row[5], row[c.cols-1] = nan, math.Inf(-1), nan // never drawn
		}
		tok, lp, after, err := runSampleRows(e, t, x, ps, c.hist, c.grid, c.block)
		if err != nil {
			return fmt.Errorf("rows %d cols %d: %w", c.rows, c.cols, err)
		}
		for r := range ps {
			where := fmt.Sprintf("rows %d cols %d block %d: row %d (%+v)", c.rows, c.cols, c.block, r, ps[r])
			xr, ar := x[r*c.cols:(r+1)*c.cols], after[r*c.cols:(r+1)*c.cols]
			if r >= c.grid {
				if tok[r] != -286331154 { // 0xeeeeeeee
					return fmt.Errorf("%s: a row past the grid was written", where)
				}
				continue
			}
			ref := sampling.Reference(xr, &ps[r], roundFunc(t))
			for i := range ar {
				if math.Float64bits(ar[i]) != math.Float64bits(ref.Logits[i]) && !(math.IsNaN(ar[i]) && math.IsNaN(ref.Logits[i])) {
					return fmt.Errorf("%s: logit %d after the penalties is %g, want %g", where, i, ar[i], ref.Logits[i])
				}
			}
			g := int(tok[r])
			if g < 0 || g >= c.cols {
				return fmt.Errorf("%s: token %d is not an index of the row", where, g)
			}
			if ref.Near {
				if v := ref.Logits[g]; math.IsNaN(v) || math.IsInf(v, -1) {
					return fmt.Errorf("%s: token %d is %g, which weighs nothing", where, g, v)
				}
				continue
			}
			if g != ref.Token {
				return fmt.Errorf("%s: token %d, want %d", where, g, ref.Token)
			}
			got, want := float64(lp[r]), ref.LogProb
			if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && math.Abs(got-want) > 1e-4*(1+math.Abs(want))) {
				return fmt.Errorf("%s: logprob %g, want %g", where, got, want)
			}
		}
	}
	if err := checkSampleRowsIndependent(e, t); err != nil {
		return err
	}
	return checkSampleRowsStats(e, t)
}

// The same request in another row of another batch gives the same token
// and logprob, bit for bit.
func checkSampleRowsIndependent(e *env, t core.DType) error {
	const cols = 500
	req := sampling.Params{Temperature: 1.1, TopK: 100, TopP: 0.97, Seed: e.rng.Uint64(), Offset: 41}
	row := randomValues(e.rng, t, cols, 2)
	var tok0 int32
	var lp0 float32
	for i, rows := range []int{1, 9} {
		at := rows - 1
		x := make([]float64, 0, rows*cols)
		ps := make([]sampling.Params, rows)
		for r := range ps {
			if r == at {
				x, ps[r] = append(x, row...), req
				continue
			}
			x, ps[r] = append(x, randomValues(e.rng, t, cols, 2)...), sampleRowsParams(e, r, cols, 0)
		}
		tok, lp, _, err := runSampleRows(e, t, x, ps, 0, rows, 128)
		if err != nil {
			return err
		}
		if i == 0 {
			tok0, lp0 = tok[at], lp[at]
		} else if tok[at] != tok0 || math.Float32bits(lp[at]) != math.Float32bits(lp0) {
			return fmt.Errorf("one request at row 0 of 1 and row %d of %d: token %d then %d, logprob %g then %g", at, rows, tok0, tok[at], lp0, lp[at])
		}
	}
	return nil
}

// One request's draws over many offsets follow the reference's
// distribution (chi-square at 1e-6, Wilson-Hilferty).
func checkSampleRowsStats(e *env, t core.DType) error {
	n := 3000
	if e.opts.Quick {
		n = 1500
	}
	const cols = 16
	base := randomValues(e.rng, t, cols, 1.2)
	p := sampling.Params{Temperature: 0.8, TopK: 12, TopP: 0.95, MinP: 0.02, RepetitionPenalty: 1.2, PresencePenalty: 0.1, History: []int32{2, 7}, Seed: e.rng.Uint64()}
	x := make([]float64, 0, n*cols)
	ps := make([]sampling.Params, n)
	for r := range ps {
		x, ps[r] = append(x, base...), p
		ps[r].Offset = uint64(r)
	}
	tok, _, _, err := runSampleRows(e, t, x, ps, 2, n, 32)
	if err != nil {
		return err
	}
	ref := sampling.Reference(base, &p, roundFunc(t))
	counts := map[int]int{}
	for _, tk := range tok {
		if _, ok := ref.Probs[int(tk)]; !ok {
			return fmt.Errorf("%d draws of %+v: token %d is outside the kept set %v", n, p, tk, ref.Probs)
		}
		counts[int(tk)]++
	}
	var stat float64
	for c, pr := range ref.Probs {
		d := float64(counts[c]) - pr*float64(n)
		stat += d * d / (pr * float64(n))
	}
	k := float64(len(ref.Probs) - 1)
	if k < 1 {
		return nil
	}
	a := 2 / (9 * k)
	crit := k * math.Pow(1-a+4.753*math.Sqrt(a), 3)
	if stat > crit {
		return fmt.Errorf("%d draws of %+v: chi-square %.1f > %.1f (%d degrees of freedom, p 1e-6): counts %v, reference %v", n, p, stat, crit, int(k), counts, ref.Probs)
	}
	return nil
}
