// SPDX-License-Identifier: Apache-2.0

package attention_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// openMock and dev0: the family packages' shared mock runtime.
var (
	openMock = mockrt.Open
	dev0     = mockrt.Device0
	i32le    = mockrt.I32LE
)

// smallKV opens the mock runtime and makes a stream on its device 0 and
// mockrt's small paged KV cache (mockrt.SmallKVCache).
func smallKV(t *testing.T) (*core.Device, *core.Stream, *attention.KVCache, *core.Buffer, attention.PageTable) {
	t.Helper()
	d := dev0(t, openMock(t, ""))
	s := mockrt.Stream(t, d)
	cache, tables, pt := mockrt.SmallKVCache(t, d)
	return d, s, cache, tables, pt
}

// A decode step of two requests on the mock: the Go checks, the plugin's
// checks, and no allocation on a warm plan and run.
func TestAttentionDecode(t *testing.T) {
	d, s, cache, _, pt := smallKV(t)
	cd := mockrt.SmallKVDesc
	rowBytes := 4 * 64 * 2
	q := mockrt.Alloc(t, d, 2*rowBytes)
	o := mockrt.Alloc(t, d, 2*rowBytes)
	require.NoError(t, core.Memset(q, 0x33))

	a, err := attention.New(d, attention.Desc{Kind: attention.Decode, NumQOHeads: 4, Cache: cd, MaxBatch: 2})
	require.NoError(t, err)
	sched := attention.Schedule{KVIndptr: []int32{0, 2, 3}, KVLastPageLen: []int32{1, 4}}
	ops := attention.Operands{Q: q, O: o, Pages: pt}

	tests := []struct {
		name string
		fn   func() error
		want error
	}{
		{"run before plan", func() error { return a.Run(s, cache, ops) }, core.ErrFailedPrecondition},
		{"plan without last page lengths", func() error {
			return a.Plan(s, attention.Schedule{KVIndptr: []int32{0, 1}})
		}, core.ErrInvalidArgument},
		{"plan beyond max batch", func() error {
			return a.Plan(s, attention.Schedule{KVIndptr: []int32{0, 1, 2, 3}, KVLastPageLen: []int32{1, 1, 1}})
		}, core.ErrInvalidArgument},
		{"plan", func() error { return a.Plan(s, sched) }, nil},
		{"run with a view too small", func() error {
			small, _ := o.View(0, rowBytes)
			bad := ops
			bad.O = small
			return a.Run(s, cache, bad)
		}, core.ErrOutOfRange},
		{"run with a qo_indptr for decode", func() error {
			bad := ops
			bad.QOIndptr = pt.Indptr
			return a.Run(s, cache, bad)
		}, core.ErrInvalidArgument},
		{"run", func() error { return a.Run(s, cache, ops) }, nil},
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
		if err := a.Plan(s, sched); err != nil {
			panic(err)
		}
		if err := a.Run(s, cache, ops); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per plan and run")
	require.NoError(t, s.Synchronize())
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Close(), core.ErrClosed)
	require.ErrorIs(t, a.Run(s, cache, ops), core.ErrClosed)
}

