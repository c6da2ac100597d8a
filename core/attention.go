// SPDX-License-Identifier: Apache-2.0

package core

import (
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/bind"
)

// Attention over a paged KV cache (ABI 1.5), as FlashInfer lays it out:
// a KVCache holds the pages, a PageTable says which pages each request
// of a batch owns, Stream.AppendKV writes new K/V rows into them, and an
// Attention (made once per shape) is planned once per step
// (Stream.PlanAttention, from host copies of the page table's counts) and
// run once per layer (Stream.RunAttention). abi/gpurt.h states the exact
// semantics; the mock plugin is the float64 reference.

// KVLayout is the order of one page's axes (GPURT_KV_LAYOUT_*).
type KVLayout int32

// KV cache layouts.
const (
	KVLayoutNHD KVLayout = abi.KVLayoutNHD // [page_size][num_kv_heads][head_dim]
	KVLayoutHND KVLayout = abi.KVLayoutHND // [num_kv_heads][page_size][head_dim]
)

// KVCacheDesc is the shape of a paged KV cache: NumPages pages of
// PageSize tokens of NumKVHeads heads of HeadDim elements of DType (F16 or
// BF16; head dims 64, 128, 256), for K and for V alike.
type KVCacheDesc struct {
	DType      DType
	Layout     KVLayout
	PageSize   int
	NumKVHeads int
	HeadDim    int
	NumPages   int
}

// PageBytes is the size of one page of K (or of V) in bytes.
func (d KVCacheDesc) PageBytes() int { return d.PageSize * d.NumKVHeads * d.HeadDim * d.DType.Size() }

// Offset is the byte offset of token slot of head in page, in a K or V
// region of this layout (to fill or read a cache from the host).
func (d KVCacheDesc) Offset(page, slot, head int) int {
	es := d.DType.Size()
	if d.Layout == KVLayoutHND {
		return page*d.PageBytes() + (head*d.PageSize+slot)*d.HeadDim*es
	}
	return page*d.PageBytes() + (slot*d.NumKVHeads+head)*d.HeadDim*es
}

func (d *KVCacheDesc) abiLayout() abi.KVLayout {
	return abi.KVLayout{DType: int32(d.DType), Layout: int32(d.Layout), PageSize: uint32(d.PageSize),
		NumKVHeads: uint32(d.NumKVHeads), HeadDim: uint32(d.HeadDim)}
}

// check validates what the core checks itself (the plugin checks the
// rest, and says which dtypes and head dims it supports).
func (d *KVCacheDesc) check(op string, pages bool) error {
	if d.DType.Size() == 0 {
		return errf(CodeInvalidArgument, op, "dtype %v is not an element type", d.DType)
	}
	if d.Layout != KVLayoutNHD && d.Layout != KVLayoutHND {
		return errf(CodeInvalidArgument, op, "layout %d is neither KVLayoutNHD nor KVLayoutHND", d.Layout)
	}
	if d.PageSize <= 0 || d.NumKVHeads <= 0 || d.HeadDim <= 0 || d.PageSize > math.MaxInt32 ||
		d.NumKVHeads > math.MaxInt32 || d.HeadDim > math.MaxInt32 {
		return errf(CodeInvalidArgument, op, "page size %d, kv heads %d and head dim %d must be positive int32s",
			d.PageSize, d.NumKVHeads, d.HeadDim)
	}
	if pages && d.NumPages <= 0 {
		return errf(CodeInvalidArgument, op, "num pages %d must be positive", d.NumPages)
	}
	// Byte counts must fit an int: a product that wraps would make a
	// cache whose regions are smaller than its shape says.
	hi, page := bits.Mul64(uint64(d.PageSize)*uint64(d.NumKVHeads), uint64(d.HeadDim)*uint64(d.DType.Size()))
	if hi != 0 || page > math.MaxInt {
		return errf(CodeOutOfRange, op, "page of %d tokens x %d kv heads x %d x %d-byte elements overflows the byte count",
			d.PageSize, d.NumKVHeads, d.HeadDim, d.DType.Size())
	}
	if pages {
		if hi, total := bits.Mul64(uint64(d.NumPages), page); hi != 0 || total > math.MaxInt {
			return errf(CodeOutOfRange, op, "%d pages of %d bytes overflow the byte count", d.NumPages, page)
		}
	}
	return nil
}

