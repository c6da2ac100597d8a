// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/le"
)

func TestLaunchFillAndTail(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	s := stream(t, d)
	mod, err := d.BuiltinModule()
	require.NoError(t, err)
	m2, err := d.BuiltinModule()
	require.NoError(t, err)
	assert.Same(t, mod, m2)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	info := inspect.Kernel(fill)
	assert.Equal(t, []diag.Param{{Kind: "buffer", Size: 8}, {Kind: "f32", Size: 4}, {Kind: "u64", Size: 8}}, info.Params)
	info.Params[0].Kind = "changed" // a copy: the kernel's own is untouched
	assert.Equal(t, "buffer", inspect.Kernel(fill).Params[0].Kind)
	assert.Zero(t, inspect.Kernel(nil).Params)
	const n = 1000
	buf := alloc(t, d, 4*n)
	require.NoError(t, core.Memset(buf, 0xff)) // poison (NaN)
	// 3 blocks of 256 = 768 threads: the tail stays poisoned
	require.NoError(t, s.Launch(fill, core.LaunchConfig{Grid: [3]uint32{3}, Block: [3]uint32{256}},
		core.ArgBuffer(buf), core.ArgScalar[float32](2.5), core.ArgScalar[uint64](n)))
	require.NoError(t, s.Synchronize())
	got := make([]byte, 4*n)
	require.NoError(t, core.CopyToHost(got, buf))
	v := le.ToFloat32s(got)
	assert.Equal(t, float32(2.5), v[0])
	assert.Equal(t, float32(2.5), v[767])
	assert.True(t, math.IsNaN(float64(v[768])))
}

func TestZeroAllocations(t *testing.T) {
	d, s, fill, buf := fillSetup(t, "", 4096)
	view, err := buf.View(256, 1024)
	require.NoError(t, err)
	small := make([]byte, 512)
	cfg := core.Grid1D(256, 256)
	t.Run("launch", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			_ = s.Launch(fill, cfg, core.ArgBuffer(view), core.ArgScalar[float32](1), core.ArgScalar[uint64](256))
		}))
		require.NoError(t, s.Synchronize())
	})
	t.Run("small copies", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			_ = core.CopyFromHost(view, small)
			_ = core.CopyToHost(small, buf)
		}))
	})
	t.Run("staged copy", func(t *testing.T) {
		big := alloc(t, d, 4<<20)
		data := make([]byte, 4<<20)
		require.NoError(t, core.CopyFromHost(big, data)) // warm a stager
		assert.Zero(t, testing.AllocsPerRun(5, func() {
			_ = core.CopyFromHost(big, data)
			_ = core.CopyToHost(data, big)
		}))
	})
	t.Run("gemm warm", func(t *testing.T) {
		a, _ := d.Alloc(16 * 16 * 4)
		defer a.Free()
		desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 16, N: 16, K: 16}
		whole, err := a.View(0, a.Len())
		require.NoError(t, err)
		ops := core.GemmOperands{A: a, B: whole, D: buf, Alpha: 1}
		require.NoError(t, s.Gemm(desc, ops))
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = s.Gemm(desc, ops) }))
		require.NoError(t, s.Synchronize())
	})
}

func TestEventsAndTiming(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	s := stream(t, d)
	sleep := builtin(t, d, "sleep_ns")
	el, err := s.Time(func() error {
		return s.Launch(sleep, core.Grid1D(1, 1), core.ArgScalar[uint64](uint64(2*time.Millisecond)))
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, el, time.Millisecond)
	assert.Less(t, el, time.Second)
	ev, err := d.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, ev.Record(s))
	require.NoError(t, ev.Synchronize())
	done, err := ev.Query()
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, ev.Close())
	assert.ErrorIs(t, ev.Close(), core.ErrClosed)
	_, err = core.Elapsed(ev, ev)
	assert.ErrorIs(t, err, core.ErrClosed)
}

func TestOpCacheEvictsAndCounts(t *testing.T) {
	rt := openMockCfg(t, core.Config{OpCacheSize: 2})
	d := dev0(t, rt)
	s := stream(t, d)
	buf := alloc(t, d, 64*64*4)
	for round := 0; round < 3; round++ {
		for m := 1; m <= 4; m++ {
			desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: m, N: 8, K: 8}
			require.NoError(t, s.Gemm(desc, core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}))
			require.NoError(t, s.Gemm(desc, core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}))
		}
	}
	st := inspect.OpCache(rt)
	assert.EqualValues(t, 12, st.Misses)
	assert.EqualValues(t, 12, st.Hits)
	assert.EqualValues(t, 10, st.Evictions)
	assert.Equal(t, 2, st.Size)
	require.NoError(t, d.Synchronize())
	assert.Zero(t, inspect.OpCache(rt).Pending)
	stats, err := inspect.Stats(rt)
	require.NoError(t, err)
	assert.EqualValues(t, 2, stats.LivePlans)
	// another alignment class is another plan
	v, _ := buf.View(4, 8*8*4)
	require.NoError(t, s.Gemm(core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 4, N: 8, K: 8},
		core.GemmOperands{A: v, B: buf, D: buf, Alpha: 1}))
	assert.EqualValues(t, 13, inspect.OpCache(rt).Misses)
	require.NoError(t, rt.Trim())
	stats, err = inspect.Stats(rt)
	require.NoError(t, err)
	assert.Zero(t, stats.LivePlans)
}
