// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
)

// TableConfig bounds a Table's steps.
type TableConfig struct {
	// MaxBatch is the most requests of a step.
	MaxBatch int
	// MaxPages is the most pages of a step, over all its requests.
	MaxPages int
	// MaxRows is the most new tokens (query rows, appended K/V rows) of a
	// step, over all its requests.
	MaxRows int
}

// Table builds each step's device page table: Begin, Add each request of
// the batch, then Upload. It writes the step's int32 arrays (FlashInfer's
// Indptr, Indices and LastPageLen, the query rows' QOIndptr, and each new
// row's batch index and position for attention.KVCache.Append) into one pinned
// staging buffer on the host and uploads them with a single copy, so a
// step costs one host→device copy whatever its batch. The arrays sit at
// fixed offsets (sized by the TableConfig, the page indices last), and
// the copy covers the start of the buffer through the step's last page
// index, rounded up to 4 KiB: the unused tails of the per-request and
// per-row arrays travel too, so size MaxBatch and MaxRows to the step's
// real bounds (the token budget), not far beyond.
//
// There are two staging buffers, used in turn: Begin waits for the
// upload made from the buffer it reuses (two steps back), long complete
// in a serving loop. The device copy is one buffer: each step's upload
// and its kernels go on one stream, which orders the next upload after
// them.
//
// Begin, Add and Upload allocate nothing (the regions handed out are
// made once). A Table is not safe for concurrent use.
type Table struct {
	cfg   TableConfig
	dev   *core.Buffer
	stage [2]*core.HostBuffer
	spans [2][]core.Pinned // spans[i][k]: the first (k+1)*spanGrain bytes of stage i
	ev    [2]*core.Event
	used  [2]bool
	cur   int

	// Word offsets of the arrays (16-byte aligned starts).
	oLast, oQO, oBidx, oPos, oIdx, words int

	// The regions of the device arrays, boxed once.
	pt               attention.PageTable
	qoR, bidxR, posR core.Region

	w []int32 // the current staging buffer as int32s

	batch, pages, rows int
	open               bool
}

// Step is an uploaded step: the device arrays (valid until the next
// Upload has run on the stream; each region may be longer than the step
// needs, which the ops allow) and the host counts the attention plan
// takes (in pinned memory, valid until the next Begin).
type Step struct {
	// Batch is the requests of the step, Pages their pages, Rows their
	// new tokens.
	Batch, Pages, Rows int
	// PageTable is the device page table.
	PageTable attention.PageTable
	// QOIndptr (batch+1) is the device query row offsets; BatchIndices
	// and Positions (Rows each) say where each new row goes.
	QOIndptr, BatchIndices, Positions core.Region
	// KVIndptr, KVLastPageLen and QORows are the host copies of
	// Indptr, LastPageLen and QOIndptr.
	KVIndptr, KVLastPageLen, QORows []int32
}

// Schedule is the step's host counts for attention.Attention.Plan: with the
// query row offsets for a prefill attention, without for decode.
func (st *Step) Schedule(prefill bool) attention.Schedule {
	s := attention.Schedule{KVIndptr: st.KVIndptr, KVLastPageLen: st.KVLastPageLen}
	if prefill {
		s.QOIndptr = st.QORows
	}
	return s
}

// KVRows are the step's new rows for attention.KVCache.Append, K and V holding
// Rows rows in the order the requests were added.
func (st *Step) KVRows(k, v core.Region) attention.KVRows {
	return attention.KVRows{K: k, V: v, BatchIndices: st.BatchIndices, Positions: st.Positions, NNZ: st.Rows}
}

const spanGrain = 4096

func alignW(n int) int { return (n + 3) &^ 3 } // words to a 16-byte multiple

