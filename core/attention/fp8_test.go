// SPDX-License-Identifier: Apache-2.0

package attention_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/elems"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// fp8Run appends tokens rows of K and V (bf16 values, one request, one
// page per pageSize tokens) into a cache of desc and runs one decode row
// of query q; it returns the output and the cache's K and V bytes.
func fp8Run(t *testing.T, d *core.Device, desc attention.KVCacheDesc, hq, tokens int, k, v, q []float64) ([]float64, []byte, []byte) {
	t.Helper()
	return fp8RunOn(t, d, desc, hq, tokens, k, v, q, false)
}

// fp8RunOn is fp8Run, with the append and the run recorded in a graph
// (planned before the capture) and the graph launched when graph is set.
func fp8RunOn(t *testing.T, d *core.Device, desc attention.KVCacheDesc, hq, tokens int, k, v, q []float64, graph bool) ([]float64, []byte, []byte) {
	t.Helper()
	s := mockrt.Stream(t, d)
	cache, err := attention.AllocKVCache(d, desc)
	require.NoError(t, err)
	defer cache.Free()
	np := (tokens + desc.PageSize - 1) / desc.PageSize
	idx := make([]int32, np)
	for i := range idx {
		idx[i] = int32(np - 1 - i) // pages in reverse: the table matters
	}
	pos, bi := make([]int32, tokens), make([]int32, tokens)
	for i := range pos {
		pos[i] = int32(i)
	}
	up := func(b []byte) *core.Buffer {
		buf, err := d.Alloc(len(b))
		require.NoError(t, err)
		require.NoError(t, core.CopyFromHost(buf, b))
		t.Cleanup(func() { _ = buf.Free() })
		return buf
	}
	last := int32(tokens - (np-1)*desc.PageSize)
	pt := attention.PageTable{Indptr: up(i32le(0, int32(np))), Indices: up(i32le(idx...)), LastPageLen: up(i32le(last))}
	rows := attention.KVRows{K: up(elems.Encode(core.BF16, k)), V: up(elems.Encode(core.BF16, v)), BatchIndices: up(i32le(bi...)), Positions: up(i32le(pos...)), NNZ: tokens}
	qb := up(elems.Encode(core.BF16, q))
	ob := mockrt.Alloc(t, d, len(q)*2)
	a, err := attention.New(d, attention.Desc{Kind: attention.Decode, NumQOHeads: hq, Cache: desc, MaxBatch: 1})
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.Plan(s, attention.Schedule{KVIndptr: []int32{0, int32(np)}, KVLastPageLen: []int32{last}}))
	step := func(s *core.Stream) error {
		if err := cache.Append(s, pt, 1, rows); err != nil {
			return err
		}
		return a.Run(s, cache, attention.Operands{Q: qb, O: ob, Pages: pt})
	}
	if graph {
		g, err := s.Capture(step)
		require.NoError(t, err)
		defer g.Close()
		require.NoError(t, g.Launch(s))
	} else {
		require.NoError(t, step(s))
	}
	require.NoError(t, s.Synchronize())
	raw := make([]byte, len(q)*2)
	require.NoError(t, core.CopyToHost(raw, ob))
	out := elems.Decode(core.BF16, raw)
	kb, vb := make([]byte, desc.NumPages*desc.PageBytes()), make([]byte, desc.NumPages*desc.PageBytes())
	require.NoError(t, core.CopyToHost(kb, cache.K()))
	require.NoError(t, core.CopyToHost(vb, cache.V()))
	return out, kb, vb
}

// decodeRef is one decode row in float64: q [hq][D], k and v [t][hk][D].
func decodeRef(q, k, v []float64, hq, hk, D, tokens int) []float64 {
	out := make([]float64, hq*D)
	sc := make([]float64, tokens)
	scale := 1 / math.Sqrt(float64(D))
	for h := range hq {
		kh := h / (hq / hk)
		m := math.Inf(-1)
		for t := range tokens {
			s := 0.0
			for d := range D {
				s += q[h*D+d] * k[(t*hk+kh)*D+d]
			}
			sc[t] = s * scale
			m = math.Max(m, sc[t])
		}
		den := 0.0
		for t := range tokens {
			p := math.Exp(sc[t] - m)
			den += p
			for d := range D {
				out[h*D+d] += p * v[(t*hk+kh)*D+d]
			}
		}
		for d := range D {
			out[h*D+d] /= den
		}
	}
	return out
}

