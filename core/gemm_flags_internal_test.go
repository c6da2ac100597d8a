// SPDX-License-Identifier: Apache-2.0

package core

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/le"
)

// TestGemmFlags: GemmDesc.ConstA becomes the flags byte only for a plugin
// of ABI 1.9 or later; an older plugin (whose byte was reserved) is sent 0.
func TestGemmFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		constA bool
		minor  uint32
		want   uint8
	}{
		{"no flag, 1.9", false, 9, 0},
		{"ConstA, 1.9", true, 9, abi.GemmFlagConstA},
		{"ConstA, this core's minor", true, abi.Minor, abi.GemmFlagConstA},
		{"ConstA, 1.8 plugin: dropped", true, 8, 0},
		{"ConstA, 1.1 plugin: dropped", true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GemmDesc{AType: BF16, BType: BF16, DType: BF16, TransA: true, M: 8, N: 1, K: 8, ConstA: tc.constA}
			assert.Equal(t, tc.want, gemmFlags(&g, tc.minor))
			d, err := gemmABIDesc(&g, tc.minor)
			require.NoError(t, err)
			assert.Equal(t, tc.want, d.Flags, "the descriptor's flags byte")
			assert.Zero(t, d.Prologue, "the prologue byte")
		})
	}
}

// TestGemmConstAOnTheMock: on the mock, a ConstA GEMM gives the same bytes
// as the same GEMM without it, each has a plan of its own (the flags are in
// the op cache's key), and a plugin that says 1.8 is sent no flags byte.
func TestGemmConstAOnTheMock(t *testing.T) {
	rt, dev := testRuntime(t, "")
	s := testStream(t, dev)
	const m, k = 96, 64
	rng := rand.New(rand.NewPCG(1, 2))
	bf := func(n int) []byte { // bf16 bits of values in [-1, 1)
		out := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			v := uint16(0x3f00|rng.IntN(0x100)) ^ uint16(rng.IntN(2))<<15
			out[2*i], out[2*i+1] = byte(v), byte(v>>8)
		}
		return out
	}
	w, x := testAlloc(t, dev, 2*m*k), testAlloc(t, dev, 2*k)
	require.NoError(t, CopyFromHost(w, bf(m*k)))
	require.NoError(t, CopyFromHost(x, bf(k)))
	run := func(constA bool) []byte {
		y := testAlloc(t, dev, 2*m)
		require.NoError(t, Memset(y, 0xff))
		desc := GemmDesc{AType: BF16, BType: BF16, DType: BF16, TransA: true, M: m, N: 1, K: k, ConstA: constA}
		require.NoError(t, s.Gemm(desc, GemmOperands{A: w, B: x, D: y, Alpha: 1}))
		require.NoError(t, s.Synchronize())
		out := make([]byte, 2*m)
		require.NoError(t, CopyToHost(out, y))
		return out
	}
	flagsOfPlans := func() map[uint8]int {
		c := rt.plans
		c.mu.Lock()
		defer c.mu.Unlock()
		got := map[uint8]int{}
		for key := range c.m {
			got[key.desc.Flags]++
		}
		return got
	}
	plain, constA := run(false), run(true)
	assert.True(t, bytes.Equal(plain, constA), "ConstA changes the result")
	assert.False(t, bytes.Equal(plain, bytes.Repeat([]byte{0xff}, 2*m)), "the GEMM wrote nothing")
	assert.Equal(t, map[uint8]int{0: 1, abi.GemmFlagConstA: 1}, flagsOfPlans(), "one plan without and one with the flag")
	require.NoError(t, rt.Trim())

	// The same runtime as a 1.8 plugin: the flag is dropped, one plan
	// serves both calls.
	old := *rt.p
	old.Minor = 8
	real := rt.p
	rt.p = &old
	defer func() { rt.p = real }()
	s = testStream(t, dev) // a fresh stream: an empty memo
	assert.True(t, bytes.Equal(plain, run(true)))
	assert.True(t, bytes.Equal(plain, run(false)))
	assert.Equal(t, map[uint8]int{0: 1}, flagsOfPlans(), "a 1.8 plugin is sent flags 0")
}