var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// NewTable allocates a table's device buffer, pinned staging buffers and
// events on d. The caller must Close it.
func NewTable(d *core.Device, cfg TableConfig) (*Table, error) {
	if d == nil {
		return nil, errors.New("kvpage: table: nil device")
	}
	if cfg.MaxBatch <= 0 || cfg.MaxPages <= 0 || cfg.MaxRows <= 0 ||
		cfg.MaxBatch > math.MaxInt32-1 || cfg.MaxPages > math.MaxInt32 || cfg.MaxRows > math.MaxInt32 {
		return nil, fmt.Errorf("kvpage: table: max batch %d, pages %d and rows %d must be positive int32s",
			cfg.MaxBatch, cfg.MaxPages, cfg.MaxRows)
	}
	if !littleEndian {
		return nil, errors.New("kvpage: table: the staging layout needs a little-endian host")
	}
	if uint64(cfg.MaxPages)+3*uint64(cfg.MaxBatch)+2*uint64(cfg.MaxRows)+32 > math.MaxInt32/4 {
		return nil, fmt.Errorf("kvpage: table: max batch %d, pages %d and rows %d overflow the staging size",
			cfg.MaxBatch, cfg.MaxPages, cfg.MaxRows)
	}
	t := &Table{cfg: cfg}
	b := cfg.MaxBatch
	t.oLast = alignW(b + 1)
	t.oQO = t.oLast + alignW(b)
	t.oBidx = t.oQO + alignW(b+1)
	t.oPos = t.oBidx + alignW(cfg.MaxRows)
	t.oIdx = t.oPos + alignW(cfg.MaxRows)
	t.words = t.oIdx + cfg.MaxPages
	n := 4 * t.words
	var err error
	if t.dev, err = d.Alloc(n); err != nil {
		return nil, fmt.Errorf("kvpage: table: device buffer: %w", err)
	}
	t.pt = attention.PageTable{Indptr: t.view(0, b+1), Indices: t.view(t.oIdx, cfg.MaxPages), LastPageLen: t.view(t.oLast, b)}
	t.qoR, t.bidxR, t.posR = t.view(t.oQO, b+1), t.view(t.oBidx, cfg.MaxRows), t.view(t.oPos, cfg.MaxRows)
	for i := range t.stage {
		if t.stage[i], err = d.Runtime().AllocHost(n); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("kvpage: table: staging buffer: %w", err)
		}
		t.spans[i] = make([]core.Pinned, (n+spanGrain-1)/spanGrain)
		for k := range t.spans[i] {
			v, err := t.stage[i].View(0, min((k+1)*spanGrain, n))
			if err != nil {
				_ = t.Close()
				return nil, fmt.Errorf("kvpage: table: staging view: %w", err)
			}
			t.spans[i][k] = v
		}
		if t.ev[i], err = d.NewEvent(false); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("kvpage: table: event: %w", err)
		}
	}
	t.cur = 1
	return t, nil
}

// view is words [off, off+n) of the device buffer (in range by
// construction).
func (t *Table) view(off, n int) core.View {
	v, err := t.dev.View(4*off, 4*n)
	if err != nil {
		panic("kvpage: table: layout beyond the device buffer: " + err.Error())
	}
	return v
}

// Close waits for the uploads in flight and frees the table's memory.
func (t *Table) Close() error {
	if t == nil {
		return errors.New("kvpage: table: nil table")
	}
	var errs []error
	for i := range t.stage {
		if t.used[i] {
			errs = append(errs, t.ev[i].Synchronize())
			t.used[i] = false
		}
		if t.ev[i] != nil {
			errs = append(errs, t.ev[i].Close())
			t.ev[i] = nil
		}
		t.spans[i] = nil
		if t.stage[i] != nil {
			errs = append(errs, t.stage[i].Free())
			t.stage[i] = nil
		}
	}
	if t.dev != nil {
		errs = append(errs, t.dev.Free())
		t.dev = nil
	}
	t.w, t.open = nil, false
	return errors.Join(errs...)
}

// Begin starts a step on the next staging buffer, first waiting for the
// upload last made from it.
func (t *Table) Begin() error {
	if t.dev == nil {
		return errors.New("kvpage: table: begin after Close")
	}
	next := t.cur ^ 1
	if t.used[next] {
		if err := t.ev[next].Synchronize(); err != nil {
			return fmt.Errorf("kvpage: table: waiting for the upload two steps back: %w", err)
		}
		t.used[next] = false
	}
	t.cur = next
	b := t.stage[next].Bytes()
	if b == nil {
		return errors.New("kvpage: table: the staging buffer is gone (runtime closed)")
	}
	t.w = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
	t.batch, t.pages, t.rows = 0, 0, 0
	t.w[0], t.w[t.oQO] = 0, 0
	t.open = true
	return nil
}

