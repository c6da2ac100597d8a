// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/internal/le"
)

// kvBoundsChecks check that AppendKV and RunAttention bound their page
// table alike (issue 22, item 5): Indptr must hold batch+1 entries and
// LastPageLen batch entries, whether the memory ends at the end of a
// buffer or of a view inside a larger one. One check in csrc
// (gp_kv_pages_check) bounds the buffers for both calls on every plugin.
func kvBoundsChecks() []check {
	return []check{
		{"attention/kv_bounds", kvBounds},
		{"attention/kv_append_beyond_indices", kvAppendBeyondIndices},
	}
}

// kvEnv is a small decode setup: a cache, a page table of batch requests
// (one page each), rows for an append, Q and O.
type kvEnv struct {
	attnRes
	e                 *env
	indptr, idx, last *core.Buffer
	rows, meta, q, o  *core.Buffer
	batch, rowBytes   int
}

// attnRes is what an attention check's environment holds and frees: a
// stream, a KV cache, an Attention and buffers.
type attnRes struct {
	s     *core.Stream
	cache *attention.KVCache
	attn  *attention.Attention
	bufs  []*core.Buffer
}

const kvBatch = 3

func newKVEnv(e *env) (*kvEnv, error) {
	desc := attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 16, NumKVHeads: 1, HeadDim: 64, NumPages: 4}
	k := &kvEnv{e: e, batch: kvBatch, rowBytes: desc.NumKVHeads * desc.HeadDim * 2}
	// Every buffer is twice what the table needs: views cut them short.
	if err := k.open(e, desc, 1, kvBatch, []bufSize{{&k.indptr, 8 * (kvBatch + 1)}, {&k.idx, 8 * kvBatch},
		{&k.last, 8 * kvBatch}, {&k.rows, 2 * kvBatch * k.rowBytes}, {&k.meta, 16 * kvBatch},
		{&k.q, 2 * kvBatch * k.rowBytes}, {&k.o, 2 * kvBatch * k.rowBytes}}); err != nil {
		return nil, err
	}
	indptr := []int32{0, 1, 2, 3, 3}
	idx := []int32{2, 0, 3, 1, 1, 1}
	last := []int32{1, 5, 16, 1, 1, 1}
	meta := []int32{0, 1, 2, 0, 4, 15, 0, 0, 0, 0, 0, 0}
	if err := firstErr(core.CopyFromHost(k.indptr, le.Int32s(append(indptr, 0, 0, 0))),
		core.CopyFromHost(k.idx, le.Int32s(idx)), core.CopyFromHost(k.last, le.Int32s(last)),
		core.CopyFromHost(k.meta, le.Int32s(meta)), core.Memset(k.rows, 0), core.Memset(k.q, 0)); err != nil {
		k.free()
		return nil, err
	}
	sched := attention.Schedule{KVIndptr: indptr[:kvBatch+1], KVLastPageLen: last[:kvBatch]}
	if err := k.attn.Plan(k.s, sched); err != nil {
		k.free()
		return nil, err
	}
	return k, nil
}

// bufSize is a buffer an attention check's environment allocates: where
// it is kept, and its size in bytes.
type bufSize struct {
	b **core.Buffer
	n int
}

// open makes r's stream, a KV cache of desc, a decode Attention over it
// with heads query heads for maxBatch requests, and the buffers bufs
// name; after an error it frees what it made. A plugin without attention
// (or its KV layout) is a skip.
func (r *attnRes) open(e *env, desc attention.KVCacheDesc, heads, maxBatch int, bufs []bufSize) error {
	var err error
	if r.s, err = e.dev.NewStream(); err != nil {
		return err
	}
	if r.cache, err = attention.AllocKVCache(e.dev, desc); err != nil {
		r.free()
		return attnSkip(err)
	}
	if r.attn, err = attention.New(e.dev, attention.Desc{Kind: attention.Decode, NumQOHeads: heads, Cache: desc,
		MaxBatch: maxBatch}); err != nil {
		r.free()
		return attnSkip(err)
	}
	for _, p := range bufs {
		if *p.b, err = e.dev.Alloc(p.n); err != nil {
			r.free()
			return err
		}
		r.bufs = append(r.bufs, *p.b)
	}
	return nil
}

// free waits for the stream, then releases what there is: the Attention,
// the cache, the buffers and the stream.
func (r *attnRes) free() {
	if r.s != nil {
		_ = r.s.Synchronize()
	}
	if r.attn != nil {
		r.attn.Close()
	}
	if r.cache != nil {
		r.cache.Free()
	}
	for _, b := range r.bufs {
		b.Free()
	}
	if r.s != nil {
		r.s.Close()
	}
}

// view is b's first n bytes (every n here is inside its buffer).
func view(b *core.Buffer, n int) core.Region {
	v, _ := b.View(0, n)
	return v
}

func (k *kvEnv) appendKV(pt attention.PageTable) error {
	rows := attention.KVRows{K: view(k.rows, kvBatch*k.rowBytes), V: view(k.rows, kvBatch*k.rowBytes),
		BatchIndices: view(k.meta, 4*kvBatch), NNZ: kvBatch}
	pos, err := k.meta.View(4*kvBatch, 4*kvBatch)
	if err != nil {
		return err
	}
	rows.Positions = pos
	if err := k.cache.Append(k.s, pt, kvBatch, rows); err != nil {
		return err
	}
	return k.s.Synchronize()
}

