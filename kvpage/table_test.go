// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// mockDevice is device 0 of a runtime on the mock, closed at the test's
// end.
func mockDevice(t testing.TB) *core.Device { return mockrt.Device0(t, mockrt.Open(t, "")) }

const (
	tPS      = 4
	tKVHeads = 2
	tQOHeads = 4
	tHeadDim = 64
)

var tCache = attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: tPS, NumKVHeads: tKVHeads, HeadDim: tHeadDim, NumPages: 32}

// row is one f16 row of heads x head dim, a smooth function of a token
// and its position (so equal prefixes give equal K/V, as in a model).
func row(dst []byte, heads int, tok, pos int32, phase float64) {
	for h := 0; h < heads; h++ {
		for d := 0; d < tHeadDim; d++ {
			x := math.Sin(float64(tok)*0.37 + float64(pos)*0.11 + float64(h)*0.5 + float64(d)*0.013 + phase)
			binary.LittleEndian.PutUint16(dst[2*(h*tHeadDim+d):], floatbits.F16FromFloat32(float32(x)))
		}
	}
}

// rig runs steps of requests on the mock: AppendKV of each step's new
// rows, then (optionally) attention over the step.
type rig struct {
	t       *testing.T
	a       *Allocator
	tab     *Table
	cache   *attention.KVCache
	s       *core.Stream
	dec     *attention.Attention
	pre     *attention.Attention
	k, v, q *core.Buffer
	o       *core.Buffer
	toks    map[ReqID][]int32 // each request's tokens (the host model)
}

func newRig(t *testing.T, d *core.Device) *rig {
	a, err := New(Config{NumPages: tCache.NumPages, PageSize: tPS, MaxRequests: 8})
	require.NoError(t, err)
	tab, err := NewTable(d, TableConfig{MaxBatch: 8, MaxPages: 32, MaxRows: 64})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tab.Close()) })
	cache, err := attention.AllocKVCache(d, tCache)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cache.Free() })
	require.NoError(t, core.Memset(cache.K(), 0))
	require.NoError(t, core.Memset(cache.V(), 0))
	r := &rig{t: t, a: a, tab: tab, cache: cache, s: mockrt.Stream(t, d), toks: map[ReqID][]int32{}}
	r.dec, err = attention.New(d, attention.Desc{Kind: attention.Decode, NumQOHeads: tQOHeads, Cache: tCache, MaxBatch: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.dec.Close() })
	r.pre, err = attention.New(d, attention.Desc{Kind: attention.Prefill, NumQOHeads: tQOHeads, Cache: tCache,
		Causal: true, MaxBatch: 8, MaxRows: 64})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.pre.Close() })
	for _, b := range []**core.Buffer{&r.k, &r.v, &r.q, &r.o} {
		*b = mockrt.Alloc(t, d, 64*tQOHeads*tHeadDim*2)
	}
	return r
}

// join starts a request; share says whether it may hit the prefix cache.
func (r *rig) join(prompt []int32, share bool) (ReqID, []int32) {
	lookup := prompt
	if !share {
		lookup = nil
	}
	id, cached, err := r.a.Join(lookup)
	require.NoError(r.t, err)
	r.toks[id] = append([]int32(nil), prompt[:cached]...)
	return id, prompt[cached:]
}

type entry struct {
	id  ReqID
	add []int32
}

// step appends each entry's tokens, uploads the step's table, writes the
// new rows' K/V and runs attention of kind (none when kind < 0); it
// returns O's bytes (nil without attention) and the step.
func (r *rig) step(kind attention.Kind, entries ...entry) ([]byte, Step) {
	t := r.t
	for _, e := range entries {
		cp, ok, err := r.a.Append(e.id, e.add)
		require.NoError(t, err)
		if ok {
			require.NoError(t, CopyPage(r.s, r.cache, cp))
		}
		r.toks[e.id] = append(r.toks[e.id], e.add...)
	}
	require.NoError(t, r.tab.Begin())
	for i, e := range entries {
		b, err := r.tab.Add(r.a, e.id, len(e.add))
		require.NoError(t, err)
		require.Equal(t, i, b)
	}
	st, err := r.tab.Upload(r.s)
	require.NoError(t, err)
	kvRow, qRow := tKVHeads*tHeadDim*2, tQOHeads*tHeadDim*2
	kb, vb, qb := make([]byte, st.Rows*kvRow), make([]byte, st.Rows*kvRow), make([]byte, st.Rows*qRow)
	n := 0
	for _, e := range entries {
		all := r.toks[e.id]
		for i := len(all) - len(e.add); i < len(all); i++ {
			row(kb[n*kvRow:], tKVHeads, all[i], int32(i), 0)
			row(vb[n*kvRow:], tKVHeads, all[i], int32(i), 1)
			row(qb[n*qRow:], tQOHeads, all[i], int32(i), 2)
			n++
		}
	}
	require.NoError(t, r.s.Synchronize())
	require.NoError(t, core.CopyFromHost(r.k, kb))
	require.NoError(t, core.CopyFromHost(r.v, vb))
	require.NoError(t, core.CopyFromHost(r.q, qb))
	require.NoError(t, r.cache.Append(r.s, st.PageTable, st.Batch, st.KVRows(r.k, r.v)))
	if kind < 0 {
		require.NoError(t, r.s.Synchronize())
		return nil, st
	}
	att := r.dec
	ops := attention.Operands{Q: r.q, O: r.o, Pages: st.PageTable}
	if kind == attention.Prefill {
		att = r.pre
		ops.QOIndptr = st.QOIndptr
	}
	require.NoError(t, att.Plan(r.s, st.Schedule(kind == attention.Prefill)))
	require.NoError(t, att.Run(r.s, r.cache, ops))
	require.NoError(t, r.s.Synchronize())
	out := make([]byte, st.Rows*qRow)
	require.NoError(t, core.CopyToHost(out, r.o))
	return out, st
}

