// SPDX-License-Identifier: Apache-2.0

package sampling

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/elems"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// dev is a device of a mock runtime (one per test).
func dev(t *testing.T) *core.Device {
	rt := mockrt.Open(t, "")
	return mockrt.Device0(t, rt)
}

func roundOf(dt core.DType) func(float64) float64 {
	return func(v float64) float64 { return elems.Round(dt, v) }
}

// run samples rows x cols logits (rounded to dt first) with ps on d and
// returns the tokens, logprobs and the logits after the kernel.
func run(t *testing.T, d *core.Device, dt core.DType, x []float64, ps []Params, hist int) ([]int32, []float32, []float64) {
	t.Helper()
	rows := len(ps)
	cols := len(x) / rows
	b, err := NewBatch(rows, cols, hist)
	require.NoError(t, err)
	for r := range ps {
		require.NoError(t, b.Set(r, &ps[r]))
	}
	sm, err := NewSampler(d, dt)
	require.NoError(t, err)
	xb := mockrt.Alloc(t, d, len(x)*dt.Size())
	pb := mockrt.Alloc(t, d, len(b.Bytes()))
	ob := mockrt.Alloc(t, d, OutBytes(rows))
	require.NoError(t, core.CopyFromHost(xb, elems.Encode(dt, x)))
	require.NoError(t, core.CopyFromHost(pb, b.Bytes()))
	s := mockrt.Stream(t, d)
	require.NoError(t, sm.Sample(s, ob, xb, pb, rows, cols, hist))
	require.NoError(t, s.Synchronize())
	raw := make([]byte, OutBytes(rows))
	require.NoError(t, core.CopyToHost(raw, ob))
	tok, lp := make([]int32, rows), make([]float32, rows)
	require.NoError(t, Decode(raw, rows, tok, lp))
	after := make([]byte, len(x)*dt.Size())
	require.NoError(t, core.CopyToHost(after, xb))
	return tok, lp, elems.Decode(dt, after)
}

func randomRow(rng *rand.Rand, dt core.DType, cols int, scale float64) []float64 {
	r := roundOf(dt)
	x := make([]float64, cols)
	for i := range x {
		x[i] = r(rng.NormFloat64() * scale)
	}
	return x
}

func randomParams(rng *rand.Rand, cols, hist int) Params {
	p := Params{Temperature: float32(0.2 + 1.5*rng.Float64()), TopP: 1, Seed: rng.Uint64(), Offset: rng.Uint64N(1000)}
	switch rng.IntN(6) {
	case 0:
		p.TopK = 1 + rng.IntN(cols)
	case 1:
		p.TopP = float32(0.05 + 0.9*rng.Float64())
	case 2:
		p.MinP = float32(0.01 + 0.5*rng.Float64())
	case 3:
		p.TopK, p.TopP, p.MinP = 1+rng.IntN(cols), float32(0.3+0.6*rng.Float64()), float32(0.02*rng.Float64())
	case 4:
		p.Temperature = 0
	}
	if rng.IntN(2) == 0 && hist > 0 {
		p.RepetitionPenalty = float32(0.5 + rng.Float64())
		p.PresencePenalty = float32(rng.Float64() - 0.5)
		n := rng.IntN(hist + 1)
		for range n {
			p.History = append(p.History, int32(rng.IntN(cols)))
		}
	}
	return p
}

