// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

func i32le(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// A decode step of two requests on the mock: the Go checks, the plugin's
// checks, and no allocation on a warm plan and run.
func TestAttentionDecode(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	cd := core.KVCacheDesc{DType: core.F16, Layout: core.KVLayoutNHD, PageSize: 4, NumKVHeads: 2, HeadDim: 64, NumPages: 4}
	cache, err := d.AllocKVCache(cd)
	require.NoError(t, err)
	defer cache.Free()
	require.NoError(t, core.Memset(cache.K(), 0x11))
	require.NoError(t, core.Memset(cache.V(), 0x22))
	tables, err := d.Alloc(256)
	require.NoError(t, err)
	defer tables.Free()
	indptr, _ := tables.View(0, 12)
	indices, _ := tables.View(16, 12)
	last, _ := tables.View(32, 8)
	require.NoError(t, core.CopyFromHost(indptr, i32le(0, 2, 3)))
	require.NoError(t, core.CopyFromHost(indices, i32le(3, 0, 2)))
	require.NoError(t, core.CopyFromHost(last, i32le(1, 4)))
	rowBytes := 4 * 64 * 2
	q, err := d.Alloc(2 * rowBytes)
	require.NoError(t, err)
	defer q.Free()
	o, err := d.Alloc(2 * rowBytes)
	require.NoError(t, err)
	defer o.Free()
	require.NoError(t, core.Memset(q, 0x33))

	a, err := d.NewAttention(core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: 4, Cache: cd, MaxBatch: 2})
	require.NoError(t, err)
	sched := core.AttentionSchedule{KVIndptr: []int32{0, 2, 3}, KVLastPageLen: []int32{1, 4}}
	ops := core.AttentionOperands{Q: q, O: o, Pages: core.PageTable{Indptr: indptr, Indices: indices, LastPageLen: last}}

	tests := []struct {
		name string
		fn   func() error
		want error
	}{
		{"run before plan", func() error { return s.RunAttention(a, cache, ops) }, core.ErrFailedPrecondition},
		{"plan without last page lengths", func() error {
			return s.PlanAttention(a, core.AttentionSchedule{KVIndptr: []int32{0, 1}})
		}, core.ErrInvalidArgument},
		{"plan beyond max batch", func() error {
			return s.PlanAttention(a, core.AttentionSchedule{KVIndptr: []int32{0, 1, 2, 3}, KVLastPageLen: []int32{1, 1, 1}})
		}, core.ErrInvalidArgument},
		{"plan", func() error { return s.PlanAttention(a, sched) }, nil},
		{"run with a view too small", func() error {
			small, _ := o.View(0, rowBytes)
			bad := ops
			bad.O = small
			return s.RunAttention(a, cache, bad)
		}, core.ErrOutOfRange},
		{"run with a qo_indptr for decode", func() error {
			bad := ops
			bad.QOIndptr = indptr
			return s.RunAttention(a, cache, bad)
		}, core.ErrInvalidArgument},
		{"run", func() error { return s.RunAttention(a, cache, ops) }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := s.PlanAttention(a, sched); err != nil {
			panic(err)
		}
		if err := s.RunAttention(a, cache, ops); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per plan and run")
	require.NoError(t, s.Synchronize())
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Close(), core.ErrClosed)
	require.ErrorIs(t, s.RunAttention(a, cache, ops), core.ErrClosed)
}

func TestAttentionDescChecks(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	cd := core.KVCacheDesc{DType: core.BF16, PageSize: 16, NumKVHeads: 2, HeadDim: 128}
	tests := []struct {
		name string
		desc core.AttentionDesc
		want error
	}{
		{"heads not a multiple", core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: 3, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"no kind", core.AttentionDesc{NumQOHeads: 2, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"prefill without max rows", core.AttentionDesc{Kind: core.AttentionPrefill, NumQOHeads: 2, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"causal decode", core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: 2, Cache: cd, MaxBatch: 1, Causal: true}, core.ErrInvalidArgument},
		{"f32 is unsupported", core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: 2, MaxBatch: 1,
			Cache: core.KVCacheDesc{DType: core.F32, PageSize: 16, NumKVHeads: 2, HeadDim: 128}}, core.ErrUnsupported},
		{"gqa 7 decode", core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: 14, Cache: cd, MaxBatch: 1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := d.NewAttention(tc.desc)
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, a.Close())
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}