func TestAttentionDescChecks(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	cd := attention.KVCacheDesc{DType: core.BF16, PageSize: 16, NumKVHeads: 2, HeadDim: 128}
	tests := []struct {
		name string
		desc attention.Desc
		want error
	}{
		{"heads not a multiple", attention.Desc{Kind: attention.Decode, NumQOHeads: 3, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"no kind", attention.Desc{NumQOHeads: 2, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"prefill without max rows", attention.Desc{Kind: attention.Prefill, NumQOHeads: 2, Cache: cd, MaxBatch: 1}, core.ErrInvalidArgument},
		{"causal decode", attention.Desc{Kind: attention.Decode, NumQOHeads: 2, Cache: cd, MaxBatch: 1, Causal: true}, core.ErrInvalidArgument},
		{"f32 is unsupported", attention.Desc{Kind: attention.Decode, NumQOHeads: 2, MaxBatch: 1,
			Cache: attention.KVCacheDesc{DType: core.F32, PageSize: 16, NumKVHeads: 2, HeadDim: 128}}, core.ErrUnsupported},
		{"gqa 7 decode", attention.Desc{Kind: attention.Decode, NumQOHeads: 14, Cache: cd, MaxBatch: 1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := attention.New(d, tc.desc)
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, a.Close())
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// Append bounds every view of its page table and rows with the check a
// run uses (only Go knows a view's length): a short view is ErrOutOfRange
// naming the operand, and nothing is enqueued (the cache is untouched).
func TestAppendViewBounds(t *testing.T) {
	d, s, cache, tables, pt := smallKV(t)
	cd := mockrt.SmallKVDesc
	view := func(off, n int) core.View {
		v, err := tables.View(off, n)
		require.NoError(t, err)
		return v
	}
	// The new rows are token 4 of request 0 and token 3 of request 1.
	bidx, pos := view(48, 8), view(64, 8)
	require.NoError(t, core.CopyFromHost(bidx, i32le(0, 1)))
	require.NoError(t, core.CopyFromHost(pos, i32le(4, 3)))
	rowBytes := 2 * 64 * 2
	k := mockrt.Alloc(t, d, 2*rowBytes)
	v := mockrt.Alloc(t, d, 2*rowBytes)
	require.NoError(t, core.Memset(k, 0x55))
	require.NoError(t, core.Memset(v, 0x66))
	rows := attention.KVRows{K: k, V: v, BatchIndices: bidx, Positions: pos, NNZ: 2}
	kHalf, _ := k.View(0, rowBytes)
	vHalf, _ := v.View(0, rowBytes)
	inv := mockrt.Alloc(t, d, 4*64/2) // the rotary embedding's HeadDim/2 frequencies
	invShort, _ := inv.View(0, 4*64/2-4)

	tests := []struct {
		name, operand string
		pt            func(*attention.PageTable)
		rows          func(*attention.KVRows)
	}{
		{"Indptr of batch entries", "Indptr", func(p *attention.PageTable) { p.Indptr = view(0, 8) }, nil},
		{"Indptr of no entries", "Indptr", func(p *attention.PageTable) { p.Indptr = view(0, 0) }, nil},
		{"LastPageLen of batch-1 entries", "LastPageLen", func(p *attention.PageTable) { p.LastPageLen = view(32, 4) }, nil},
		{"BatchIndices under NNZ", "BatchIndices", nil, func(r *attention.KVRows) { r.BatchIndices = view(48, 4) }},
		{"Positions under NNZ", "Positions", nil, func(r *attention.KVRows) { r.Positions = view(64, 6) }},
		{"K rows under NNZ", "K rows", nil, func(r *attention.KVRows) { r.K = kHalf }},
		{"V rows under NNZ", "V rows", nil, func(r *attention.KVRows) { r.V = vHalf }},
		{"InvFreq under HeadDim/2", "InvFreq", nil, func(r *attention.KVRows) { r.InvFreq = invShort }},
		{"Q under NNZ x QOHeads", "Q", nil, func(r *attention.KVRows) { r.InvFreq, r.Q, r.QOHeads = inv, kHalf, 2 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, r := pt, rows
			if tc.pt != nil {
				tc.pt(&p)
			}
			if tc.rows != nil {
				tc.rows(&r)
			}
			err := cache.Append(s, p, 2, r)
			require.ErrorIs(t, err, core.ErrOutOfRange)
			assert.Contains(t, err.Error(), "operand "+tc.operand+" ")
			assert.Contains(t, err.Error(), "kv_append")
		})
	}
	require.NoError(t, s.Synchronize())
	got := make([]byte, cd.NumPages*cd.PageBytes())
	require.NoError(t, core.CopyToHost(got, cache.K()))
	assert.Equal(t, bytes.Repeat([]byte{0x11}, len(got)), got, "a refused append wrote K")
	require.NoError(t, core.CopyToHost(got, cache.V()))
	assert.Equal(t, bytes.Repeat([]byte{0x22}, len(got)), got, "a refused append wrote V")

	// The same call with whole views appends both rows where the page
	// table says.
	require.NoError(t, cache.Append(s, pt, 2, rows))
	require.NoError(t, s.Synchronize())
	require.NoError(t, core.CopyToHost(got, cache.K()))
	for _, at := range []struct{ page, slot int }{{0, 0}, {2, 3}} {
		for h := 0; h < cd.NumKVHeads; h++ {
			off, err := cd.Offset(at.page, at.slot, h)
			require.NoError(t, err)
			assert.Equal(t, bytes.Repeat([]byte{0x55}, cd.HeadDim*2), got[off:off+cd.HeadDim*2], "page %d slot %d head %d", at.page, at.slot, h)
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := cache.Append(s, pt, 2, rows); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per warm append")
	require.NoError(t, s.Synchronize())
}

// The rotary embedding's arguments (ABI 1.10): Q and QOHeads only with
// InvFreq, and each with the other; refused before anything is enqueued.
func TestAppendRopeArgs(t *testing.T) {
	d, s, cache, _, pt := smallKV(t)
	b := mockrt.Alloc(t, d, 4096)
	base := attention.KVRows{K: b, V: b, BatchIndices: b, Positions: b, NNZ: 1}
	for _, tc := range []struct {
		name string
		edit func(r *attention.KVRows)
		msg  string
	}{
		{"Q without InvFreq", func(r *attention.KVRows) { r.Q, r.QOHeads = b, 2 }, "only with InvFreq"},
		{"QOHeads without InvFreq", func(r *attention.KVRows) { r.QOHeads = 2 }, "only with InvFreq"},
		{"Q without QOHeads", func(r *attention.KVRows) { r.InvFreq, r.Q = b, b }, "Q needs QOHeads >= 1"},
		{"QOHeads without Q", func(r *attention.KVRows) { r.InvFreq, r.QOHeads = b, 2 }, "Q needs QOHeads >= 1"},
		{"negative QOHeads", func(r *attention.KVRows) { r.InvFreq, r.Q, r.QOHeads = b, b, -1 }, "QOHeads -1 is not in 0 .. 65536"},
		{"too many QOHeads", func(r *attention.KVRows) { r.InvFreq, r.Q, r.QOHeads = b, b, 65537 }, "QOHeads 65537 is not in 0 .. 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.edit(&r)
			err := cache.Append(s, pt, 2, r)
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	require.NoError(t, s.Synchronize())
}

// Offset bounds each index: one out of its range would name another
// page's, slot's or head's bytes.
func TestKVOffsetBounds(t *testing.T) {
	nhd := attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 4, NumKVHeads: 2, HeadDim: 64, NumPages: 3}
	hnd := nhd
	hnd.Layout = attention.KVLayoutHND
	noPages := nhd
	noPages.NumPages = 0
	huge := noPages
	huge.PageSize = 1 << 20
	tests := []struct {
		name             string
		desc             attention.KVCacheDesc
		page, slot, head int
		want             int
		err              error
		msg              string
	}{
		{"first", nhd, 0, 0, 0, 0, nil, ""},
		{"nhd last", nhd, 2, 3, 1, 2*1024 + (3*2+1)*128, nil, ""},
		{"hnd last", hnd, 2, 3, 1, 2*1024 + (1*4+3)*128, nil, ""},
		{"no page count bounds only below", noPages, 1000, 0, 0, 1000 * 1024, nil, ""},
		{"page at the count", nhd, 3, 0, 0, 0, core.ErrOutOfRange, "page 3 is outside the cache's 3 pages"},
		{"negative page", noPages, -1, 0, 0, 0, core.ErrOutOfRange, "page -1"},
		{"slot at the page size", nhd, 0, 4, 0, 0, core.ErrOutOfRange, "slot 4 is outside a page of 4 tokens"},
		{"negative slot", hnd, 0, -1, 0, 0, core.ErrOutOfRange, "slot -1"},
		{"head at the head count", nhd, 0, 0, 2, 0, core.ErrOutOfRange, "head 2 is outside the 2 kv heads"},
		{"negative head", hnd, 0, 0, -1, 0, core.ErrOutOfRange, "head -1"},
		{"offset past the largest int", huge, 1 << 45, 0, 0, 0, core.ErrOutOfRange, "past the largest offset"},
		{"invalid descriptor", attention.KVCacheDesc{DType: core.F16}, 0, 0, 0, 0, core.ErrInvalidArgument, "page size 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.desc.Offset(tc.page, tc.slot, tc.head)
			if tc.err == nil {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.ErrorIs(t, err, tc.err)
			assert.Contains(t, err.Error(), "gpurt: kv_offset: ")
			assert.Contains(t, err.Error(), tc.msg)
			assert.Zero(t, got)
		})
	}
}