func (k *kvEnv) run(pt attention.PageTable) error {
	ops := attention.Operands{Q: view(k.q, kvBatch*k.rowBytes), O: view(k.o, kvBatch*k.rowBytes), Pages: pt}
	if err := k.attn.Run(k.s, k.cache, ops); err != nil {
		return err
	}
	return k.s.Synchronize()
}

// kvBounds: both calls accept the exact page table, and refuse (out of
// range, nothing enqueued) an Indptr or LastPageLen one entry short: a
// buffer that ends there, and a view that ends there inside a larger
// buffer.
func kvBounds(e *env) error {
	k, err := newKVEnv(e)
	if err != nil {
		return err
	}
	defer k.free()
	exact := attention.PageTable{Indptr: view(k.indptr, 4*(kvBatch+1)), Indices: view(k.idx, 4*kvBatch),
		LastPageLen: view(k.last, 4*kvBatch)}
	calls := []struct {
		name string
		call func(attention.PageTable) error
	}{{"AppendKV", k.appendKV}, {"RunAttention", k.run}}
	for _, c := range calls {
		if err := c.call(exact); err != nil {
			return fmt.Errorf("%s with the exact page table: %w", c.name, err)
		}
	}
	// short is a buffer of exactly the first n entries of vals.
	short := func(vals []int32, n int) (*core.Buffer, func(), error) {
		nb, err := e.dev.Alloc(4 * n)
		if err != nil {
			return nil, nil, err
		}
		return nb, func() { nb.Free() }, core.CopyFromHost(nb, le.Int32s(vals[:n]))
	}
	shortIndptr, free1, err := short([]int32{0, 1, 2, 3}, kvBatch)
	if err != nil {
		return err
	}
	defer free1()
	shortLast, free2, err := short([]int32{1, 5, 16}, kvBatch-1)
	if err != nil {
		return err
	}
	defer free2()
	// A view is bounded by the core (the plugin sees a buffer and an
	// offset), for both calls through one check in core/attention.
	cases := []struct {
		name string
		pt   attention.PageTable
	}{
		{"Indptr buffer of batch entries", attention.PageTable{Indptr: shortIndptr, Indices: exact.Indices, LastPageLen: exact.LastPageLen}},
		{"LastPageLen buffer of batch-1 entries", attention.PageTable{Indptr: exact.Indptr, Indices: exact.Indices, LastPageLen: shortLast}},
		{"Indptr view of batch entries", attention.PageTable{Indptr: view(k.indptr, 4*kvBatch), Indices: exact.Indices, LastPageLen: exact.LastPageLen}},
		{"LastPageLen view of batch-1 entries", attention.PageTable{Indptr: exact.Indptr, Indices: exact.Indices, LastPageLen: view(k.last, 4*(kvBatch-1))}},
	}
	for _, c := range calls {
		for _, tc := range cases {
			err := c.call(tc.pt)
			if !errors.Is(err, core.ErrOutOfRange) {
				return fmt.Errorf("%s with an %s: got %v, want an error matching ErrOutOfRange", c.name, tc.name, err)
			}
		}
	}
	return nil
}

// kvAppendBeyondIndices: an append whose device page table names index
// entries past the end of the Indices buffer (request 2's page is entry 2
// of a 2-entry buffer) skips those rows and writes the others; nothing
// else of the cache changes, and the device stays usable (a GPU kernel
// that read past the buffer would write a row into an arbitrary page, or
// fault).
func kvAppendBeyondIndices(e *env) error {
	k, err := newKVEnv(e)
	if err != nil {
		return err
	}
	defer k.free()
	two, err := e.dev.Alloc(8)
	if err != nil {
		return err
	}
	defer two.Free()
	if err := firstErr(core.CopyFromHost(two, le.Int32s([]int32{2, 0})), core.Memset(k.cache.K(), 0x11),
		core.Memset(k.cache.V(), 0x11), core.Memset(k.rows, 0x22)); err != nil {
		return err
	}
	pt := attention.PageTable{Indptr: view(k.indptr, 4*(kvBatch+1)), Indices: two, LastPageLen: view(k.last, 4*kvBatch)}
	if err := k.appendKV(pt); err != nil {
		return fmt.Errorf("AppendKV naming index entries beyond the Indices buffer: %w", err)
	}
	desc := k.cache.Desc()
	for _, region := range []struct {
		name string
		r    core.Region
	}{{"K", k.cache.K()}, {"V", k.cache.V()}} {
		got := make([]byte, region.r.Len())
		if err := core.CopyToHost(got, region.r); err != nil {
			return err
		}
		// Rows written: request 0 at token 0 (page 2, slot 0), request 1 at
		// token 4 (page 0, slot 4); NHD with one KV head: a token's row is
		// rowBytes at (page*PageSize + slot) * rowBytes.
		want := bytes.Repeat([]byte{0x11}, len(got))
		for _, at := range []int{2*desc.PageSize + 0, 0*desc.PageSize + 4} {
			copy(want[at*k.rowBytes:(at+1)*k.rowBytes], bytes.Repeat([]byte{0x22}, k.rowBytes))
		}
		if i := firstDiff(got, want); i >= 0 {
			return fmt.Errorf("%s cache byte %d (page %d) is %#x, want %#x: the skipped row (or another) was "+
				"written where it should not be, or a valid row is missing", region.name, i,
				i/(desc.PageSize*k.rowBytes), got[i], want[i])
		}
	}
	return k.s.Synchronize()
}
