// SPDX-License-Identifier: Apache-2.0

// Package attention is gpurt's attention over a paged KV cache (ABI 1.5),
// as FlashInfer lays it out: a KVCache holds the pages, a PageTable says
// which pages each request of a batch owns, KVCache.Append writes new K/V
// rows into them, and an Attention (made once per shape with New) is
// planned once per step (Attention.Plan, from host copies of the page
// table's counts) and run once per layer (Attention.Run). abi/gpurt.h
// states the exact semantics; the mock plugin is the float64 reference.
//
// Every operation enqueues on a core.Stream and goes through core's
// call-or-record funnel: inside core.Stream.Capture, on a plugin of ABI
// 1.7, Run and Append are recorded into the graph (a decode step in one
// graph: plan between replays, into the same fixed buffers; a replayed Run
// uses the plan current when it executes), Plan is refused with
// core.ErrFailedPrecondition. Errors are *core.Error values, matched with
// errors.Is against core's sentinels. A warm Plan, Run or Append
// allocates nothing.
package attention

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/internal/abi"
)

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
//
// An fp8 cache (ABI 1.8): DType core.FP8E4M3 stores one byte per element;
// QODType (F16 or BF16) is then the type of the queries, outputs and
// appended rows, and KScale and VScale the cache's scales (one each per
// cache, that is per layer): Append stores e4m3(row / scale) (nearest
// even, saturated to +-448) and attention reads element * scale. Zero
// scales mean 1. A 16-bit cache leaves QODType, KScale and VScale zero.
type KVCacheDesc struct {
	DType      core.DType
	Layout     KVLayout
	PageSize   int
	NumKVHeads int
	HeadDim    int
	NumPages   int
	QODType    core.DType // fp8 caches: the queries', outputs' and rows' type
	KScale     float32    // fp8 caches: K's scale (0: 1)
	VScale     float32    // fp8 caches: V's scale (0: 1)
}

// RowType is the type of the queries, outputs and appended rows: QODType
// for an fp8 cache, else DType.
func (d KVCacheDesc) RowType() core.DType {
	if d.DType == core.FP8E4M3 {
		return d.QODType
	}
	return d.DType
}

// scales are the scales the plugin is passed (1 for a zero).
func (d *KVCacheDesc) scales() (k, v float32) {
	k, v = d.KScale, d.VScale
	if k == 0 {
		k = 1
	}
	if v == 0 {
		v = 1
	}
	return k, v
}

// PageBytes is the size of one page of K (or of V) in bytes.
func (d KVCacheDesc) PageBytes() int { return d.PageSize * d.NumKVHeads * d.HeadDim * d.DType.Size() }

// Offset is the byte offset of token slot of head in page, in a K or V
// region of this layout (to fill or read a cache from the host). The
// slot must be below PageSize, the head below NumKVHeads and the page
// below NumPages (not negative and not bounded above when NumPages is 0,
// as in an Attention's Desc.Cache): an index out of its range would name
// another page's, slot's or head's bytes, so it is an error wrapping
// core.ErrOutOfRange naming the index, as is an invalid descriptor
// (ErrInvalidArgument) or an offset past the largest int.
func (d KVCacheDesc) Offset(page, slot, head int) (int, error) {
	const op = "kv_offset"
	if err := d.check(op, false); err != nil {
		return 0, err
	}
	switch {
	case page < 0 || (d.NumPages > 0 && page >= d.NumPages):
		return 0, errorf(core.ErrOutOfRange, op, "page %d is outside the cache's %d pages", page, d.NumPages)
	case slot < 0 || slot >= d.PageSize:
		return 0, errorf(core.ErrOutOfRange, op, "slot %d is outside a page of %d tokens", slot, d.PageSize)
	case head < 0 || head >= d.NumKVHeads:
		return 0, errorf(core.ErrOutOfRange, op, "head %d is outside the %d kv heads", head, d.NumKVHeads)
	}
	pb := uint64(d.PageBytes()) // fits an int: check
	if hi, lo := bits.Mul64(uint64(page), pb); hi != 0 || lo > math.MaxInt-pb {
		return 0, errorf(core.ErrOutOfRange, op, "page %d of %d bytes is past the largest offset", page, pb)
	}
	es := d.DType.Size()
	if d.Layout == KVLayoutHND {
		return page*int(pb) + (head*d.PageSize+slot)*d.HeadDim*es, nil
	}
	return page*int(pb) + (slot*d.NumKVHeads+head)*d.HeadDim*es, nil
}