// Add appends request id of a to the step, with its last newRows tokens
// (already Appended to a) as the step's new rows: 1 for decode, the
// chunk for prefill, 0 for a request that only attends. It returns the
// request's index in the batch.
func (t *Table) Add(a *Allocator, id ReqID, newRows int) (int, error) {
	if !t.open {
		return 0, errors.New("kvpage: table: add outside a step (Begin first)")
	}
	r, err := a.get(id)
	if err != nil {
		return 0, err
	}
	if r.tokens == 0 {
		return 0, fmt.Errorf("kvpage: table: %v has no tokens; a step's request needs at least one", id)
	}
	if newRows < 0 || newRows > r.tokens {
		return 0, fmt.Errorf("kvpage: table: %v: %d new rows of its %d tokens", id, newRows, r.tokens)
	}
	np := len(r.pages)
	if t.batch == t.cfg.MaxBatch || t.pages+np > t.cfg.MaxPages || t.rows+newRows > t.cfg.MaxRows {
		return 0, fmt.Errorf("kvpage: table: %v (%d pages, %d rows) does not fit the step: %d of %d requests, %d of %d pages, %d of %d rows taken",
			id, np, newRows, t.batch, t.cfg.MaxBatch, t.pages, t.cfg.MaxPages, t.rows, t.cfg.MaxRows)
	}
	w, b := t.w, t.batch
	copy(w[t.oIdx+t.pages:], r.pages)
	t.pages += np
	w[b+1] = int32(t.pages)
	w[t.oLast+b] = int32(r.tokens - (np-1)*a.ps)
	base := r.tokens - newRows
	bidx, pos := w[t.oBidx+t.rows:t.oBidx+t.rows+newRows], w[t.oPos+t.rows:t.oPos+t.rows+newRows]
	for i := range bidx {
		bidx[i] = int32(b)
		pos[i] = int32(base + i)
	}
	t.rows += newRows
	w[t.oQO+b+1] = int32(t.rows)
	t.batch++
	return b, nil
}

// Upload enqueues the step's one copy to the device on s (the stream of
// the step's kernels) and returns the step.
func (t *Table) Upload(s *core.Stream) (Step, error) {
	if !t.open {
		return Step{}, errors.New("kvpage: table: upload outside a step (Begin first)")
	}
	if t.batch == 0 {
		return Step{}, errors.New("kvpage: table: upload of an empty step (Add a request first)")
	}
	n := 4 * (t.oIdx + t.pages)
	if err := s.CopyFromPinned(t.dev, t.spans[t.cur][(n-1)/spanGrain]); err != nil {
		return Step{}, fmt.Errorf("kvpage: table: upload: %w", err)
	}
	if err := t.ev[t.cur].Record(s); err != nil {
		return Step{}, fmt.Errorf("kvpage: table: upload: %w", err)
	}
	t.used[t.cur] = true
	t.open = false
	b, w := t.batch, t.w
	return Step{Batch: b, Pages: t.pages, Rows: t.rows, PageTable: t.pt, QOIndptr: t.qoR, BatchIndices: t.bidxR, Positions: t.posR,
		KVIndptr: w[:b+1], KVLastPageLen: w[t.oLast : t.oLast+b], QORows: w[t.oQO : t.oQO+b+1]}, nil
}

// UploadBytes is the size of the copy Upload makes for a step of the
// given pages.
func (t *Table) UploadBytes(pages int) int {
	n := 4 * (t.oIdx + pages)
	return min((n+spanGrain-1)/spanGrain*spanGrain, 4*t.words)
}

// CopyPage enqueues the copy-on-write Append asked for: K and V of page
// cp.Src to page cp.Dst of cache c, on s (before the step's AppendKV).
func CopyPage(s *core.Stream, c *attention.KVCache, cp Copy) error {
	d := c.Desc()
	if cp.Src < 0 || cp.Dst < 0 || int(cp.Src) >= d.NumPages || int(cp.Dst) >= d.NumPages || cp.Src == cp.Dst {
		return fmt.Errorf("kvpage: copy page: pages %d -> %d of a cache of %d", cp.Src, cp.Dst, d.NumPages)
	}
	pb := d.PageBytes()
	for _, r := range [2]core.Region{c.K(), c.V()} {
		src, err := sub(r, int(cp.Src)*pb, pb)
		if err != nil {
			return fmt.Errorf("kvpage: copy page %d: %w", cp.Src, err)
		}
		dst, err := sub(r, int(cp.Dst)*pb, pb)
		if err != nil {
			return fmt.Errorf("kvpage: copy page %d: %w", cp.Dst, err)
		}
		if err := s.CopyDevice(dst, src); err != nil {
			return fmt.Errorf("kvpage: copy page %d -> %d: %w", cp.Src, cp.Dst, err)
		}
	}
	return nil
}

func sub(r core.Region, off, n int) (core.View, error) {
	switch v := r.(type) {
	case *core.Buffer:
		return v.View(off, n)
	case core.View:
		return v.Sub(off, n)
	}
	return core.View{}, errors.New("nil region")
}