// errs are the output's error against ref: the largest |o - ref| and the
// mean |o - ref|, each over the largest |ref|.
func errs(o, ref []float64) (maxRel, meanRel float64) {
	var amax, sum float64
	for _, r := range ref {
		amax = math.Max(amax, math.Abs(r))
	}
	for i := range o {
		e := math.Abs(o[i] - ref[i])
		maxRel = math.Max(maxRel, e)
		sum += e
	}
	return maxRel / amax, sum / float64(len(o)) / amax
}

// An fp8 e4m3 cache on the mock (the float reference of the kernels):
// every appended element is e4m3(row / scale), saturated; attention over
// it equals the float64 attention over the dequantised values; and its
// error against the unquantised K and V, beside a bf16 cache's, is what
// the fp8 cache costs (logged; bounded).
func TestFP8KVCache(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	rng := rand.New(rand.NewPCG(11, 12))
	const hq, hk, D, tokens, page = 8, 2, 128, 300, 16
	n := tokens * hk * D
	k, v := make([]float64, n), make([]float64, n)
	for i := range k {
		k[i], v[i] = elems.Round(core.BF16, rng.NormFloat64()), elems.Round(core.BF16, rng.NormFloat64())
		if i%D == 7 { // an outlier channel, as real K has
			k[i] = elems.Round(core.BF16, k[i]*6)
		}
	}
	q := make([]float64, hq*D)
	for i := range q {
		q[i] = elems.Round(core.BF16, rng.NormFloat64())
	}
	amax := func(x []float64) float64 {
		m := 0.0
		for _, y := range x {
			m = math.Max(m, math.Abs(y))
		}
		return m
	}
	ks, vs := float32(amax(k)/448), float32(amax(v)/448)
	exact := decodeRef(q, k, v, hq, hk, D, tokens)

	bf := attention.KVCacheDesc{DType: core.BF16, Layout: attention.KVLayoutNHD, PageSize: page, NumKVHeads: hk, HeadDim: D, NumPages: (tokens + page - 1) / page}
	obf, _, _ := fp8Run(t, d, bf, hq, tokens, k, v, q)
	f8 := bf
	f8.DType, f8.QODType, f8.KScale, f8.VScale = core.FP8E4M3, core.BF16, ks, vs
	o8, kb, vb := fp8Run(t, d, f8, hq, tokens, k, v, q)

	// The pages: token t sits in page idx[t / page] (reversed), slot t % page.
	np := f8.NumPages
	kd, vd := make([]float64, n), make([]float64, n)
	for tok := range tokens {
		for h := range hk {
			off, err := f8.Offset(np-1-tok/page, tok%page, h)
			require.NoError(t, err)
			for j := range D {
				i := (tok*hk+h)*D + j
				require.Equal(t, floatbits.E4M3FromFloat32(float32(k[i])/ks), kb[off+j], "K token %d head %d [%d]", tok, h, j)
				require.Equal(t, floatbits.E4M3FromFloat32(float32(v[i])/vs), vb[off+j], "V token %d head %d [%d]", tok, h, j)
				kd[i] = float64(floatbits.E4M3ToFloat32(kb[off+j])) * float64(ks)
				vd[i] = float64(floatbits.E4M3ToFloat32(vb[off+j])) * float64(vs)
			}
		}
	}

	// The mock computes attention over the dequantised values exactly
	// (to the bf16 output's rounding).
	deq := decodeRef(q, kd, vd, hq, hk, D, tokens)
	for i := range deq {
		require.InDelta(t, deq[i], o8[i], 1e-2*math.Abs(deq[i])+1e-6, "output %d", i)
	}
	bfMax, bfMean := errs(obf, exact)
	f8Max, f8Mean := errs(o8, exact)
	t.Logf("decode, %d tokens, %d query heads, head dim %d, K/V ~ N(0,1) with an outlier channel in K, scales amax/448", tokens, hq, D)
	t.Logf("error against float64 on the unquantised K/V, over the largest |output|: bf16 cache max %.2e mean %.2e; fp8 e4m3 cache max %.2e mean %.2e", bfMax, bfMean, f8Max, f8Mean)
	assert.Less(t, f8Max, 0.1)
	assert.Less(t, f8Mean, 0.02)
	assert.Greater(t, f8Mean, 2*bfMean, "an fp8 cache that is as exact as bf16 was not quantised")

	// Values past the range saturate to +-448 (0x7e, 0xfe); NaN stays NaN.
	one := f8
	one.NumPages, one.KScale, one.VScale = 1, 0.5, 2
	ko, vo := make([]float64, hk*D), make([]float64, hk*D)
	ko[0], ko[1], ko[2] = 1000, -300, math.NaN()
	vo[0], vo[1] = -1e6, 3
	_, kb1, vb1 := fp8Run(t, d, one, hq, 1, ko, vo, q)
	off, err := one.Offset(0, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x7e, 0xfe, 0x7f}, kb1[off:off+3], "K: 1000/0.5 and -300/0.5 saturate, NaN stays NaN")
	assert.Equal(t, []byte{0xfe, floatbits.E4M3FromFloat32(1.5)}, vb1[off:off+2], "V: -1e6/2 saturates, 3/2 is 1.5")
}