func (d *KVCacheDesc) abiLayout() abi.KVLayout {
	return abi.KVLayout{DType: int32(d.DType), Layout: int32(d.Layout), PageSize: uint32(d.PageSize),
		NumKVHeads: uint32(d.NumKVHeads), HeadDim: uint32(d.HeadDim), QODType: int32(d.QODType)}
}

// check validates what the core checks itself (the plugin checks the
// rest, and says which dtypes and head dims it supports).
func (d *KVCacheDesc) check(op string, pages bool) error {
	if d.DType.Size() == 0 {
		return errorf(core.ErrInvalidArgument, op, "dtype %v is not an element type", d.DType)
	}
	if d.Layout != KVLayoutNHD && d.Layout != KVLayoutHND {
		return errorf(core.ErrInvalidArgument, op, "layout %d is neither KVLayoutNHD nor KVLayoutHND", d.Layout)
	}
	for _, sc := range [2]struct {
		name string
		v    float32
	}{{"KScale", d.KScale}, {"VScale", d.VScale}} {
		if !(sc.v >= 0 && sc.v <= math.MaxFloat32) {
			return errorf(core.ErrInvalidArgument, op, "%s %g must be finite and >= 0 (0 is 1)", sc.name, sc.v)
		}
	}
	if d.DType != core.FP8E4M3 && (d.QODType != 0 || d.KScale != 0 || d.VScale != 0) {
		return errorf(core.ErrInvalidArgument, op, "QODType %v, KScale %g and VScale %g are for fp8e4m3 caches; a %v cache leaves them 0",
			d.QODType, d.KScale, d.VScale, d.DType)
	}
	if d.PageSize <= 0 || d.NumKVHeads <= 0 || d.HeadDim <= 0 || d.PageSize > math.MaxInt32 ||
		d.NumKVHeads > math.MaxInt32 || d.HeadDim > math.MaxInt32 {
		return errorf(core.ErrInvalidArgument, op, "page size %d, kv heads %d and head dim %d must be positive int32s",
			d.PageSize, d.NumKVHeads, d.HeadDim)
	}
	if pages && d.NumPages <= 0 {
		return errorf(core.ErrInvalidArgument, op, "num pages %d must be positive", d.NumPages)
	}
	// Byte counts must fit an int: a product that wraps would make a
	// cache whose regions are smaller than its shape says.
	hi, page := bits.Mul64(uint64(d.PageSize)*uint64(d.NumKVHeads), uint64(d.HeadDim)*uint64(d.DType.Size()))
	if hi != 0 || page > math.MaxInt {
		return errorf(core.ErrOutOfRange, op, "page of %d tokens x %d kv heads x %d x %d-byte elements overflows the byte count",
			d.PageSize, d.NumKVHeads, d.HeadDim, d.DType.Size())
	}
	if pages {
		if hi, total := bits.Mul64(uint64(d.NumPages), page); hi != 0 || total > math.MaxInt {
			return errorf(core.ErrOutOfRange, op, "%d pages of %d bytes overflow the byte count", d.NumPages, page)
		}
	}
	return nil
}

// KVCache is a paged KV cache: a shape and the device regions holding K
// and V (each NumPages * PageBytes bytes). It does not own the memory
// unless it came from AllocKVCache (then Free frees it). A KVCache
// is a plain value: safe for concurrent use.
type KVCache struct {
	desc  KVCacheDesc
	k, v  core.Region
	owned [2]*core.Buffer
}