// TestGemmUnknownFlagBit: the plugin refuses a flags bit the header does
// not define, naming the field (core sends only ConstA; the byte is set
// here by hand).
func TestGemmUnknownFlagBit(t *testing.T) {
	rt, dev := testRuntime(t, "")
	g := GemmDesc{AType: F32, BType: F32, DType: F32, M: 4, N: 4, K: 4, ConstA: true}
	d, err := gemmABIDesc(&g, rt.p.Minor)
	require.NoError(t, err)
	var h abi.GemmPlan
	d.Flags |= 0x40
	err = rt.p.GemmPlanCreate("gemm_plan_create", rt.h, dev.index, &d, &h)
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "flags 0x41 has unknown bits 0x40")
	assert.Zero(t, h)
}

// TestGemmPrologueOnTheMock: RMSNormB and SwiGLUB (ABI 1.10) on the mock
// against the composition computed here in float64 (the norm or silu*mul,
// then the product), over several tokens and a padded LDB; and each
// misuse refused before anything runs, naming the field.
func TestGemmPrologueOnTheMock(t *testing.T) {
	rt, dev := testRuntime(t, "")
	s := testStream(t, dev)
	const m, k, eps = 40, 72, 1e-5
	rng := rand.New(rand.NewPCG(3, 4))
	vals := func(n int, lo, hi float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		return out
	}
	a := vals(m*k, -1, 1) // A stored as m rows of k (TransA)
	nw := vals(k, 0.5, 1.5)
	aBuf, nwBuf := testAlloc(t, dev, 4*m*k), testAlloc(t, dev, 4*k)
	require.NoError(t, CopyFromHost(aBuf, le.Float32s(a)))
	require.NoError(t, CopyFromHost(nwBuf, le.Float32s(nw)))
	for _, tc := range []struct {
		name         string
		norm, swiglu bool
		n, ldb       int
	}{
		{"rmsnorm, one token", true, false, 1, k},
		{"rmsnorm, three tokens, ldb padded", true, false, 3, k + 8},
		{"swiglu, one token", false, true, 1, k},
		{"swiglu, three tokens, ldb padded", false, true, 3, k + 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols := tc.n
			if tc.swiglu {
				cols *= 2 // G then U
			}
			b := vals(tc.ldb*cols, -3, 3)
			bBuf, dBuf := testAlloc(t, dev, 4*len(b)), testAlloc(t, dev, 4*m*tc.n)
			require.NoError(t, CopyFromHost(bBuf, le.Float32s(b)))
			desc := GemmDesc{AType: F32, BType: F32, DType: F32, TransA: true, M: m, N: tc.n, K: k, LDB: tc.ldb,
				RMSNormB: tc.norm, SwiGLUB: tc.swiglu}
			ops := GemmOperands{A: aBuf, B: bBuf, D: dBuf, Alpha: 1}
			if tc.norm {
				ops.NormWeight, ops.NormEps = nwBuf, eps
			}
			require.NoError(t, s.Gemm(desc, ops))
			require.NoError(t, s.Synchronize())
			out := make([]byte, 4*m*tc.n)
			require.NoError(t, CopyToHost(out, dBuf))
			got := le.ToFloat32s(out)
			for j := 0; j < tc.n; j++ {
				x := make([]float64, k)
				ss := 0.0
				for p := range x {
					v := float64(b[j*tc.ldb+p])
					ss += v * v
					if tc.swiglu {
						v = v / (1 + math.Exp(-v)) * float64(b[(tc.n+j)*tc.ldb+p])
					}
					x[p] = v
				}
				if tc.norm {
					r := 1 / math.Sqrt(ss/k+eps)
					for p := range x {
						x[p] *= r * float64(nw[p])
					}
				}
				for i := 0; i < m; i++ {
					want := 0.0
					for p := 0; p < k; p++ {
						want += float64(a[i*k+p]) * x[p]
					}
					assert.InDelta(t, want, float64(got[j*m+i]), 1e-4*(1+math.Abs(want)), "D[%d, %d]", i, j)
				}
			}
		})
	}

	x, d := testAlloc(t, dev, 4*2*k*3), testAlloc(t, dev, 4*m*3)
	base := GemmDesc{AType: F32, BType: F32, DType: F32, TransA: true, M: m, N: 3, K: k}
	for _, tc := range []struct {
		name string
		edit func(*GemmDesc, *GemmOperands)
		code error
		msg  string
	}{
		{"both prologues", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB, g.SwiGLUB = true, true }, ErrInvalidArgument, "at most one prologue"},
		{"rmsnorm without its weight", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB = true }, ErrInvalidArgument, "needs the NormWeight operand"},
		{"a weight without rmsnorm", func(g *GemmDesc, o *GemmOperands) { o.NormWeight = nwBuf }, ErrInvalidArgument, "only with RMSNormB"},
		{"an epsilon without rmsnorm", func(g *GemmDesc, o *GemmOperands) { o.NormEps = 1e-6 }, ErrInvalidArgument, "only with RMSNormB"},
		{"a NaN epsilon", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB, o.NormWeight, o.NormEps = true, nwBuf, math.NaN() }, ErrInvalidArgument, "not a finite float32 value"},
		{"a negative epsilon", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB, o.NormWeight, o.NormEps = true, nwBuf, -1 }, ErrInvalidArgument, "not a finite float32 value"},
		{"an epsilon past float32", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB, o.NormWeight, o.NormEps = true, nwBuf, 1e39 }, ErrInvalidArgument, "not a finite float32 value"},
		{"a weight off 16 bytes", func(g *GemmDesc, o *GemmOperands) {
			g.RMSNormB, g.K, o.NormWeight, o.NormEps = true, 8, mustView(t, nwBuf, 8, 4*8), 1e-5
		}, ErrInvalidArgument, "norm_weight_offset 8 is not a multiple of 16"},
		{"a short weight", func(g *GemmDesc, o *GemmOperands) { g.RMSNormB, o.NormWeight = true, mustView(t, nwBuf, 0, 4*k-4) }, ErrOutOfRange, "norm weight needs 72 elements"},
		{"swiglu's B without U", func(g *GemmDesc, o *GemmOperands) { g.SwiGLUB, o.B = true, mustView(t, x, 0, 4*k*3) }, ErrOutOfRange, "operand B needs"},
		{"a transposed B", func(g *GemmDesc, o *GemmOperands) { g.SwiGLUB, g.TransB, g.LDB = true, true, 3 }, ErrUnsupported, "needs trans_b 0"},
		{"a batch", func(g *GemmDesc, o *GemmOperands) { g.SwiGLUB, g.Batch = true, 2 }, ErrUnsupported, "needs batch_count 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, o := base, GemmOperands{A: aBuf, B: x, D: d, Alpha: 1}
			tc.edit(&g, &o)
			err := s.Gemm(g, o)
			require.ErrorIs(t, err, tc.code)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	require.NoError(t, s.Synchronize(), "a refused call leaves the stream usable")

	// A 1.9 plugin would ignore the byte: the core refuses instead.
	old := *rt.p
	old.Minor = 9
	real := rt.p
	rt.p = &old
	defer func() { rt.p = real }()
	err := testStream(t, dev).Gemm(GemmDesc{AType: F32, BType: F32, DType: F32, TransA: true, M: m, N: 1, K: k, SwiGLUB: true},
		GemmOperands{A: aBuf, B: x, D: d, Alpha: 1})
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "needs a plugin of ABI 1.10 or later; this one is 1.9")
}

// mustView is b's region of n bytes at off.
func mustView(t *testing.T, b *Buffer, off, n int) View {
	t.Helper()
	v, err := b.View(off, n)
	require.NoError(t, err)
	return v
}
