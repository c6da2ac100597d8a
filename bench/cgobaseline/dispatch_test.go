// SPDX-License-Identifier: Apache-2.0

//go:build cgo

package cgobaseline_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench/cgobaseline"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// pair opens the mock twice: through the core (gpurt's call path) and
// through C (the cgo baseline), each with an idle stream on device 0.
func pair(tb testing.TB) (*core.Stream, *cgobaseline.Plugin) {
	tb.Helper()
	s := mockrt.Stream(tb, mockrt.Device0(tb, mockrt.Open(tb, "")))
	pl, err := cgobaseline.Open(testutil.MockPluginPath(tb))
	require.NoError(tb, err)
	tb.Cleanup(pl.Close)
	return s, pl
}

// BenchmarkDispatch is the dispatch figure: stream_query on an idle
// stream, through gpurt's Stream.Query and through a cgo call of the same
// table slot, in one run. `go test -bench Dispatch ./bench/cgobaseline/`
// prints the pair; the ratio gpurt/cgo is the figure (goal <= 2x, and 0
// allocs/op for gpurt).
func BenchmarkDispatch(b *testing.B) {
	s, pl := pair(b)
	b.Run("gpurt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := s.Query(); !ok || err != nil {
				b.Fatalf("stream_query: idle %v, %v", ok, err)
			}
		}
	})
	b.Run("cgo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !pl.StreamQuery() {
				b.Fatal("stream_query: not idle")
			}
		}
	})
	b.Run("c-loop", func(b *testing.B) {
		// the C function alone, called from C: the floor under both
		b.ReportAllocs()
		if busy := pl.StreamQueryLoop(b.N); busy != 0 {
			b.Fatalf("stream_query: %d calls found work pending", busy)
		}
	})
}

// BenchmarkLaunch enqueues fill_f32 on one element through gpurt and
// through a cgo call of the launch slot (synchronizing every 1000).
func BenchmarkLaunch(b *testing.B) {
	s, pl := pair(b)
	require.NoError(b, pl.PrepareLaunch())
	d := s.Device()
	fill := mockrt.Builtin(b, d, "fill_f32")
	buf := mockrt.Alloc(b, d, 256)
	cfg := core.Grid1D(1, 1)
	for _, side := range []struct {
		name         string
		launch, sync func() error
	}{
		{"gpurt", func() error {
			return s.Launch(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		}, s.Synchronize},
		{"cgo", pl.LaunchFill, pl.Synchronize},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := side.launch(); err != nil {
					b.Fatal(err)
				}
				if i++; i%1000 == 0 {
					b.StopTimer()
					require.NoError(b, side.sync())
					b.StartTimer()
				}
			}
			require.NoError(b, side.sync())
		})
	}
}

func TestBaselineCallsTheSameSlot(t *testing.T) {
	s, pl := pair(t)
	t.Run("cgo", func(t *testing.T) {
		assert.True(t, pl.StreamQuery())
		assert.Zero(t, pl.StreamQueryLoop(100))
	})
	t.Run("gpurt zero allocations", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = s.Query() }))
	})
	t.Run("launch", func(t *testing.T) {
		require.NoError(t, pl.PrepareLaunch())
		require.NoError(t, pl.PrepareLaunch(), "a second prepare reuses the kernel")
		require.NoError(t, pl.LaunchFill())
		require.NoError(t, pl.LaunchFillLoop(100))
		require.NoError(t, pl.Synchronize())
		assert.True(t, pl.StreamQuery(), "idle after synchronize")
	})
	t.Run("launch batch", func(t *testing.T) {
		require.NoError(t, pl.PrepareLaunch())
		require.True(t, pl.HasLaunchBatch(), "the mock has the 1.2 launch_batch slot")
		for _, n := range []int{1, 64, cgobaseline.MaxLaunchBatch} {
			require.NoError(t, pl.LaunchFillBatch(n), "batch of %d", n)
		}
		for _, n := range []int{0, cgobaseline.MaxLaunchBatch + 1} {
			assert.ErrorContains(t, pl.LaunchFillBatch(n), "cgobaseline: a batch of", "batch of %d", n)
		}
		require.NoError(t, pl.Synchronize())
		assert.True(t, pl.StreamQuery(), "idle after synchronize")
	})
	t.Run("gemm", func(t *testing.T) {
		const m, n, k = 8, 4, 16
		a, b := make([]byte, 2*k*m), make([]byte, 2*k*n)
		for i := 0; i < len(a); i += 2 {
			a[i+1] = 0x3f // bf16 1.0 = 0x3f80
			a[i] = 0x80
		}
		copy(b, a)
		require.NoError(t, pl.PrepareGemm(m, n, k, a, b))
		require.NoError(t, pl.GemmRun())
		require.NoError(t, pl.GemmRunLoop(10))
		require.NoError(t, pl.Synchronize())
		assert.ErrorContains(t, pl.PrepareGemm(m, n, k, a, b), "already prepared")
	})
	t.Run("gemm operand sizes", func(t *testing.T) {
		assert.ErrorContains(t, pl.PrepareGemm(8, 4, 16, make([]byte, 3), make([]byte, 128)), "cgobaseline: gemm m 8 n 4 k 16 needs 256 and 128 bytes")
	})
	t.Run("bad path", func(t *testing.T) {
		_, err := cgobaseline.Open("/nonexistent/libgpurt_mock.so")
		assert.ErrorContains(t, err, "cgobaseline: dlopen")
	})
}