// KVCache is a paged KV cache: a shape and the device regions holding K
// and V (each NumPages * PageBytes bytes). It does not own the memory
// unless it came from Device.AllocKVCache (then Free frees it). A KVCache
// is a plain value: safe for concurrent use.
type KVCache struct {
	desc  KVCacheDesc
	k, v  Region
	owned [2]*Buffer
}

// NewKVCache describes a cache in existing device memory. The regions
// must each hold desc.NumPages pages, and the pages of K and of V must
// not overlap (AppendKV would write V over K).
func NewKVCache(desc KVCacheDesc, k, v Region) (*KVCache, error) {
	const op = "kv_cache"
	if err := desc.check(op, true); err != nil {
		return nil, err
	}
	need := uint64(desc.NumPages) * uint64(desc.PageBytes())
	var bufs [2]*Buffer
	var offs [2]uint64
	for i, r := range [2]Region{k, v} {
		b, off, n, err := resolve(op, r)
		if err != nil {
			return nil, err
		}
		bufs[i], offs[i] = b, off
		if n < need {
			return nil, errf(CodeOutOfRange, op, "%s region has %d bytes; %d pages of %d bytes need %d",
				[2]string{"K", "V"}[i], n, desc.NumPages, desc.PageBytes(), need)
		}
		if i == 1 && b.dev != mustDev(k) {
			return nil, errf(CodeInvalidArgument, op, "K and V are on different devices (%v, %v)", mustDev(k), b.dev)
		}
	}
	if bufs[0] == bufs[1] && offs[0] < offs[1]+need && offs[1] < offs[0]+need {
		return nil, errf(CodeInvalidArgument, op, "K pages [%d, %d) and V pages [%d, %d) overlap in one buffer",
			offs[0], offs[0]+need, offs[1], offs[1]+need)
	}
	return &KVCache{desc: desc, k: k, v: v}, nil
}

func mustDev(r Region) *Device {
	b, _, _, _ := resolve("", r)
	return b.dev
}

// AllocKVCache allocates a cache of desc's shape on the device (two
// buffers, uninitialised); Free releases them.
func (d *Device) AllocKVCache(desc KVCacheDesc) (*KVCache, error) {
	if err := desc.check("kv_cache", true); err != nil {
		return nil, err
	}
	size := desc.NumPages * desc.PageBytes()
	k, err := d.Alloc(size)
	if err != nil {
		return nil, err
	}
	v, err := d.Alloc(size)
	if err != nil {
		_ = k.Free()
		return nil, err
	}
	return &KVCache{desc: desc, k: k, v: v, owned: [2]*Buffer{k, v}}, nil
}

// Desc is the cache's shape (zero for a nil cache).
func (c *KVCache) Desc() KVCacheDesc {
	if c == nil {
		return KVCacheDesc{}
	}
	return c.desc
}

// K is the region of the K pages (nil for a nil cache).
func (c *KVCache) K() Region {
	if c == nil {
		return nil
	}
	return c.k
}

// V is the region of the V pages (nil for a nil cache).
func (c *KVCache) V() Region {
	if c == nil {
		return nil
	}
	return c.v
}