func readI32(t *testing.T, v core.Region, n int) []int32 {
	b := make([]byte, v.Len())
	require.GreaterOrEqual(t, len(b), 4*n)
	b = b[:4*n]
	require.NoError(t, core.CopyToHost(b, v))
	s := make([]int32, len(b)/4)
	for i := range s {
		s[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return s
}

// checkTable compares the uploaded step with the allocator's pages.
func (r *rig) checkTable(st Step, entries ...entry) {
	t := r.t
	b := st.Batch
	indptr, indices, last := readI32(t, st.PageTable.Indptr, b+1), readI32(t, st.PageTable.Indices, st.Pages), readI32(t, st.PageTable.LastPageLen, b)
	qo, bidx, pos := readI32(t, st.QOIndptr, b+1), readI32(t, st.BatchIndices, st.Rows), readI32(t, st.Positions, st.Rows)
	require.Len(t, indptr, len(entries)+1)
	assert.Equal(t, st.Schedule(true).KVIndptr, indptr)
	assert.Equal(t, st.Schedule(true).KVLastPageLen, last)
	assert.Equal(t, st.Schedule(true).QOIndptr, qo)
	row := 0
	for b, e := range entries {
		pages, n, err := r.a.Pages(e.id)
		require.NoError(t, err)
		assert.Equal(t, pages, indices[indptr[b]:indptr[b+1]], "request %d's pages", b)
		assert.Equal(t, int32(n-(len(pages)-1)*tPS), last[b])
		assert.Equal(t, int32(row), qo[b])
		for i := 0; i < len(e.add); i++ {
			assert.Equal(t, int32(b), bidx[row])
			assert.Equal(t, int32(n-len(e.add)+i), pos[row])
			row++
		}
	}
}

// Requests sharing a system prompt (prefix hits), one forked mid-page
// (copy on write), through AppendKV and prefill and decode attention on
// the mock: the outputs equal those of the same requests without any
// sharing, and the uploaded tables match the allocator.
func TestTableSharedPrefixOnMock(t *testing.T) {
	d := mockDevice(t)
	sys := seq(100, 10)
	p0, p1, p2 := cat(sys, seq(200, 3)), cat(sys, seq(300, 3)), cat(sys, seq(400, 5))

	run := func(share bool) (outs [][]byte, hits int, copies int64) {
		r := newRig(t, d)
		// Step 1: p0's prefill.
		id0, rest0 := r.join(p0, share)
		o, _ := r.step(attention.Prefill, entry{id0, rest0})
		outs = append(outs, o)
		// Step 2: p1 and p2 join; with sharing they find sys's two full
		// pages and prefill only the rest. Without, their first 8 tokens
		// are written in a step of their own first (no attention).
		id1, rest1 := r.join(p1, share)
		id2, rest2 := r.join(p2, share)
		hits = len(p1) - len(rest1) + len(p2) - len(rest2)
		if !share {
			r.step(-1, entry{id1, rest1[:8]}, entry{id2, rest2[:8]})
			rest1, rest2 = rest1[8:], rest2[8:]
		}
		e2 := []entry{{id1, rest1}, {id2, rest2}}
		o, st := r.step(attention.Prefill, e2...)
		r.checkTable(st, e2...)
		outs = append(outs, o)
		// Step 3: p1 forks mid-page; each of the four decodes a token of
		// its own. With sharing, the fork and p1 share p1's partial last
		// page, so the first of them to append copies it.
		var idf ReqID
		if share {
			var err error
			idf, err = r.a.Fork(id1)
			require.NoError(t, err)
			r.toks[idf] = append([]int32(nil), r.toks[id1]...)
		} else {
			var rest []int32
			idf, rest = r.join(p1, false)
			r.step(-1, entry{idf, rest})
		}
		e3 := []entry{{id0, []int32{7}}, {id1, []int32{8}}, {id2, []int32{9}}, {idf, []int32{10}}}
		o, st = r.step(attention.Decode, e3...)
		r.checkTable(st, e3...)
		outs = append(outs, o)
		if share {
			pf, _, _ := r.a.Pages(idf)
			p1p, _, _ := r.a.Pages(id1)
			assert.Equal(t, p1p[:3], pf[:3], "the fork shares the full pages")
			assert.NotEqual(t, p1p[3], pf[3], "and has a copy of the last")
		}
		return outs, hits, r.a.Stats().Copies
	}
	shared, hits, copies := run(true)
	plain, plainHits, plainCopies := run(false)
	assert.Equal(t, 16, hits, "p1 and p2 each found sys's two full pages")
	assert.Zero(t, plainHits)
	assert.Equal(t, int64(1), copies)
	assert.Zero(t, plainCopies)
	require.Len(t, shared, 3)
	for i := range shared {
		require.NotEmpty(t, shared[i])
		assert.Equal(t, plain[i], shared[i], "step %d's attention output", i+1)
	}
	assert.NotEqual(t, shared[2][:512], shared[2][512:1024], "distinct requests attend to distinct rows")
}

func TestTableErrors(t *testing.T) {
	d := mockDevice(t)
	a, err := New(Config{NumPages: 8, PageSize: 4, MaxRequests: 4})
	require.NoError(t, err)
	tab, err := NewTable(d, TableConfig{MaxBatch: 2, MaxPages: 3, MaxRows: 4})
	require.NoError(t, err)
	s := mockrt.Stream(t, d)
	big, _ := joinAll(t, a, seq(0, 9))    // 3 pages
	small, _ := joinAll(t, a, seq(50, 2)) // 1 page
	empty, _, err := a.Join(nil)
	require.NoError(t, err)

	_, err = NewTable(d, TableConfig{MaxBatch: 0, MaxPages: 1, MaxRows: 1})
	assert.ErrorContains(t, err, "kvpage: table: max batch 0")
	_, err = tab.Add(a, small, 1)
	assert.ErrorContains(t, err, "add outside a step")
	_, err = tab.Upload(s)
	assert.ErrorContains(t, err, "upload outside a step")
	require.NoError(t, tab.Begin())
	_, err = tab.Upload(s)
	assert.ErrorContains(t, err, "empty step")
	tests := []struct {
		name string
		id   ReqID
		rows int
		msg  string
	}{
		{"no tokens", empty, 0, "has no tokens"},
		{"more rows than tokens", small, 3, "3 new rows of its 2 tokens"},
		{"unknown request", makeID(3, 9), 0, "no such request"},
		{"fits", big, 2, ""},
		{"too many pages", small, 1, "does not fit the step: 1 of 2 requests, 3 of 3 pages"},
		{"too many rows", big, 3, "rows taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tab.Add(a, tc.id, tc.rows)
			if tc.msg == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.msg)
		})
	}
	_, err = tab.Upload(s)
	require.NoError(t, err)
	require.NoError(t, tab.Close())
	assert.ErrorContains(t, tab.Begin(), "after Close")
	assert.ErrorContains(t, CopyPage(s, nil, Copy{}), "pages 0 -> 0")
}

// A warm decode step (Begin, Add x batch, Upload, plan and run) allocates
// nothing.
func TestTableZeroAllocs(t *testing.T) {
	d := mockDevice(t)
	r := newRig(t, d)
	var es []entry
	for i := 0; i < 4; i++ {
		id, rest := r.join(cat(seq(100, 6), seq(10*i, 3)), true)
		es = append(es, entry{id, rest})
	}
	r.step(attention.Prefill, es...)
	step := func() {
		if err := r.tab.Begin(); err != nil {
			panic(err)
		}
		for _, e := range es {
			if _, err := r.tab.Add(r.a, e.id, 1); err != nil {
				panic(err)
			}
		}
		st, err := r.tab.Upload(r.s)
		if err != nil {
			panic(err)
		}
		if err := r.dec.Plan(r.s, st.Schedule(false)); err != nil {
			panic(err)
		}
		if err := r.dec.Run(r.s, r.cache, attention.Operands{Q: r.q, O: r.o, Pages: st.PageTable}); err != nil {
			panic(err)
		}
	}
	step()
	assert.Zero(t, testing.AllocsPerRun(100, step))
	require.NoError(t, r.s.Synchronize())
}