// NewKVCache describes a cache in existing device memory. The regions
// must each hold desc.NumPages pages, on one device, and the pages of K
// and of V must not overlap (Append would write V over K).
func NewKVCache(desc KVCacheDesc, k, v core.Region) (*KVCache, error) {
	const op = "kv_cache"
	if err := desc.check(op, true); err != nil {
		return nil, err
	}
	need := uint64(desc.NumPages) * uint64(desc.PageBytes())
	var devs, bufs [2]any
	var offs [2]uint64
	for i, r := range [2]*core.Region{&k, &v} {
		dev, buf, off, n, err := bridge.Region(op, unsafe.Pointer(r))
		if err != nil {
			return nil, err
		}
		if n < need {
			return nil, errorf(core.ErrOutOfRange, op, "%s region has %d bytes; %d pages of %d bytes need %d",
				[2]string{"K", "V"}[i], n, desc.NumPages, desc.PageBytes(), need)
		}
		devs[i], bufs[i], offs[i] = dev, buf, off
	}
	if devs[0] != devs[1] {
		return nil, errorf(core.ErrInvalidArgument, op, "K and V are on different devices (%v, %v)", devs[0], devs[1])
	}
	if bufs[0] == bufs[1] && offs[0] < offs[1]+need && offs[1] < offs[0]+need {
		return nil, errorf(core.ErrInvalidArgument, op, "K pages [%d, %d) and V pages [%d, %d) overlap in one buffer",
			offs[0], offs[0]+need, offs[1], offs[1]+need)
	}
	return &KVCache{desc: desc, k: k, v: v}, nil
}

// AllocKVCache allocates a cache of desc's shape on d (two buffers,
// uninitialised); Free releases them.
func AllocKVCache(d *core.Device, desc KVCacheDesc) (*KVCache, error) {
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
	return &KVCache{desc: desc, k: k, v: v, owned: [2]*core.Buffer{k, v}}, nil
}

// Desc is the cache's shape (zero for a nil cache).
func (c *KVCache) Desc() KVCacheDesc {
	if c == nil {
		return KVCacheDesc{}
	}
	return c.desc
}

// K is the region of the K pages (nil for a nil cache).
func (c *KVCache) K() core.Region {
	if c == nil {
		return nil
	}
	return c.k
}

// V is the region of the V pages (nil for a nil cache).
func (c *KVCache) V() core.Region {
	if c == nil {
		return nil
	}
	return c.v
}