// Free frees the buffers of a cache from AllocKVCache; for a cache from
// NewKVCache it does nothing (the caller owns the memory).
func (c *KVCache) Free() error {
	if c == nil {
		return errInvalid("kv_cache_free", "KV cache")
	}
	var first error
	for _, b := range c.owned {
		if b != nil {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// PageTable is a batch's page table in device memory, int32 arrays as
// FlashInfer uses them: request b owns pages Indices[Indptr[b]:Indptr[b+1]]
// (at least one), and its last page holds LastPageLen[b] tokens (1 ..
// PageSize). Indptr has batch+1 entries, LastPageLen batch.
type PageTable struct {
	Indptr, Indices, LastPageLen Region
}

// KVRows are new rows to append: K and V are [NNZ][NumKVHeads][HeadDim]
// of the cache's dtype; row i goes to request BatchIndices[i] at token
// Positions[i] (int32 arrays of NNZ entries in device memory).
type KVRows struct {
	K, V                    Region
	BatchIndices, Positions Region
	NNZ                     int
}

// AttentionKind says whether an Attention decodes (one query row per
// request) or prefills (ragged query rows, QOIndptr).
type AttentionKind int32

// Attention kinds.
const (
	AttentionDecode  AttentionKind = abi.AttentionDecode
	AttentionPrefill AttentionKind = abi.AttentionPrefill
)

// AttentionDesc is what stays fixed across steps. Cache.NumPages is not
// used. SMScale 0 means 1/sqrt(HeadDim); LogitsSoftCap 0 means none (else
// scores are cap*tanh(s/cap)). Causal applies to prefill: query row i of
// a request with qo rows and kv tokens sees tokens 0 .. kv-qo+i. MaxBatch
// bounds the batch of a plan; MaxRows the query rows of a prefill plan.
type AttentionDesc struct {
	Kind          AttentionKind
	NumQOHeads    int
	Cache         KVCacheDesc
	Causal        bool
	SMScale       float64
	LogitsSoftCap float64
	MaxBatch      int
	MaxRows       int
}

// Attention is a planned attention of one shape, owning the plugin's
// workspace for it (FlashInfer's plan buffers on CUDA). Plan it once per
// step with Stream.PlanAttention and run it with Stream.RunAttention on
// the same stream. Safe for concurrent use; Close racing with a use makes
// the use fail with ErrClosed.
type Attention struct {
	dev  *Device
	h    abi.Attention
	l    *life
	desc AttentionDesc
	// mu orders plans against runs: PlanAttention holds it for writing
	// across the plugin's plan and the update of plan, a run for reading
	// across its extent check and its enqueue (or recording), so that the
	// check and the plugin see the same plan.
	mu sync.RWMutex
	// plan is the last successful plan (zero before the first).
	plan attentionPlan
}

// attentionPlan is what a run's extents are checked against.
type attentionPlan struct {
	batch, pages, rows uint64
}

// attentionSlots is nil when the plugin has the 1.5 slots, else the
// error naming the first it lacks.
func (rt *Runtime) attentionSlots(op string) error {
	for _, slot := range [...]bind.Slot{bind.SlotKVAppend, bind.SlotAttentionCreate, bind.SlotAttentionDestroy,
		bind.SlotAttentionPlan, bind.SlotAttentionRun} {
		if !rt.p.Has(slot) {
			return rt.p.Unsupported(op, slot)
		}
	}
	return nil
}

// NewAttention validates desc and makes the plugin's attention object.
// A plugin without attention (ABI < 1.5) gives ErrUnsupported naming the
// versions; a combination it cannot run gives ErrUnsupported naming the
// field. The caller must Close it.
func (d *Device) NewAttention(desc AttentionDesc) (*Attention, error) {
	const op = "attention_create"
	if err := d.enter(op); err != nil {
		return nil, err
	}
	rt := d.rt
	defer rt.exit()
	if err := rt.attentionSlots(op); err != nil {
		return nil, err
	}
	if err := desc.Cache.check(op, false); err != nil {
		return nil, err
	}
	if desc.Kind != AttentionDecode && desc.Kind != AttentionPrefill {
		return nil, errf(CodeInvalidArgument, op, "kind %d is neither AttentionDecode nor AttentionPrefill", desc.Kind)
	}
	if desc.NumQOHeads <= 0 || desc.NumQOHeads%desc.Cache.NumKVHeads != 0 || desc.NumQOHeads > math.MaxInt32 {
		return nil, errf(CodeInvalidArgument, op, "query heads %d must be a positive multiple of the %d kv heads",
			desc.NumQOHeads, desc.Cache.NumKVHeads)
	}
	if desc.MaxBatch <= 0 || desc.MaxBatch > math.MaxInt32 || desc.MaxRows < 0 {
		return nil, errf(CodeInvalidArgument, op, "max batch %d must be a positive int32, max rows %d not negative",
			desc.MaxBatch, desc.MaxRows)
	}
	if desc.Kind == AttentionPrefill && desc.MaxRows == 0 {
		return nil, errf(CodeInvalidArgument, op, "prefill needs MaxRows (the most query rows of a plan)")
	}
	ad := abi.AttentionDesc{StructSize: abi.SizeofAttentionDesc, Kind: int32(desc.Kind), NumQOHeads: uint32(desc.NumQOHeads),
		Layout: desc.Cache.abiLayout(), SMScale: desc.SMScale, LogitsSoftCap: desc.LogitsSoftCap,
		MaxBatchSize: uint32(desc.MaxBatch), MaxRows: uint64(desc.MaxRows)}
	if desc.Causal {
		ad.Causal = 1
	}
	var h abi.Attention
	if err := rt.p.AttentionCreate(op, rt.h, d.index, &ad, &h); err != nil {
		return nil, err
	}
	a := &Attention{dev: d, h: h, l: new(life), desc: desc}
	watchLeak(a, rt, a.l, "attention", 0)
	return a, nil
}

// Desc is the descriptor the attention was made with (zero for a nil
// attention).
func (a *Attention) Desc() AttentionDesc {
	if a == nil {
		return AttentionDesc{}
	}
	return a.desc
}

func (a *Attention) ok() bool { return a != nil && a.l != nil && a.dev.ok() }

// Close waits for the attention's work in flight, then frees it and its
// workspace. A second Close, or any later use, is an error wrapping
// ErrClosed.
func (a *Attention) Close() error {
	const op = "attention_destroy"
	if !a.ok() {
		return errInvalid(op, "attention")
	}
	rt := a.dev.rt
	return destroy(rt, a.l, op, "attention", errClosed, func() error { return rt.p.AttentionDestroy(op, rt.h, a.h) })
}

// AttentionSchedule is one step's page table counts on the host (the
// same values as the device PageTable of the runs): KVIndptr (batch+1
// entries, pages), KVLastPageLen (batch), and for prefill QOIndptr
// (batch+1, query rows; nil for decode).
type AttentionSchedule struct {
	QOIndptr, KVIndptr, KVLastPageLen []int32
}

// PlanAttention plans a's next runs for one step on s: the plugin checks
// the counts and schedules the work (FlashInfer's plan on CUDA, its
// upload enqueued on s). Runs of the plan go on s. A warm call allocates
// nothing.
func (s *Stream) PlanAttention(a *Attention, sched AttentionSchedule) (err error) {
	const op = "attention_plan"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	defer s.exit()
	if err := a.use(op, s); err != nil {
		return err
	}
	defer a.l.release()
	n := len(sched.KVLastPageLen)
	if n == 0 || len(sched.KVIndptr) != n+1 {
		return errf(CodeInvalidArgument, op, "KVIndptr has %d entries and KVLastPageLen %d (batch+1 and batch, batch >= 1)",
			len(sched.KVIndptr), n)
	}
	prefill := a.desc.Kind == AttentionPrefill
	if prefill != (sched.QOIndptr != nil) || (prefill && len(sched.QOIndptr) != n+1) {
		return errf(CodeInvalidArgument, op, "QOIndptr has %d entries: prefill needs batch+1 (%d), decode none",
			len(sched.QOIndptr), n+1)
	}
	if n > a.desc.MaxBatch {
		return errf(CodeInvalidArgument, op, "batch %d exceeds the attention's max batch %d", n, a.desc.MaxBatch)
	}
	pa := abi.AttentionPlanArgs{StructSize: abi.SizeofAttentionPlanArgs, BatchSize: uint32(n),
		KVIndptr: &sched.KVIndptr[0], KVLastPageLen: &sched.KVLastPageLen[0]}
	if prefill {
		pa.QOIndptr = &sched.QOIndptr[0]
	}
	// The plugin's plan and the Go copy change together: a run between
	// them would check against one plan and execute the other.
	a.mu.Lock()
	defer a.mu.Unlock()
	c := submission{slot: bind.SlotAttentionPlan, obj: uintptr(a.h), args: unsafe.Pointer(&pa), size: unsafe.Sizeof(pa)}
	err = s.submit(op, &c)
	if err == nil {
		rows := uint64(n)
		if prefill {
			rows = uint64(uint32(sched.QOIndptr[n]))
		}
		a.plan = attentionPlan{batch: uint64(n), pages: uint64(uint32(sched.KVIndptr[n])), rows: rows}
	}
	return err
}

// AttentionOperands are a run's memory: Q and O are
// [rows][NumQOHeads][HeadDim] of the cache's dtype (rows: the batch for
// decode, QOIndptr[batch] for prefill), Pages the step's page table, and
// QOIndptr the device copy of the schedule's QOIndptr (prefill only).
type AttentionOperands struct {
	Q, O     Region
	Pages    PageTable
	QOIndptr Region
}

// RunAttention enqueues one run of a's current plan on s (the plan's
// stream), reading the cache c. Each region must be on s's device; the
// plugin checks the extents against the plan. A warm call allocates
// nothing.
func (s *Stream) RunAttention(a *Attention, c *KVCache, ops AttentionOperands) (err error) {
	const op = "attention_run"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	var rs regionSet
	rs.s = s
	defer rs.finish()
	if err := a.use(op, s); err != nil {
		return err
	}
	defer a.l.release()
	if err := c.compatible(op, &a.desc.Cache); err != nil {
		return err
	}
	prefill := a.desc.Kind == AttentionPrefill
	regions := [8]Region{ops.Q, ops.O, c.k, c.v, ops.Pages.Indptr, ops.Pages.Indices, ops.Pages.LastPageLen, ops.QOIndptr}
	for i := range regions {
		if i == 7 && !prefill {
			if regions[i] != nil {
				return errf(CodeInvalidArgument, op, "QOIndptr is set for decode")
			}
			continue
		}
		if err := rs.add(op, i, attentionOperandNames[i], regions[i]); err != nil {
			return err
		}
	}
	ra := abi.AttentionRunArgs{StructSize: abi.SizeofAttentionRunArgs}
	ra.Q, ra.QOffset = rs.handle(0)
	ra.O, ra.OOffset = rs.handle(1)
	rs.pages(&ra.Pages, c)
	ra.QOIndptr, ra.QOIndptrOffset = rs.handle(7)
	// The extent check and the plugin's run see the same plan: a
	// PlanAttention waits until the run is enqueued.
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := a.fits(&rs); err != nil {
		return err
	}
	sub := submission{slot: bind.SlotAttentionRun, obj: uintptr(a.h), args: unsafe.Pointer(&ra), size: unsafe.Sizeof(ra),
		opr: rs.opr[:], lives: [2]*life{a.l}, timed: true, metric: opAttentionRun}
	return s.submit(op, &sub)
}

var attentionOperandNames = [8]string{"Q", "O", "K", "V", "Indptr", "Indices", "LastPageLen", "QOIndptr"}

// AppendKV enqueues an append of rows into the cache on s, for a page
// table of batch requests that already counts the new tokens (FlashInfer's
// append_paged_kv_cache). NNZ 0 is a no-op.
func (s *Stream) AppendKV(c *KVCache, pt PageTable, batch int, rows KVRows) (err error) {
	const op = "kv_append"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	var rs regionSet
	rs.s = s
	defer rs.finish()
	rt := s.dev.rt
	if err := rt.attentionSlots(op); err != nil {
		return err
	}
	if c == nil {
		return errf(CodeInvalidArgument, op, "nil KV cache")
	}
	if batch <= 0 || batch > math.MaxInt32 || rows.NNZ < 0 {
		return errf(CodeInvalidArgument, op, "batch %d must be a positive int32 and NNZ %d not negative", batch, rows.NNZ)
	}
	if rows.NNZ == 0 {
		return nil
	}
	regions := [8]Region{rows.K, rows.V, c.k, c.v, pt.Indptr, pt.Indices, pt.LastPageLen, rows.BatchIndices}
	names := [8]string{"K rows", "V rows", "K", "V", "Indptr", "Indices", "LastPageLen", "BatchIndices"}
	for i := range regions {
		if err := rs.add(op, i, names[i], regions[i]); err != nil {
			return err
		}
	}
	if err := rs.add(op, 8, "Positions", rows.Positions); err != nil {
		return err
	}
	es := uint64(c.desc.DType.Size())
	need := uint64(rows.NNZ) * uint64(c.desc.NumKVHeads) * uint64(c.desc.HeadDim) * es
	for i := 0; i < 2; i++ {
		if rs.opr[i].n < need {
			return errf(CodeOutOfRange, op, "%s region has %d bytes; %d rows need %d", names[i], rs.opr[i].n, rows.NNZ, need)
		}
	}
	for i := 7; i < 9; i++ {
		if rs.opr[i].n < 4*uint64(rows.NNZ) {
			return errf(CodeOutOfRange, op, "%s region has %d bytes; %d int32 need %d", [2]string{"BatchIndices", "Positions"}[i-7],
				rs.opr[i].n, rows.NNZ, 4*rows.NNZ)
		}
	}
	aa := abi.KVAppendArgs{StructSize: abi.SizeofKVAppendArgs, Layout: c.desc.abiLayout(), BatchSize: uint32(batch), NNZ: uint64(rows.NNZ)}
	rs.pages(&aa.Pages, c)
	aa.KRows, aa.KRowsOffset = rs.handle(0)
	aa.VRows, aa.VRowsOffset = rs.handle(1)
	aa.BatchIndices, aa.BatchIndicesOffset = rs.handle(7)
	aa.Positions, aa.PositionsOffset = rs.handle(8)
	sub := submission{slot: bind.SlotKVAppend, args: unsafe.Pointer(&aa), size: unsafe.Sizeof(aa), opr: rs.opr[:]}
	return s.submit(op, &sub)
}

// use begins a use of the attention alone (the stream's use holds the
// runtime) and checks that it belongs to s's device; release with
// a.l.release().
func (a *Attention) use(op string, s *Stream) error {
	if !a.ok() {
		return errInvalid(op, "attention")
	}
	if a.dev != s.dev {
		return errf(CodeInvalidArgument, op, "the attention is on %v, the stream on %v", a.dev, s.dev)
	}
	if !a.l.acquire() {
		return errClosed(op, "attention")
	}
	return nil
}

// fits checks the run's regions against the last plan (the plugin
// checks them too, but sees only offsets, not a View's length); a.mu is
// held.
func (a *Attention) fits(rs *regionSet) error {
	const op = "attention_run"
	p := a.plan
	if p.batch == 0 {
		return nil // no plan yet: the plugin says so
	}
	batch, pages, rows := p.batch, p.pages, p.rows
	rowBytes := uint64(a.desc.NumQOHeads) * uint64(a.desc.Cache.HeadDim) * uint64(a.desc.Cache.DType.Size())
	need := [8]uint64{rows * rowBytes, rows * rowBytes, 0, 0, 4 * (batch + 1), 4 * pages, 4 * batch, 4 * (batch + 1)}
	for i, n := range need {
		if rs.opr[i].b != nil && rs.opr[i].n < n {
			return errf(CodeOutOfRange, op, "operand %s has %d bytes; the plan (batch %d, %d rows, %d pages) needs %d",
				attentionOperandNames[i], rs.opr[i].n, batch, rows, pages, n)
		}
	}
	return nil
}

// compatible checks that the cache has the attention's layout.
func (c *KVCache) compatible(op string, want *KVCacheDesc) error {
	if c == nil {
		return errf(CodeInvalidArgument, op, "nil KV cache")
	}
	d := &c.desc
	if d.DType != want.DType || d.Layout != want.Layout || d.PageSize != want.PageSize ||
		d.NumKVHeads != want.NumKVHeads || d.HeadDim != want.HeadDim {
		return errf(CodeInvalidArgument, op, "the cache (%v, layout %d, page %d, %d kv heads, head dim %d) is not the attention's (%v, layout %d, page %d, %d kv heads, head dim %d)",
			d.DType, d.Layout, d.PageSize, d.NumKVHeads, d.HeadDim, want.DType, want.Layout, want.PageSize, want.NumKVHeads, want.HeadDim)
	}
	return nil
}

// regionSet resolves a call's regions and holds one use of each distinct
// buffer (as gemmCall does) until finish.
type regionSet struct {
	s    *Stream
	opr  [9]gemmOperand
	held uint16
}

func (r *regionSet) add(op string, i int, name string, reg Region) error {
	b, off, n, err := resolve(op, reg)
	if err != nil {
		return within(op, "operand "+name+": ", err)
	}
	if b.dev != r.s.dev {
		return errf(CodeInvalidArgument, op, "operand %s is on %v of another runtime or device than the stream (%v)", name, b.dev, r.s.dev)
	}
	held := false
	for m := r.held; m != 0; m &= m - 1 {
		if r.opr[bits.TrailingZeros16(m)].b == b {
			held = true
			break
		}
	}
	if !held {
		if !b.l.acquire() {
			return errFreed(op, "operand "+name+": buffer")
		}
		r.held |= 1 << i
	}
	r.opr[i] = gemmOperand{b, off, n}
	return nil
}

func (r *regionSet) handle(i int) (abi.Buffer, uint64) { return r.opr[i].handle() }

// pages fills the ABI page table from operands 2..6 (K, V, Indptr,
// Indices, LastPageLen) and the cache's page count.
func (r *regionSet) pages(p *abi.KVPages, c *KVCache) {
	p.K, p.KOffset = r.handle(2)
	p.V, p.VOffset = r.handle(3)
	p.NumPages = uint64(c.desc.NumPages)
	p.Indptr, p.IndptrOffset = r.handle(4)
	p.Indices, p.IndicesOffset = r.handle(5)
	p.LastPageLen, p.LastPageLenOffset = r.handle(6)
}

func (r *regionSet) finish() {
	for m := r.held; m != 0; m &= m - 1 {
		r.opr[bits.TrailingZeros16(m)].b.l.release()
	}
	r.s.exit()
}
