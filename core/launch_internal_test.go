// SPDX-License-Identifier: Apache-2.0

package core

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
)

// Launch and Gemm hold one use per distinct buffer and release every use
// they took, on success and on each error, for launches packed in the
// small array and in the full one.
func TestLaunchAndGemmBalanceUses(t *testing.T) {
	rt, dev := testRuntime(t, "delay_us=0")
	s := testStream(t, dev)
	x := testAlloc(t, dev, 4096)
	y := testAlloc(t, dev, 4096)
	freed, err := dev.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	mod, _ := testKernels(t, dev)
	uses := func() []int64 { return []int64{x.l.v.Load(), y.l.v.Load(), mod.l.v.Load(), s.l.v.Load()} }
	zero := []int64{0, 0, 0, 0}

	t.Run("add with one buffer three times", func(t *testing.T) {
		add, err := mod.Kernel("add_f32")
		require.NoError(t, err)
		in := make([]byte, 16)
		for i := 0; i < 4; i++ {
			binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i+1)))
		}
		require.NoError(t, CopyFromHost(x, in))
		v, err := x.View(0, 16)
		require.NoError(t, err)
		require.NoError(t, s.Launch(add, Grid1D(4, 4), ArgBuffer(v), ArgBuffer(x), ArgBuffer(v), ArgScalar[uint64](4)))
		require.NoError(t, s.Synchronize())
		out := make([]byte, 16)
		require.NoError(t, CopyToHost(out, x))
		for i := 0; i < 4; i++ {
			assert.Equal(t, float32(2*(i+1)), math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])))
		}
		assert.Equal(t, zero, uses())
	})

	// A kernel of 12 parameters (the full array), run against the mock's
	// stream_query in place of the launch slot (it reads only the runtime
	// and the stream).
	params := make([]paramInfo, 12)
	for i := range params {
		params[i] = paramInfo{kind: abi.ArgBuffer, size: 8}
		if i%3 == 2 {
			params[i] = paramInfo{kind: abi.ArgAny, size: 4}
		}
	}
	big := &Kernel{mod: mod, name: "big", info: kernelInfo{params: params}}
	args := func(last Arg) []Arg {
		a := make([]Arg, 12)
		for i := range a {
			switch {
			case i%3 == 2:
				a[i] = ArgScalar[uint32](uint32(i))
			case i%2 == 0:
				a[i] = ArgBuffer(x)
			default:
				a[i] = ArgBuffer(View{buf: y, n: y.size})
			}
		}
		a[11] = last
		return a
	}
	stub := *rt.p
	stub.API.Launch = stub.API.StreamQuery
	real := rt.p
	rt.p = &stub
	cases := []struct {
		name string
		last Arg
		err  error
	}{
		{"ok", ArgScalar[uint32](7), nil},
		{"freed last", ArgBuffer(freed), ErrFreed},
		{"zero Arg last", Arg{}, ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run("12 arguments "+c.name, func(t *testing.T) {
			a := args(c.last)
			if c.last.kind == abi.ArgBuffer {
				big.info.params[11] = paramInfo{kind: abi.ArgBuffer, size: 8}
			} else {
				big.info.params[11] = paramInfo{kind: abi.ArgAny, size: 4}
			}
			err := s.Launch(big, Grid1D(1, 1), a...)
			if c.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.err)
			}
			assert.Equal(t, zero, uses())
		})
	}
	rt.p = real

	t.Run("gemm errors release their uses", func(t *testing.T) {
		desc := GemmDesc{AType: F32, BType: F32, DType: F32, M: 8, N: 8, K: 8}
		require.NoError(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: x, Alpha: 1}))
		require.NoError(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: x, Alpha: 1}))
		assert.ErrorIs(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: freed, Alpha: 1}), ErrFreed)
		short, err := y.View(0, 8)
		require.NoError(t, err)
		assert.ErrorIs(t, s.Gemm(desc, GemmOperands{A: x, B: short, D: x, Alpha: 1}), ErrOutOfRange)
		require.NoError(t, s.Synchronize())
		assert.Equal(t, zero, uses())
		rt.plans.mu.Lock()
		for _, e := range rt.plans.m {
			assert.Zero(t, e.refs.Load())
		}
		rt.plans.mu.Unlock()
	})
}