// Free frees the buffers of a cache from AllocKVCache; for a cache from
// NewKVCache it does nothing (the caller owns the memory).
func (c *KVCache) Free() error {
	if c == nil {
		return errorf(core.ErrInvalidArgument, "kv_cache_free", "nil KV cache")
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
	Indptr, Indices, LastPageLen core.Region
}

// KVRows are new rows to append: K and V are [NNZ][NumKVHeads][HeadDim]
// of the cache's dtype; row i goes to request BatchIndices[i] at token
// Positions[i] (int32 arrays of NNZ entries in device memory).
//
// With InvFreq set (ABI 1.10: HeadDim/2 float32 frequencies) the append
// applies the rotary embedding on the way in, with rope_neox_freqs_T's
// arithmetic (Hugging Face's half-split rotation in the cache's type):
// each K row is rotated at its position before it is stored (K itself is
// not written), and Q, when set ([NNZ][QOHeads][HeadDim] of the cache's
// type, QOHeads 1 to 65536; every row, the ones the append skips too), is
// rotated in place at the same positions, so that no rotary
// kernel runs between the QKV projection and the attention. It needs an
// f16 or bf16 cache; a plugin older than 1.10, or one that cannot,
// refuses it (ErrUnsupported).
type KVRows struct {
	K, V                    core.Region
	BatchIndices, Positions core.Region
	NNZ                     int
	InvFreq, Q              core.Region
	QOHeads                 int
}

// Kind says whether an Attention decodes (one query row per
// request) or prefills (ragged query rows, QOIndptr).
type Kind int32

// Attention kinds.
const (
	Decode  Kind = abi.AttentionDecode
	Prefill Kind = abi.AttentionPrefill
)

// Desc is what stays fixed across steps. Cache.NumPages is not
// used. SMScale 0 means 1/sqrt(HeadDim); LogitsSoftCap 0 means none (else
// scores are cap*tanh(s/cap)). Causal applies to prefill: query row i of
// a request with qo rows and kv tokens sees tokens 0 .. kv-qo+i. MaxBatch
// bounds the batch of a plan; MaxRows the query rows of a prefill plan.
type Desc struct {
	Kind          Kind
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
// step with Plan and run it with Run on
// the same stream. Safe for concurrent use; Close racing with a use makes
// the use fail with ErrClosed.
type Attention struct {
	dev  *core.Device
	p    *bind.Plugin
	rt   abi.Runtime
	h    abi.Attention
	l    unsafe.Pointer // its lifetime in core (bridge.NewLife)
	desc Desc
	// mu orders plans against runs: Plan holds it for writing
	// across the plugin's plan and the update of plan, a run for reading
	// across its extent check and its enqueue (or recording), so that the
	// check and the plugin see the same plan.
	mu sync.RWMutex
	// plan is the last successful plan (zero before the first).
	plan planned
}

// planned is what a run's extents are checked against.
type planned struct {
	batch, pages, rows uint64
}

// New validates desc and makes the plugin's attention object on d.
// A plugin without attention (ABI < 1.5) gives ErrUnsupported naming the
// versions; a combination it cannot run gives ErrUnsupported naming the
// field. The caller must Close it.
func New(d *core.Device, desc Desc) (*Attention, error) {
	const op = "attention_create"
	p, rt, index, err := bridge.DeviceBegin(d, op)
	if err != nil {
		return nil, err
	}
	defer bridge.DeviceEnd(d)
	if err := slots(p, op); err != nil {
		return nil, err
	}
	if err := desc.Cache.check(op, false); err != nil {
		return nil, err
	}
	if desc.Kind != Decode && desc.Kind != Prefill {
		return nil, errorf(core.ErrInvalidArgument, op, "kind %d is neither Decode nor Prefill", desc.Kind)
	}
	if desc.NumQOHeads <= 0 || desc.NumQOHeads%desc.Cache.NumKVHeads != 0 || desc.NumQOHeads > math.MaxInt32 {
		return nil, errorf(core.ErrInvalidArgument, op, "query heads %d must be a positive multiple of the %d kv heads",
			desc.NumQOHeads, desc.Cache.NumKVHeads)
	}
	if desc.MaxBatch <= 0 || desc.MaxBatch > math.MaxInt32 || desc.MaxRows < 0 {
		return nil, errorf(core.ErrInvalidArgument, op, "max batch %d must be a positive int32, max rows %d not negative",
			desc.MaxBatch, desc.MaxRows)
	}
	if desc.Kind == Prefill && desc.MaxRows == 0 {
		return nil, errorf(core.ErrInvalidArgument, op, "prefill needs MaxRows (the most query rows of a plan)")
	}
	ad := abi.AttentionDesc{StructSize: abi.SizeofAttentionDesc, Kind: int32(desc.Kind), NumQOHeads: uint32(desc.NumQOHeads),
		Layout: desc.Cache.abiLayout(), SMScale: desc.SMScale, LogitsSoftCap: desc.LogitsSoftCap,
		MaxBatchSize: uint32(desc.MaxBatch), MaxRows: uint64(desc.MaxRows)}
	if desc.Causal {
		ad.Causal = 1
	}
	var h abi.Attention
	if err := p.AttentionCreate(op, rt, index, &ad, &h); err != nil {
		return nil, err
	}
	l, leak := bridge.NewLife(d, "attention")
	a := &Attention{dev: d, p: p, rt: rt, h: h, l: l, desc: desc}
	runtime.AddCleanup(a, func(f func()) { f() }, leak)
	return a, nil
}

// slots is nil when the plugin has the 1.5 slots, else the error naming
// the first it lacks.
func slots(p *bind.Plugin, op string) error {
	for _, slot := range [...]bind.Slot{bind.SlotKVAppend, bind.SlotAttentionCreate, bind.SlotAttentionDestroy,
		bind.SlotAttentionPlan, bind.SlotAttentionRun} {
		if !p.Has(slot) {
			return p.Unsupported(op, slot)
		}
	}
	return nil
}

// Desc is the descriptor the attention was made with (zero for a nil
// attention).
func (a *Attention) Desc() Desc {
	if a == nil {
		return Desc{}
	}
	return a.desc
}

func (a *Attention) ok() bool { return a != nil && a.l != nil }

// Close waits for the attention's work in flight, then frees it and its
// workspace. A second Close, or any later use, is an error wrapping
// ErrClosed.
func (a *Attention) Close() error {
	const op = "attention_destroy"
	if !a.ok() {
		return errorf(core.ErrInvalidArgument, op, "nil or zero-value attention (not made by attention.New)")
	}
	return bridge.Destroy(a.dev, a.l, op, "attention", func() error { return a.p.AttentionDestroy(op, a.rt, a.h) })
}

// Schedule is one step's page table counts on the host (the
// same values as the device PageTable of the runs): KVIndptr (batch+1
// entries, pages), KVLastPageLen (batch), and for prefill QOIndptr
// (batch+1, query rows; nil for decode).
type Schedule struct {
	QOIndptr, KVIndptr, KVLastPageLen []int32
}

// Plan plans a's next runs for one step on s: the plugin checks the
// counts and schedules the work (FlashInfer's plan on CUDA, its upload
// enqueued on s). Runs of the plan go on s. Planning is not recorded in a
// graph (a capture refuses it with ErrFailedPrecondition): plan between
// replays, and a recorded Run uses the plan current when it replays. A
// warm call allocates nothing.
func (a *Attention) Plan(s *core.Stream, sched Schedule) (err error) {
	const op = "attention_plan"
	c := bridge.Op{S: s, Name: op}
	if err := a.begin(&c, s); err != nil {
		return err
	}
	defer a.end(&c, &err)
	n := len(sched.KVLastPageLen)
	if n == 0 || len(sched.KVIndptr) != n+1 {
		return errorf(core.ErrInvalidArgument, op, "KVIndptr has %d entries and KVLastPageLen %d (batch+1 and batch, batch >= 1)",
			len(sched.KVIndptr), n)
	}
	prefill := a.desc.Kind == Prefill
	if prefill != (sched.QOIndptr != nil) || (prefill && len(sched.QOIndptr) != n+1) {
		return errorf(core.ErrInvalidArgument, op, "QOIndptr has %d entries: prefill needs batch+1 (%d), decode none",
			len(sched.QOIndptr), n+1)
	}
	if n > a.desc.MaxBatch {
		return errorf(core.ErrInvalidArgument, op, "batch %d exceeds the attention's max batch %d", n, a.desc.MaxBatch)
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
	err = bridge.Submit(&c, bind.SlotAttentionPlan, uintptr(a.h), unsafe.Pointer(&pa), unsafe.Sizeof(pa), nil)
	if err == nil {
		rows := uint64(n)
		if prefill {
			rows = uint64(uint32(sched.QOIndptr[n]))
		}
		a.plan = planned{batch: uint64(n), pages: uint64(uint32(sched.KVIndptr[n])), rows: rows}
	}
	return err
}

// Operands are a run's memory: Q and O are
// [rows][NumQOHeads][HeadDim] of the cache's dtype (rows: the batch for
// decode, QOIndptr[batch] for prefill), Pages the step's page table, and
// QOIndptr the device copy of the schedule's QOIndptr (prefill only).
type Operands struct {
	Q, O     core.Region
	Pages    PageTable
	QOIndptr core.Region
}

// Run enqueues one run of a's current plan on s (the plan's stream),
// reading the cache c. Each region must be on s's device; the extents are
// checked against the plan the plugin runs. Inside core.Stream.Capture an
// ABI 1.7 plugin records it (it holds a, which cannot be closed until the
// graph is). A warm call allocates nothing.
func (a *Attention) Run(s *core.Stream, c *KVCache, ops Operands) (err error) {
	const op = "attention_run"
	call := bridge.Op{S: s, Name: op, Metric: bridge.MetricAttentionRun}
	if err := a.begin(&call, s); err != nil {
		return err
	}
	defer a.end(&call, &err)
	if err := c.compatible(op, &a.desc.Cache); err != nil {
		return err
	}
	prefill := a.desc.Kind == Prefill
	regions := [8]*core.Region{&ops.Q, &ops.O, &c.k, &c.v, &ops.Pages.Indptr, &ops.Pages.Indices, &ops.Pages.LastPageLen, &ops.QOIndptr}
	if !prefill {
		if ops.QOIndptr != nil {
			return errorf(core.ErrInvalidArgument, op, "QOIndptr is set for decode")
		}
		regions[7] = nil
	}
	// The extent check and the plugin's run see the same plan: a Plan
	// waits until the run is enqueued (or recorded).
	a.mu.RLock()
	defer a.mu.RUnlock()
	var need [8]uint64
	p := a.plan
	if p.batch != 0 { // else no plan yet: the plugin says so
		rowBytes := uint64(a.desc.NumQOHeads) * uint64(a.desc.Cache.HeadDim) * uint64(a.desc.Cache.RowType().Size())
		need = [8]uint64{p.rows * rowBytes, p.rows * rowBytes, 0, 0, 4 * (p.batch + 1), 4 * p.pages, 4 * p.batch, 4 * (p.batch + 1)}
	}
	if err := views(&call, regions[:], operandNames[:], need[:]); err != nil {
		return extentError(err, "the plan has batch %d, %d rows, %d pages", p.batch, p.rows, p.pages)
	}
	ra := abi.AttentionRunArgs{StructSize: abi.SizeofAttentionRunArgs}
	ra.Q, ra.QOffset = call.Opr[0].Handle()
	ra.O, ra.OOffset = call.Opr[1].Handle()
	pages(&call, &ra.Pages, c)
	ra.QOIndptr, ra.QOIndptrOffset = call.Opr[7].Handle()
	ra.KScale, ra.VScale = c.desc.scales()
	call.Hold = a.l
	return bridge.Submit(&call, bind.SlotAttentionRun, uintptr(a.h), unsafe.Pointer(&ra), unsafe.Sizeof(ra), nil)
}

var operandNames = [8]string{"Q", "O", "K", "V", "Indptr", "Indices", "LastPageLen", "QOIndptr"}

// Append enqueues an append of rows into the cache on s, for a page
// table of batch requests that already counts the new tokens (FlashInfer's
// append_paged_kv_cache). NNZ 0 is a no-op. Inside core.Stream.Capture an
// ABI 1.7 plugin records it.
func (c *KVCache) Append(s *core.Stream, pt PageTable, batch int, rows KVRows) (err error) {
	const op = "kv_append"
	call := bridge.Op{S: s, Name: op}
	if err := bridge.Begin(&call); err != nil {
		return err
	}
	defer bridge.Finish(&call, &err)
	if err := slots(call.P, op); err != nil {
		return err
	}
	if c == nil {
		return errorf(core.ErrInvalidArgument, op, "nil KV cache")
	}
	if batch <= 0 || batch > math.MaxInt32 || rows.NNZ < 0 {
		return errorf(core.ErrInvalidArgument, op, "batch %d must be a positive int32 and NNZ %d not negative", batch, rows.NNZ)
	}
	if rows.NNZ == 0 {
		return nil
	}
	rope := rows.InvFreq != nil
	switch {
	case !rope && (rows.Q != nil || rows.QOHeads != 0):
		return errorf(core.ErrInvalidArgument, op, "Q and QOHeads are set only with InvFreq (the rotary embedding)")
	case rope && (rows.Q == nil) != (rows.QOHeads == 0):
		return errorf(core.ErrInvalidArgument, op, "Q needs QOHeads >= 1 (and no Q, QOHeads 0): QOHeads %d", rows.QOHeads)
	case rows.QOHeads < 0 || rows.QOHeads > 65536:
		return errorf(core.ErrInvalidArgument, op, "QOHeads %d is not in 0 .. 65536", rows.QOHeads)
	case rope && call.P.Minor < ropeMinor:
		return errorf(core.ErrUnsupported, op, "the rotary embedding on append (InvFreq) needs a plugin of ABI 1.%d or later; this one is 1.%d", ropeMinor, call.P.Minor)
	}
	regions := [11]*core.Region{&rows.K, &rows.V, &c.k, &c.v, &pt.Indptr, &pt.Indices, &pt.LastPageLen, &rows.BatchIndices, &rows.Positions, nil, nil}
	names := [11]string{"K rows", "V rows", "K", "V", "Indptr", "Indices", "LastPageLen", "BatchIndices", "Positions", "InvFreq", "Q"}
	// The page table's views are bounded as a run's are, but for
	// Indices: its entry count is on the device (Indptr[batch]), so the
	// plugin bounds its index reads by the Indices buffer instead.
	rowsBytes := uint64(rows.NNZ) * uint64(c.desc.NumKVHeads) * uint64(c.desc.HeadDim) * uint64(c.desc.RowType().Size())
	b, n := uint64(batch), uint64(rows.NNZ)
	need := [11]uint64{rowsBytes, rowsBytes, 0, 0, 4 * (b + 1), 0, 4 * b, 4 * n, 4 * n,
		4 * uint64(c.desc.HeadDim/2), n * uint64(rows.QOHeads) * uint64(c.desc.HeadDim) * uint64(c.desc.RowType().Size())}
	if rope {
		regions[9] = &rows.InvFreq
		if rows.Q != nil {
			regions[10] = &rows.Q
		}
	}
	if err := views(&call, regions[:], names[:], need[:]); err != nil {
		return extentError(err, "batch %d, %d rows of %d bytes", b, n, rowsBytes/n)
	}
	aa := abi.KVAppendArgs{StructSize: abi.SizeofKVAppendArgs, Layout: c.desc.abiLayout(), BatchSize: uint32(batch), NNZ: uint64(rows.NNZ)}
	pages(&call, &aa.Pages, c)
	aa.KRows, aa.KRowsOffset = call.Opr[0].Handle()
	aa.VRows, aa.VRowsOffset = call.Opr[1].Handle()
	aa.BatchIndices, aa.BatchIndicesOffset = call.Opr[7].Handle()
	aa.Positions, aa.PositionsOffset = call.Opr[8].Handle()
	aa.KScale, aa.VScale = c.desc.scales()
	if rope {
		aa.InvFreq, aa.InvFreqOffset = call.Opr[9].Handle()
		aa.Q, aa.QOffset = call.Opr[10].Handle()
		aa.NumQOHeads = uint32(rows.QOHeads)
	}
	return bridge.Submit(&call, bind.SlotKVAppend, 0, unsafe.Pointer(&aa), unsafe.Sizeof(aa), nil)
}

// ropeMinor is the ABI minor that gave kv_append its rotary embedding
// (an older plugin reads the arguments to its own size: it would append
// without rotating).
const ropeMinor = 10

// begin begins call, an operation of a on s: its use of s (bridge.Begin)
// and a use of a (use). On success defer a.end(call, &err).
func (a *Attention) begin(call *bridge.Op, s *core.Stream) error {
	if err := bridge.Begin(call); err != nil {
		return err
	}
	if err := a.use(call.Name, s); err != nil {
		bridge.Finish(call, &err)
		return err
	}
	return nil
}

// end ends what begin began: the use of a, then call (bridge.Finish, which
// may set *err).
func (a *Attention) end(call *bridge.Op, err *error) {
	bridge.Release(a.l)
	bridge.Finish(call, err)
}

// use begins a use of the attention alone (the stream's use holds the
// runtime) and checks that it belongs to s's device; end it with
// bridge.Release(a.l).
func (a *Attention) use(op string, s *core.Stream) error {
	if !a.ok() {
		return errorf(core.ErrInvalidArgument, op, "nil or zero-value attention (not made by attention.New)")
	}
	if a.dev != s.Device() {
		return errorf(core.ErrInvalidArgument, op, "the attention is on %v, the stream on %v", a.dev, s.Device())
	}
	if !bridge.Acquire(a.l) {
		return errorf(core.ErrClosed, op, "attention is closed")
	}
	return nil
}

// views resolves regions into call's operands 0.. (a nil entry is
// skipped) with the least byte count each needs (need[i], 0 for none):
// the one bound on views of a run and of an append. The plugin checks
// the rest, but it sees a handle and an offset, never a View's length, so
// only Go can bound a view; a short one is ErrOutOfRange naming the
// operand, before anything is enqueued or recorded.
func views(call *bridge.Op, regions []*core.Region, names []string, need []uint64) error {
	for i, r := range regions {
		if r == nil {
			continue
		}
		if err := bridge.OperandOf(call, i, names[i], unsafe.Pointer(r), need[i], 1); err != nil {
			return err
		}
	}
	return nil
}

// extentError adds to a view's ErrOutOfRange what its need came from
// (formatted only on the error path: a warm call allocates nothing).
func extentError(err error, format string, a, b, c uint64) error {
	if e, ok := err.(*core.Error); ok && errors.Is(e, core.ErrOutOfRange) {
		e.Message += " (" + fmt.Sprintf(format, a, b, c) + ")"
	}
	return err
}

// pages fills the ABI page table from operands 2..6 (K, V, Indptr,
// Indices, LastPageLen) and the cache's page count.
func pages(call *bridge.Op, p *abi.KVPages, c *KVCache) {
	p.K, p.KOffset = call.Opr[2].Handle()
	p.V, p.VOffset = call.Opr[3].Handle()
	p.NumPages = uint64(c.desc.NumPages)
	p.Indptr, p.IndptrOffset = call.Opr[4].Handle()
	p.Indices, p.IndicesOffset = call.Opr[5].Handle()
	p.LastPageLen, p.LastPageLenOffset = call.Opr[6].Handle()
}

// errorf is an error of op raised before the call crosses.
// errorf is a *core.Error of the code whose sentinel is kind
// (core.ErrInvalidArgument, ...).
func errorf(kind error, op, format string, args ...any) error {
	return bridge.Error(kind, op, fmt.Sprintf(format, args...))
}

// compatible checks that the cache has the attention's layout.
func (c *KVCache) compatible(op string, want *KVCacheDesc) error {
	if c == nil {
		return errorf(core.ErrInvalidArgument, op, "nil KV cache")
	}
	d := &c.desc
	if d.DType != want.DType || d.Layout != want.Layout || d.PageSize != want.PageSize ||
		d.NumKVHeads != want.NumKVHeads || d.HeadDim != want.HeadDim || d.QODType != want.QODType {
		return errorf(core.ErrInvalidArgument, op, "the cache (%v/%v, layout %d, page %d, %d kv heads, head dim %d) is not the attention's (%v/%v, layout %d, page %d, %d kv heads, head dim %d)",
			d.DType, d.RowType(), d.Layout, d.PageSize, d.NumKVHeads, d.HeadDim, want.DType, want.RowType(), want.Layout, want.PageSize, want.NumKVHeads, want.HeadDim)
	}
	return nil
}