// Every row's token equals the float64 reference's for the same u (unless
// the draw lies at a boundary within summation noise), the logprob agrees,
// and the penalised logits are written back exactly.
func TestSampleMatchesReference(t *testing.T) {
	d := dev(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []core.DType{core.F32, core.F16, core.BF16} {
		for _, shape := range []struct{ rows, cols, hist int }{{7, 1, 0}, {16, 50, 4}, {9, 1000, 16}, {3, 4099, 0}} {
			x := make([]float64, 0, shape.rows*shape.cols)
			ps := make([]Params, shape.rows)
			for r := range ps {
				x = append(x, randomRow(rng, dt, shape.cols, 3)...)
				ps[r] = randomParams(rng, shape.cols, shape.hist)
			}
			tok, lp, after := run(t, d, dt, x, ps, shape.hist)
			near := 0
			for r := range ps {
				row := x[r*shape.cols : (r+1)*shape.cols]
				ref := Reference(row, &ps[r], roundOf(dt))
				where := []any{"%v rows %d cols %d row %d params %+v", dt, shape.rows, shape.cols, r, ps[r]}
				assert.Equal(t, ref.Logits, after[r*shape.cols:(r+1)*shape.cols], where...)
				if ref.Near {
					near++
					assert.Contains(t, ref.Probs, int(tok[r]), where...)
					continue
				}
				assert.Equal(t, ref.Token, int(tok[r]), where...)
				assert.InDelta(t, ref.LogProb, float64(lp[r]), 1e-5*(1+math.Abs(ref.LogProb)), where...)
			}
			assert.LessOrEqual(t, near, shape.rows/4+1, "%v: too many draws at a boundary (%d of %d): the reference's Near is too wide", dt, near, shape.rows)
		}
	}
}

// chiSquareCrit is the chi-square quantile of df degrees of freedom at
// upper tail 1e-6 (Wilson-Hilferty; z = 4.753).
func chiSquareCrit(df int) float64 {
	k := float64(df)
	a := 2 / (9 * k)
	return k * math.Pow(1-a+4.753*math.Sqrt(a), 3)
}

// chiSquare is Pearson's statistic of counts against probs (a token drawn
// that probs gives no mass is +Inf) and its degrees of freedom.
func chiSquare(counts map[int]int, probs map[int]float64, n int) (float64, int) {
	var s float64
	for c, p := range probs {
		e := p * float64(n)
		o := float64(counts[c])
		s += (o - e) * (o - e) / e
	}
	for c, o := range counts {
		if _, ok := probs[c]; !ok && o > 0 {
			return math.Inf(1), len(probs) - 1
		}
	}
	return s, len(probs) - 1
}

// Many requests with the same logits and parameters but their own seeds
// and offsets: the draws follow the reference distribution (chi-square at
// 1e-6, fixed seeds: deterministic), and the same test rejects the
// distribution of a neighbouring temperature (it can fail).
func TestSampleStatistics(t *testing.T) {
	d := dev(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const n, cols = 4000, 24
	controls := 0
	for _, dt := range []core.DType{core.F32, core.BF16} {
		row := randomRow(rng, dt, cols, 1.5)
		for _, base := range []Params{
			{Temperature: 1, TopP: 1},
			{Temperature: 0.7, TopK: 10, TopP: 1},
			{Temperature: 1.3, TopP: 0.8},
			{Temperature: 1, TopP: 1, MinP: 0.1},
			{Temperature: 0.9, TopK: 12, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.3, PresencePenalty: 0.2, History: []int32{3, 5, 3}},
		} {
			x := make([]float64, 0, n*cols)
			ps := make([]Params, n)
			for r := range ps {
				x = append(x, row...)
				ps[r] = base
				ps[r].Seed, ps[r].Offset = rng.Uint64(), rng.Uint64()
			}
			tok, _, _ := run(t, d, dt, x, ps, 4)
			ref := Reference(row, &base, roundOf(dt))
			counts := map[int]int{}
			for _, tk := range tok {
				require.Contains(t, ref.Probs, int(tk), "%v %+v: token %d outside the kept set", dt, base, tk)
				counts[int(tk)]++
			}
			stat, df := chiSquare(counts, ref.Probs, n)
			assert.Less(t, stat, chiSquareCrit(df), "%v %+v: chi-square %.1f with %d degrees of freedom", dt, base, stat, df)
			// the control: the same counts against temperature * 1.5
			wrong := base
			wrong.Temperature *= 1.5
			wref := Reference(row, &wrong, roundOf(dt))
			if len(wref.Probs) > 1 {
				controls++
				ws, wdf := chiSquare(counts, wref.Probs, n)
				assert.Greater(t, ws, chiSquareCrit(wdf), "%v %+v: the chi-square test does not tell temperature %g from %g", dt, base, base.Temperature, wrong.Temperature)
			}
		}
	}
	assert.Equal(t, 10, controls, "the control ran for every case")
}

// A request's draw depends on its seed and offset only: the same request
// in another row of another batch, or launched again, gives the same
// token and logprob; another offset draws anew.
func TestSampleDeterministicPerRequest(t *testing.T) {
	d := dev(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const cols = 300
	row := randomRow(rng, core.F32, cols, 2)
	req := Params{Temperature: 1.2, TopP: 0.95, Seed: 0xfeed, Offset: 3}
	var firstTok int32
	var firstLp float32
	for i, rows := range []int{1, 5, 12} {
		at := rng.IntN(rows)
		x := make([]float64, 0, rows*cols)
		ps := make([]Params, rows)
		for r := range ps {
			if r == at {
				x = append(x, row...)
				ps[r] = req
				continue
			}
			x = append(x, randomRow(rng, core.F32, cols, 2)...)
			ps[r] = randomParams(rng, cols, 0)
		}
		tok, lp, _ := run(t, d, core.F32, x, ps, 0)
		if i == 0 {
			firstTok, firstLp = tok[at], lp[at]
			continue
		}
		assert.Equal(t, firstTok, tok[at], "rows %d, the request at row %d", rows, at)
		assert.Equal(t, firstLp, lp[at], "rows %d, the request at row %d", rows, at)
	}
	// 64 offsets of one request: the tokens vary (a constant kernel fails)
	x := make([]float64, 0, 64*cols)
	ps := make([]Params, 64)
	for r := range ps {
		x = append(x, row...)
		ps[r] = req
		ps[r].Offset = uint64(r)
	}
	tok, _, _ := run(t, d, core.F32, x, ps, 0)
	distinct := map[int32]bool{}
	for _, tk := range tok {
		distinct[tk] = true
	}
	assert.Greater(t, len(distinct), 8, "64 offsets drew only %d distinct tokens", len(distinct))
	again, _, _ := run(t, d, core.F32, x, ps, 0)
	assert.Equal(t, tok, again, "the same batch launched again")
}

// Masks on integer logits, where the kept sets are known exactly (ties
// broken by the lower index): every kept token is drawn, nothing else.
func TestSampleMasksExact(t *testing.T) {
	d := dev(t)
	rng := rand.New(rand.NewPCG(7, 8))
	// order: 5 (4), 1 (3), 6 (3), 0 (2), 3 (1), 2 (0), 4 (-inf-ish -30), 7 (NaN)
	row := []float64{2, 3, 0, 1, -30, 4, 3, math.NaN()}
	w := func(v float64) float64 { return math.Exp(v - 4) }
	for _, c := range []struct {
		p    Params
		kept []int
	}{
		{Params{Temperature: 1, TopK: 1, TopP: 1}, []int{5}},
		{Params{Temperature: 1, TopK: 2, TopP: 1}, []int{5, 1}},
		{Params{Temperature: 1, TopK: 3, TopP: 1}, []int{5, 1, 6}},
		{Params{Temperature: 1, TopK: 4, TopP: 1}, []int{5, 1, 6, 0}},
		// top_p: 1 / (1 + 2e^-1 + e^-2 + ...) = 0.53; with the two 3s: 0.93
		{Params{Temperature: 1, TopP: 0.5}, []int{5}},
		{Params{Temperature: 1, TopP: 0.6}, []int{5, 1}},
		{Params{Temperature: 1, TopP: 0.75}, []int{5, 1, 6}},
		{Params{Temperature: 1, TopK: 3, TopP: 0.99}, []int{5, 1, 6}},
		// min_p against weights 1, e^-1 = 0.37, e^-2 = 0.14, e^-3 = 0.05
		{Params{Temperature: 1, TopP: 1, MinP: 0.3}, []int{5, 1, 6}},
		{Params{Temperature: 1, TopP: 1, MinP: 0.1}, []int{5, 1, 6, 0}},
		{Params{Temperature: 1, TopP: 1, MinP: 1}, []int{5}},
		{Params{Temperature: 1, TopP: 1}, []int{5, 1, 6, 0, 3, 2, 4}},
	} {
		_ = w
		const n = 600
		x := make([]float64, 0, n*len(row))
		ps := make([]Params, n)
		for r := range ps {
			x = append(x, row...)
			ps[r] = c.p
			ps[r].Seed, ps[r].Offset = rng.Uint64(), 0
		}
		tok, _, _ := run(t, d, core.F32, x, ps, 0)
		seen := map[int]bool{}
		for _, tk := range tok {
			seen[int(tk)] = true
		}
		want := map[int]bool{}
		for _, k := range c.kept {
			want[k] = true
		}
		if c.p.TopK == 0 && c.p.TopP == 1 && c.p.MinP == 0 {
			delete(want, 4) // weight e^-34: never drawn in 600
		}
		assert.Equal(t, want, seen, "%+v", c.p)
		ref := Reference(row, &c.p, nil)
		keys := map[int]bool{}
		for k := range ref.Probs {
			keys[k] = true
		}
		wantRef := map[int]bool{}
		for _, k := range c.kept {
			wantRef[k] = true
		}
		assert.Equal(t, wantRef, keys, "the reference's kept set, %+v", c.p)
	}
}

// sample_T's non-finite rule, per request: a row without a finite maximum
// gives argmax_T's choice and a NaN logprob; NaN and -Inf are never drawn.
func TestSampleNonFinite(t *testing.T) {
	d := dev(t)
	nan, inf := math.NaN(), math.Inf(1)
	const cols = 9
	rows := []struct {
		name string
		x    []float64
		want int // -1: any finite
	}{
		{"NaN among numbers", []float64{nan, 1, 2, nan, 0, 1, 2, 3, nan}, -1},
		{"one +Inf", []float64{1, 2, inf, 0, 0, 0, 0, 0, 0}, 2},
		{"two +Inf", []float64{1, 2, 0, 0, inf, nan, inf, 0, 0}, 4},
		{"all -Inf", []float64{-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, 0},
		{"all NaN", []float64{nan, nan, nan, nan, nan, nan, nan, nan, nan}, 0},
		{"-Inf and NaN", []float64{nan, nan, -inf, nan, -inf, nan, nan, nan, nan}, 2},
		{"-Inf among numbers", []float64{-inf, 1, -inf, 2, -inf, 0, -inf, 1, -inf}, -1},
	}
	for _, dt := range []core.DType{core.F32, core.F16, core.BF16} {
		for _, p := range []Params{Greedy(), {Temperature: 1, TopP: 1, Seed: 9}, {Temperature: 0.5, TopK: 3, TopP: 0.9, MinP: 0.01, Seed: 11, RepetitionPenalty: 1.2, History: []int32{0, 1, 2}}} {
			x := make([]float64, 0, len(rows)*cols)
			ps := make([]Params, len(rows))
			for r, row := range rows {
				x = append(x, row.x...)
				ps[r] = p
				ps[r].Offset = uint64(r)
			}
			tok, lp, _ := run(t, d, dt, x, ps, 3)
			for r, row := range rows {
				where := []any{"%v %s %+v", dt, row.name, p}
				require.True(t, tok[r] >= 0 && tok[r] < cols, where...)
				ref := Reference(row.x, &ps[r], roundOf(dt))
				if row.want >= 0 {
					assert.Equal(t, row.want, int(tok[r]), where...)
					assert.True(t, math.IsNaN(float64(lp[r])), where...)
					continue
				}
				v := ref.Logits[tok[r]]
				assert.False(t, math.IsNaN(v) || math.IsInf(v, 0), where...)
				assert.False(t, math.IsNaN(float64(lp[r])), where...)
				assert.Equal(t, ref.Token, int(tok[r]), where...)
			}
		}
	}
}

// The plugin refuses launches whose views are short or whose shape is
// out of range; Sample refuses a bad shape; the call allocates nothing.
func TestSampleErrors(t *testing.T) {
	d := dev(t)
	sm, err := NewSampler(d, core.F32)
	require.NoError(t, err)
	_, err = NewSampler(d, core.I32)
	assert.ErrorContains(t, err, "logits type")
	s := mockrt.Stream(t, d)
	const rows, cols, hist = 4, 32, 2
	ob, _ := d.Alloc(OutBytes(rows))
	xb, _ := d.Alloc(4 * rows * cols)
	pb, _ := d.Alloc(ParamsBytes(rows, hist))
	defer ob.Free()
	defer xb.Free()
	defer pb.Free()
	b, _ := NewBatch(rows, cols, hist)
	require.NoError(t, core.CopyFromHost(pb, b.Bytes()))
	require.NoError(t, core.Memset(xb, 0))
	short := func(buf *core.Buffer, n int) core.View { v, err := buf.View(0, n); require.NoError(t, err); return v }
	for _, c := range []struct {
		name          string
		out, x, p     core.Region
		rows, cols, h int
		code          error
		msg           string
	}{
		{"out short", short(ob, OutBytes(rows)-1), xb, pb, rows, cols, hist, core.ErrOutOfRange, "sample_rows_f32"},
		{"logits short", ob, short(xb, 4*rows*cols-4), pb, rows, cols, hist, core.ErrOutOfRange, "sample_rows_f32"},
		{"params short", ob, xb, short(pb, ParamsBytes(rows, hist)-1), rows, cols, hist, core.ErrOutOfRange, "sample_rows_f32"},
		{"params for fewer history slots", ob, xb, pb, rows, cols, hist + 1, core.ErrOutOfRange, "sample_rows_f32"},
	} {
		err := sm.Sample(s, c.out, c.x, c.p, c.rows, c.cols, c.h)
		assert.ErrorIs(t, err, c.code, c.name)
		assert.ErrorContains(t, err, c.msg, c.name)
	}
	assert.ErrorContains(t, sm.Sample(s, ob, xb, pb, 0, cols, hist), "rows 0")
	assert.ErrorContains(t, sm.Sample(s, ob, xb, pb, rows, cols, MaxHistory+1), "hist 65537")
	k, err := func() (*core.Kernel, error) {
		m, err := d.BuiltinModule()
		require.NoError(t, err)
		return m.Kernel("sample_rows_f32")
	}()
	require.NoError(t, err)
	cfg := core.LaunchConfig{Grid: [3]uint32{rows, 1, 1}, Block: [3]uint32{32, 1, 1}}
	err = s.Launch(k, cfg, core.ArgBuffer(ob), core.ArgBuffer(xb), core.ArgBuffer(pb), core.ArgScalar[uint64](rows), core.ArgScalar[uint64](0), core.ArgScalar[uint64](hist))
	assert.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.ErrorContains(t, err, "cols 0 must be in 1 .. 2^31-1")
	err = s.Launch(k, cfg, core.ArgBuffer(ob), core.ArgBuffer(xb), core.ArgBuffer(pb), core.ArgScalar[uint64](rows), core.ArgScalar[uint64](cols), core.ArgScalar[uint64](MaxHistory+1))
	assert.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.ErrorContains(t, err, "hist 65537 exceeds 65536")
	require.NoError(t, s.Synchronize())
	allocs := testing.AllocsPerRun(50, func() { _ = sm.Sample(s, ob, xb, pb, rows, cols, hist) })
	require.NoError(t, s.Synchronize())
	assert.Equal(t, 0.0, allocs, "Sampler.Sample allocates nothing")
}

// A sampling step recorded into a graph and replayed draws what the eager
// launch draws; advancing the offsets between replays draws anew.
func TestSampleInGraph(t *testing.T) {
	d := dev(t)
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, cols = 6, 200
	x := make([]float64, 0, rows*cols)
	b, err := NewBatch(rows, cols, 0)
	require.NoError(t, err)
	for r := range rows {
		x = append(x, randomRow(rng, core.BF16, cols, 2)...)
		p := Params{Temperature: 1, TopP: 0.9, Seed: rng.Uint64()}
		require.NoError(t, b.Set(r, &p))
	}
	sm, err := NewSampler(d, core.BF16)
	require.NoError(t, err)
	xb, _ := d.Alloc(2 * rows * cols)
	pb, _ := d.Alloc(len(b.Bytes()))
	ob, _ := d.Alloc(OutBytes(rows))
	defer xb.Free()
	defer pb.Free()
	defer ob.Free()
	require.NoError(t, core.CopyFromHost(xb, elems.Encode(core.BF16, x)))
	s := mockrt.Stream(t, d)
	read := func() []byte {
		require.NoError(t, s.Synchronize())
		raw := make([]byte, OutBytes(rows))
		require.NoError(t, core.CopyToHost(raw, ob))
		return raw
	}
	var steps [][]byte
	for range 3 { // eager: three steps
		require.NoError(t, core.CopyFromHost(pb, b.Bytes()))
		require.NoError(t, sm.Sample(s, ob, xb, pb, rows, cols, 0))
		steps = append(steps, read())
		b.Advance()
	}
	g, err := s.Capture(func(cs *core.Stream) error { return sm.Sample(cs, ob, xb, pb, rows, cols, 0) })
	require.NoError(t, err)
	defer g.Close()
	for r := range rows {
		require.NoError(t, b.SetOffset(r, 0))
	}
	for i := range 3 {
		require.NoError(t, core.CopyFromHost(pb, b.Bytes()))
		require.NoError(t, g.Launch(s))
		assert.Equal(t, steps[i], read(), "replay %d", i)
		b.Advance()
	}
	assert.NotEqual(t, steps[0], steps[1], "another offset draws anew")
}