// An fp8 cache's append and attention recorded in a graph (the engine's
// CALL items carry the scales) replay what the eager calls compute, byte
// for byte: pages and output.
func TestFP8KVCacheInGraph(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	rng := rand.New(rand.NewPCG(13, 14))
	const hq, hk, D, tokens, page = 4, 1, 64, 37, 8
	k, v, q := make([]float64, tokens*hk*D), make([]float64, tokens*hk*D), make([]float64, hq*D)
	for i := range k {
		k[i], v[i] = elems.Round(core.BF16, 3*rng.NormFloat64()), elems.Round(core.BF16, rng.NormFloat64())
	}
	for i := range q {
		q[i] = elems.Round(core.BF16, rng.NormFloat64())
	}
	desc := attention.KVCacheDesc{DType: core.FP8E4M3, QODType: core.BF16, KScale: 0.03, VScale: 0.011, Layout: attention.KVLayoutHND,
		PageSize: page, NumKVHeads: hk, HeadDim: D, NumPages: (tokens + page - 1) / page}
	oe, ke, ve := fp8RunOn(t, d, desc, hq, tokens, k, v, q, false)
	og, kg, vg := fp8RunOn(t, d, desc, hq, tokens, k, v, q, true)
	assert.Equal(t, ke, kg, "K pages")
	assert.Equal(t, ve, vg, "V pages")
	assert.Equal(t, oe, og, "output")
	// A different scale changes both: the replay did not drop the scales.
	desc.VScale = 0.02
	o2, _, v2 := fp8RunOn(t, d, desc, hq, tokens, k, v, q, true)
	assert.NotEqual(t, vg, v2)
	assert.NotEqual(t, og, o2)
}

func TestFP8KVCacheChecks(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	base := attention.KVCacheDesc{DType: core.FP8E4M3, QODType: core.BF16, Layout: attention.KVLayoutNHD, PageSize: 4, NumKVHeads: 1, HeadDim: 64, NumPages: 2}
	for _, c := range []struct {
		name string
		mod  func(*attention.KVCacheDesc)
		want string
	}{
		{"negative scale", func(x *attention.KVCacheDesc) { x.KScale = -1 }, "KScale -1 must be finite and >= 0"},
		{"NaN scale", func(x *attention.KVCacheDesc) { x.VScale = float32(math.NaN()) }, "VScale NaN"},
		{"fp8 fields on a bf16 cache", func(x *attention.KVCacheDesc) { x.DType = core.BF16 }, "are for fp8e4m3 caches"},
	} {
		x := base
		c.mod(&x)
		_, err := attention.AllocKVCache(d, x)
		assert.ErrorIs(t, err, core.ErrInvalidArgument, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	// The plugin's checks (csrc): the row type of an fp8 cache.
	for _, c := range []struct {
		qo   core.DType
		want string
	}{{0, "layout.qo_dtype invalid (0) must be f16 or bf16"}, {core.F32, "layout.qo_dtype f32 (1) must be f16 or bf16"}} {
		x := base
		x.QODType = c.qo
		_, err := attention.New(d, attention.Desc{Kind: attention.Decode, NumQOHeads: 1, Cache: x, MaxBatch: 1})
		assert.ErrorIs(t, err, core.ErrInvalidArgument)
		assert.ErrorContains(t, err, c.want)
	}
	assert.Equal(t, core.BF16, base.RowType())
	assert.Equal(t, core.F16, attention.KVCacheDesc{DType: core.F16}.RowType())
}
