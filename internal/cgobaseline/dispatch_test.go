// SPDX-License-Identifier: Apache-2.0

//go:build cgo

package cgobaseline_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cgobaseline"
	"github.com/metrale/gpurt/internal/testutil"
)

// pair opens the mock twice: through the core (gpurt's call path) and
// through C (the cgo baseline), each with an idle stream on device 0.
func pair(tb testing.TB) (*core.Stream, *cgobaseline.Plugin) {
	tb.Helper()
	dir := testutil.MockPlugin(tb)
	rt, err := core.Open(core.Config{PluginPaths: []string{dir}, Backend: "mock"})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = rt.Close() })
	d, err := rt.Device(0)
	require.NoError(tb, err)
	s, err := d.NewStream()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	pl, err := cgobaseline.Open(testutil.MockPluginPath(tb))
	require.NoError(tb, err)
	tb.Cleanup(pl.Close)
	return s, pl
}

// BenchmarkDispatch is the dispatch figure: stream_query on an idle
// stream, through gpurt's Stream.Query and through a cgo call of the same
// table slot, in one run. `go test -bench Dispatch ./internal/cgobaseline/`
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

func TestBaselineCallsTheSameSlot(t *testing.T) {
	s, pl := pair(t)
	t.Run("cgo", func(t *testing.T) {
		assert.True(t, pl.StreamQuery())
		assert.Zero(t, pl.StreamQueryLoop(100))
	})
	t.Run("gpurt zero allocations", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = s.Query() }))
	})
	t.Run("bad path", func(t *testing.T) {
		_, err := cgobaseline.Open("/nonexistent/libgpurt_mock.so")
		assert.ErrorContains(t, err, "cgobaseline: dlopen")
	})
}
