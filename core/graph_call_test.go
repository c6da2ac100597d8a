// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/quant"
)

// randHalves is n random bf16 values.
func randHalves(r *rand.Rand, n int) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return halves(core.BF16, v)
}

// TestGraphReplayMatchesEagerCalls: each operation recorded through the
// call-or-record funnel (CALL items of ABI 1.7 for attention runs, KV
// appends, quantized and grouped matmul; LAUNCH items for the built-in
// kernels) replays to the same bytes as its eager call.
func TestGraphReplayMatchesEagerCalls(t *testing.T) {
	e := newAttentionEnv(t)
	d, s := e.d, e.s
	r := rand.New(rand.NewPCG(21, 4))

	// Quantized matmul: y (3 x 16) = x (3 x 128) * dequant(W (16 x 128))^T.
	w := make([]float32, 16*128)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	q, err := quant.Quantize(w, 16, 128, quant.Options{GroupSize: 64, Bits: 8, ScaleType: core.BF16})
	require.NoError(t, err)
	qw, qs, qb, qx := upload(t, d, q.Q), upload(t, d, q.Scales), upload(t, d, q.Biases), upload(t, d, randHalves(r, 3*128))
	qy := upload(t, d, make([]byte, 2*3*16))

	// Grouped GEMM: groups of 3, 0 and 5 rows, n 32, k 64, bf16.
	msizes := []int{3, 0, 5}
	ga, gb := upload(t, d, randHalves(r, 8*64)), upload(t, d, randHalves(r, 3*32*64))
	gd := upload(t, d, make([]byte, 2*8*32))

	// RMSNorm (a built-in kernel): 4 rows of 64 bf16.
	rms := builtin(t, d, "rmsnorm_bf16")
	nx, nw := upload(t, d, randHalves(r, 4*64)), upload(t, d, randHalves(r, 64))
	ny := upload(t, d, make([]byte, 2*4*64))

	// Attention: the decode step of newAttentionEnv, planned once.
	ao := upload(t, d, make([]byte, 2*e.row))
	require.NoError(t, e.a.Plan(e.s, schedTwo))
	require.NoError(t, core.CopyFromHost(e.q, randHalves(r, 2*e.row/2)))

	// KV append: one new row for each request at its last position
	// (request 0: 2 pages, 1 token in the last: position 4; request 1:
	// 1 page of 4: position 3).
	kr, vr := upload(t, d, randHalves(r, 2*2*64)), upload(t, d, randHalves(r, 2*2*64))
	bidx, pos := upload(t, d, i32le(0, 1)), upload(t, d, i32le(4, 3))

	tests := []struct {
		name string
		out  []core.Region // what the op writes, compared
		op   func(s *core.Stream) error
		// scribble changes what the op's arguments point to in Go memory
		// after the recorded call (the graph must hold its own copy).
		scribble func()
	}{
		{"quant_matmul", []core.Region{qy}, func(s *core.Stream) error {
			return matmul.Quant(s, matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, GroupSize: 64, M: 16, N: 3, K: 128},
				matmul.QuantOperands{W: qw, Scales: qs, Biases: qb, X: qx, Y: qy})
		}, nil},
		{"grouped_gemm", []core.Region{gd}, func(s *core.Stream) error {
			return matmul.Grouped(s, matmul.GroupedDesc{ABType: core.BF16, MSizes: msizes, N: 32, K: 64},
				matmul.GroupedOperands{A: ga, B: gb, D: gd})
		}, func() { msizes[0], msizes[2] = 8, 0 }},
		{"rmsnorm_bf16", []core.Region{ny}, func(s *core.Stream) error {
			return s.Launch(rms, core.LaunchConfig{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{64, 1, 1}},
				core.ArgBuffer(ny), core.ArgBuffer(nx), core.ArgBuffer(nw), core.ArgScalar[float32](1e-5), core.ArgScalar[uint64](4), core.ArgScalar[uint64](64))
		}, nil},
		{"attention_run", []core.Region{ao}, func(s *core.Stream) error {
			return e.a.Run(s, e.cache, attention.Operands{Q: e.q, O: ao, Pages: e.pages})
		}, nil},
		{"kv_append", []core.Region{e.cache.K(), e.cache.V()}, func(s *core.Stream) error {
			return e.cache.Append(s, e.pages, 2, attention.KVRows{K: kr, V: vr, BatchIndices: bidx, Positions: pos, NNZ: 2})
		}, nil},
	}
	read := func(t *testing.T, regs []core.Region) []byte {
		require.NoError(t, s.Synchronize())
		var all []byte
		for _, reg := range regs {
			b := make([]byte, reg.Len())
			require.NoError(t, core.CopyToHost(b, reg))
			all = append(all, b...)
		}
		return all
	}
	poison := func(t *testing.T, regs []core.Region) []byte {
		for _, reg := range regs {
			require.NoError(t, core.Memset(reg, 0xa5))
		}
		return read(t, regs)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := poison(t, tc.out)
			require.NoError(t, tc.op(s))
			eager := read(t, tc.out)
			require.False(t, bytes.Equal(before, eager), "the eager call wrote its output")

			poison(t, tc.out)
			saved := append([]int(nil), msizes...)
			g, err := s.Capture(func(cs *core.Stream) error {
				err := tc.op(cs)
				if tc.scribble != nil {
					tc.scribble() // before the graph is built
				}
				return err
			})
			copy(msizes, saved)
			require.NoError(t, err)
			defer g.Close()
			assert.Equal(t, 1, g.Len())
			assert.Equal(t, before, read(t, tc.out), "capturing runs nothing")
			for replay := 0; replay < 2; replay++ {
				poison(t, tc.out)
				require.NoError(t, g.Launch(s))
				assert.True(t, bytes.Equal(eager, read(t, tc.out)), "replay %d differs from the eager call", replay)
			}
		})
	}
}
