// SPDX-License-Identifier: Apache-2.0

package core

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
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
			assert.Zero(t, d.Reserved, "the reserved byte")
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
