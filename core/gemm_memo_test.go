// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// The stream's memo of plans (a repeated Gemm skips validation, the map
// and the lock) must keep every check of the full path: extents, freed
// operands, alignment classes, eviction and Trim, and the counters.
func TestGemmMemoKeepsChecks(t *testing.T) {
	rt := openMockCfg(t, core.Config{OpCacheSize: 4})
	d := dev0(t, rt)
	s := stream(t, d)
	buf := alloc(t, d, 64<<10)
	desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 8, N: 8, K: 8}
	ops := core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}
	require.NoError(t, s.Gemm(desc, ops)) // miss: the plan, then the memo
	require.NoError(t, s.Gemm(desc, ops)) // memo hit
	st := inspect.OpCache(rt)
	assert.EqualValues(t, 1, st.Misses)
	assert.EqualValues(t, 1, st.Hits)

	small, err := buf.View(0, 8*8*4-4)
	require.NoError(t, err)
	off4, err := buf.View(4, 8*8*4)
	require.NoError(t, err)
	other, err := d.Alloc(8 * 8 * 4)
	require.NoError(t, err)
	require.NoError(t, other.Free())

	cases := []struct {
		name string
		ops  core.GemmOperands
		is   error
		msg  string
	}{
		{"short A", core.GemmOperands{A: small, B: buf, D: buf, Alpha: 1}, core.ErrOutOfRange, "operand A needs 256 bytes, its region has 252"},
		{"short D", core.GemmOperands{A: buf, B: buf, D: small, Alpha: 1}, core.ErrOutOfRange, "operand D needs 256 bytes, its region has 252"},
		{"freed B", core.GemmOperands{A: buf, B: other, D: buf, Alpha: 1}, core.ErrFreed, "buffer was freed"},
		{"freed C not read", core.GemmOperands{A: buf, B: buf, C: other, D: buf, Alpha: 1}, core.ErrFreed, "buffer was freed"},
		{"nil D", core.GemmOperands{A: buf, B: buf, Alpha: 1}, core.ErrInvalidArgument, "operand D is required"},
		{"C needed", core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1, Beta: 1}, core.ErrInvalidArgument, "operand C is required when beta is 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 2 { // the second call after the memo had a chance to change
				err := s.Gemm(desc, c.ops)
				require.Error(t, err)
				assert.ErrorIs(t, err, c.is)
				assert.Contains(t, err.Error(), c.msg)
			}
		})
	}
	before := inspect.OpCache(rt)
	assert.Equal(t, 1, before.Size, "failed calls make no plan")

	t.Run("alignment class is part of the key", func(t *testing.T) {
		require.NoError(t, s.Gemm(desc, core.GemmOperands{A: off4, B: buf, D: buf, Alpha: 1}))
		require.NoError(t, s.Gemm(desc, ops))
		require.NoError(t, s.Gemm(desc, core.GemmOperands{A: off4, B: buf, D: buf, Alpha: 1}))
		st := inspect.OpCache(rt)
		assert.EqualValues(t, before.Misses+1, st.Misses)
		assert.EqualValues(t, before.Hits+2, st.Hits)
	})
	t.Run("same plan from an equivalent descriptor", func(t *testing.T) {
		before := inspect.OpCache(rt)
		ld := desc
		ld.LDA, ld.LDB, ld.LDD = 8, 8, 8
		require.NoError(t, s.Gemm(ld, ops))
		require.NoError(t, s.Gemm(ld, ops))
		st := inspect.OpCache(rt)
		assert.EqualValues(t, before.Misses, st.Misses)
		assert.EqualValues(t, before.Hits+2, st.Hits)
	})
	t.Run("after Trim the memo is not used", func(t *testing.T) {
		require.NoError(t, rt.Trim())
		before := inspect.OpCache(rt)
		require.NoError(t, s.Gemm(desc, ops))
		require.NoError(t, s.Gemm(desc, ops))
		st := inspect.OpCache(rt)
		assert.EqualValues(t, before.Misses+1, st.Misses)
		assert.EqualValues(t, before.Hits+1, st.Hits)
		stats, err := inspect.Stats(rt)
		require.NoError(t, err)
		assert.EqualValues(t, 1, stats.LivePlans)
	})
	t.Run("evicted plans leave the memo", func(t *testing.T) {
		for m := 1; m <= 6; m++ { // more shapes than the cache holds
			dm := desc
			dm.M = m
			require.NoError(t, s.Gemm(dm, ops))
		}
		before := inspect.OpCache(rt)
		dm := desc
		dm.M = 1 // evicted: a miss, though the stream's memo still points at it
		require.NoError(t, s.Gemm(dm, ops))
		st := inspect.OpCache(rt)
		assert.EqualValues(t, before.Misses+1, st.Misses)
		assert.Equal(t, 4, st.Size)
		require.NoError(t, d.Synchronize())
		stats, err := inspect.Stats(rt)
		require.NoError(t, err)
		assert.EqualValues(t, 4, stats.LivePlans)
	})
}

// Gemm from many goroutines on shared streams while the cache evicts and
// Trim runs: for -race, and for plans destroyed under a run.
func TestGemmMemoConcurrent(t *testing.T) {
	rt := openMockCfg(t, core.Config{OpCacheSize: 2, PluginOptions: "delay_us=0"})
	d := dev0(t, rt)
	buf := alloc(t, d, 64<<10)
	streams := make([]*core.Stream, 2)
	for i := range streams {
		streams[i] = stream(t, d)
	}
	ops := core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := streams[g%2]
			for i := 0; i < 200; i++ {
				desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 1 + (i+g)%3, N: 4, K: 4}
				if err := s.Gemm(desc, ops); err != nil {
					errs <- err
					return
				}
				if i%50 == 0 && g == 0 {
					if err := rt.Trim(); err != nil {
						errs <- err
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, d.Synchronize())
	st := inspect.OpCache(rt)
	assert.EqualValues(t, 800, st.Hits+st.Misses)
}
