// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/le"
)

// attnCase is one attention check: a cache shape, an attention and a
// batch whose lengths are drawn at random (ragged) up to maxKV tokens
// and, for prefill, maxQO query rows.
type attnCase struct {
	name     string
	kind     attention.Kind
	dt       core.DType
	layout   attention.KVLayout
	page     int
	hq, hk   int
	dim      int
	batch    int
	minKV    int
	maxKV    int
	maxQO    int // prefill
	causal   bool
	softCap  float64
	smScale  float64
	long     bool // only with Options.Long (slow on the mock)
	steps    int  // decode steps: >1 appends a token per request and plans again
	fullKV   bool // prefill: qo == kv for every request
	exactLen bool // every request has maxKV tokens
	fp8      bool // an fp8 e4m3 cache (ABI 1.8); dt is the queries' and rows' type
	graph    bool // the run is recorded in a graph once and replayed every step, after each step's plan
}

func attentionCases() []attnCase {
	dec, pre := attention.Decode, attention.Prefill
	nhd, hnd := attention.KVLayoutNHD, attention.KVLayoutHND
	return []attnCase{
		{name: "decode/f16/nhd/p16/gqa1/d64", kind: dec, dt: core.F16, layout: nhd, page: 16, hq: 8, hk: 8, dim: 64, batch: 5, minKV: 1, maxKV: 200},
		{name: "decode/bf16/hnd/p1/gqa7/d128", kind: dec, dt: core.BF16, layout: hnd, page: 1, hq: 28, hk: 4, dim: 128, batch: 3, minKV: 1, maxKV: 100},
		{name: "decode/bf16/nhd/p16/gqa4/d128/batch64", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 32, hk: 8, dim: 128, batch: 64, minKV: 1, maxKV: 48},
		{name: "decode/f16/hnd/p16/gqa8/d256/softcap", kind: dec, dt: core.F16, layout: hnd, page: 16, hq: 16, hk: 2, dim: 256, batch: 2, minKV: 17, maxKV: 90, softCap: 30},
		{name: "decode/bf16/nhd/p16/gqa5/d128/steps", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 10, hk: 2, dim: 128, batch: 4, minKV: 14, maxKV: 40, steps: 3},
		// Many steps: most keep each request's page count (a CUDA plan then
		// keeps the last schedule: the plan memo), some start a page.
		{name: "decode/bf16/nhd/p16/gqa4/d128/steps20", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 8, hk: 2, dim: 128, batch: 2, minKV: 1, maxKV: 30, steps: 20},
		{name: "decode/f16/nhd/p1/gqa7/d64/scale", kind: dec, dt: core.F16, layout: nhd, page: 1, hq: 7, hk: 1, dim: 64, batch: 6, minKV: 1, maxKV: 33, smScale: 0.3},
		{name: "prefill/f16/nhd/p16/gqa4/d128/causal", kind: pre, dt: core.F16, layout: nhd, page: 16, hq: 8, hk: 2, dim: 128, batch: 4, minKV: 1, maxKV: 120, maxQO: 40, causal: true},
		{name: "prefill/bf16/hnd/p1/gqa7/d64", kind: pre, dt: core.BF16, layout: hnd, page: 1, hq: 14, hk: 2, dim: 64, batch: 3, minKV: 1, maxKV: 70, maxQO: 30},
		{name: "prefill/bf16/nhd/p16/gqa1/d256/causal/softcap", kind: pre, dt: core.BF16, layout: nhd, page: 16, hq: 4, hk: 4, dim: 256, batch: 2, minKV: 20, maxKV: 60, maxQO: 20, causal: true, softCap: 20, smScale: 0.05},
		{name: "prefill/f16/hnd/p16/gqa3/d128/full", kind: pre, dt: core.F16, layout: hnd, page: 16, hq: 12, hk: 4, dim: 128, batch: 2, minKV: 1, maxKV: 150, maxQO: 150, causal: true, fullKV: true},
		// fp8 e4m3 caches (ABI 1.8; attention_fp8.go): quantised on append, per-cache scales.
		{name: "fp8/decode/bf16/nhd/p16/gqa4/d128/steps", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 16, hk: 4, dim: 128, batch: 5, minKV: 1, maxKV: 150, steps: 2, fp8: true},
		{name: "fp8/decode/f16/hnd/p1/gqa8/d128", kind: dec, dt: core.F16, layout: hnd, page: 1, hq: 16, hk: 2, dim: 128, batch: 3, minKV: 1, maxKV: 60, fp8: true},
		{name: "fp8/prefill/bf16/nhd/p16/gqa4/d128/causal", kind: pre, dt: core.BF16, layout: nhd, page: 16, hq: 8, hk: 2, dim: 128, batch: 3, minKV: 1, maxKV: 120, maxQO: 40, causal: true, fp8: true},
		// Recorded in a graph at step 0 and replayed after each step's plan
		// (a decode step graph's way: the plan stays outside the graph).
		{name: "graph/decode/bf16/nhd/p16/gqa4/d128/steps", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 32, hk: 8, dim: 128, batch: 3, minKV: 1, maxKV: 100, steps: 3, graph: true},
		{name: "graph/fp8/decode/bf16/nhd/p16/gqa4/d128/steps", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 16, hk: 4, dim: 128, batch: 4, minKV: 1, maxKV: 120, steps: 3, fp8: true, graph: true},
		// Long contexts (Options.Long): what a GPU runs in production.
		{name: "long/decode/bf16/nhd/p16/gqa4/d128/batch64x8k", kind: dec, dt: core.BF16, layout: nhd, page: 16, hq: 32, hk: 8, dim: 128, batch: 64, minKV: 1, maxKV: 8192, long: true},
		{name: "long/decode/f16/hnd/p16/gqa7/d128/32k", kind: dec, dt: core.F16, layout: hnd, page: 16, hq: 28, hk: 4, dim: 128, batch: 2, minKV: 32768, maxKV: 32768, long: true, exactLen: true},
		{name: "long/decode/bf16/nhd/p1/gqa8/d64/ragged", kind: dec, dt: core.BF16, layout: nhd, page: 1, hq: 32, hk: 4, dim: 64, batch: 16, minKV: 1, maxKV: 20000, long: true},
		{name: "long/prefill/bf16/nhd/p16/gqa4/d128/causal/32k", kind: pre, dt: core.BF16, layout: nhd, page: 16, hq: 32, hk: 8, dim: 128, batch: 2, minKV: 1024, maxKV: 32768, maxQO: 512, causal: true, long: true},
		{name: "long/prefill/f16/nhd/p16/gqa7/d128/ragged", kind: pre, dt: core.F16, layout: nhd, page: 16, hq: 28, hk: 4, dim: 128, batch: 24, minKV: 1, maxKV: 4000, maxQO: 300, causal: true, long: true},
	}
}

func attentionChecks() []check {
	var cs []check
	for _, c := range attentionCases() {
		c := c
		cs = append(cs, check{"attention/" + c.name, func(e *env) error {
			if c.long && !e.opts.Long {
				return skip("long-context check: run with Options.Long (gpurt conform --long)")
			}
			return runAttnCase(e, c)
		}})
	}
	cs = append(cs,
		check{"attention/append/layout", attnAppendLayout},
		check{"attention/append/rope", attnAppendRope},
		check{"attention/unsupported", attnUnsupported},
		check{"attention/misuse", attnMisuse},
	)
	return cs
}

// attnSkip turns "the plugin has no attention" into a skip.
func attnSkip(err error) error {
	var ce *core.Error
	if errors.Is(err, core.ErrUnsupported) && errors.As(err, &ce) && ce.Op == "attention_create" &&
		(strings.Contains(ce.Message, "unsupported by this plugin") || strings.Contains(ce.Message, "without FlashInfer")) {
		return skip("the plugin has no attention: %v", err)
	}
	return err
}

// attnBatch is a batch's page table and data on the host.
type attnBatch struct {
	desc              attention.KVCacheDesc
	kvLen, qoLen      []int
	indptr, last, idx []int32
	qoIndptr          []int32
	reserved          [][]int32   // per request: the pages it may use, in order
	k, v              [][]float64 // per request: [token][hk][dim]
}

// newAttnBatch draws lengths and a shuffled page assignment (spare pages
// for growth), and random K/V values.
func newAttnBatch(e *env, c attnCase, extra int) *attnBatch {
	b := &attnBatch{kvLen: make([]int, c.batch), qoLen: make([]int, c.batch)}
	for i := range b.kvLen {
		n := c.maxKV
		if !c.exactLen {
			n = c.minKV + e.rng.IntN(c.maxKV-c.minKV+1)
		}
		b.kvLen[i] = n
		b.qoLen[i] = 1
		if c.kind == attention.Prefill {
			q := 1 + e.rng.IntN(c.maxQO)
			if c.causal && q > n {
				q = n
			}
			if c.fullKV {
				q = n
			}
			b.qoLen[i] = q
		}
	}
	pages := 0
	for _, n := range b.kvLen {
		pages += (n+extra+c.page-1)/c.page + 1
	}
	perm := e.rng.Perm(pages)
	b.desc = attention.KVCacheDesc{DType: c.dt, Layout: c.layout, PageSize: c.page, NumKVHeads: c.hk, HeadDim: c.dim, NumPages: pages}
	b.k = make([][]float64, c.batch)
	b.v = make([][]float64, c.batch)
	row := c.hk * c.dim
	for i, n := range b.kvLen {
		b.k[i] = randomValues(e.rng, c.dt, (n+extra)*row, 1)
		b.v[i] = randomValues(e.rng, c.dt, (n+extra)*row, 1)
	}
	// Each request reserves enough pages for its final length.
	b.idx = make([]int32, 0, pages)
	b.reserved = make([][]int32, c.batch)
	next := 0
	for i, n := range b.kvLen {
		np := (n+extra+c.page-1)/c.page + 1
		b.reserved[i] = make([]int32, np)
		for j := range np {
			b.reserved[i][j] = int32(perm[next])
			next++
		}
	}
	b.table()
	return b
}

// table recomputes indptr, indices and last page lengths from kvLen.
func (b *attnBatch) table() {
	ps := b.desc.PageSize
	b.indptr = []int32{0}
	b.idx = b.idx[:0]
	b.last = b.last[:0]
	for i, n := range b.kvLen {
		np := (n + ps - 1) / ps
		b.idx = append(b.idx, b.reserved[i][:np]...)
		b.indptr = append(b.indptr, int32(len(b.idx)))
		b.last = append(b.last, int32(n-(np-1)*ps))
	}
	b.qoIndptr = []int32{0}
	for _, q := range b.qoLen {
		b.qoIndptr = append(b.qoIndptr, b.qoIndptr[len(b.qoIndptr)-1]+int32(q))
	}
}

// attnRef is the float64 reference: out[row][hq][dim].
func attnRef(c attnCase, b *attnBatch, q []float64) []float64 {
	D, hq, hk := c.dim, c.hq, c.hk
	group := hq / hk
	scale := c.smScale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(D))
	}
	out := make([]float64, len(q))
	row0 := 0
	for r, kv := range b.kvLen {
		qo := b.qoLen[r]
		sc := make([]float64, kv)
		for i := 0; i < qo; i++ {
			n := kv
			if c.causal {
				n = kv - qo + i + 1
			}
			for h := 0; h < hq; h++ {
				kh := h / group
				qv := q[((row0+i)*hq+h)*D:][:D]
				m := math.Inf(-1)
				for t := 0; t < n; t++ {
					kr := b.k[r][(t*hk+kh)*D:][:D]
					s := 0.0
					for d := range D {
						s += qv[d] * kr[d]
					}
					s *= scale
					if c.softCap > 0 {
						s = c.softCap * math.Tanh(s/c.softCap)
					}
					sc[t] = s
					m = math.Max(m, s)
				}
				o := out[((row0+i)*hq+h)*D:][:D]
				den := 0.0
				for t := 0; t < n; t++ {
					p := math.Exp(sc[t] - m)
					den += p
					vr := b.v[r][(t*hk+kh)*D:][:D]
					for d := range D {
						o[d] += p * vr[d]
					}
				}
				for d := range D {
					o[d] /= den
				}
			}
		}
		row0 += qo
	}
	return out
}

// attnTol: GPUs round the softmax weights to the input type before the
// weighted sum of V and accumulate in f32; |V| <= 1.
func attnTol(t core.DType) (atol, rtol float64) {
	if t == core.BF16 {
		return 1.6e-2, 8e-3
	}
	return 2.5e-3, 1e-3
}

// attnDev holds a case's device memory.
type attnDev struct {
	cache             *attention.KVCache
	indptr, idx, last *core.Buffer
	qoIndptr          *core.Buffer
	q, o              *core.Buffer
	bufs              []*core.Buffer
}

func (d *attnDev) free() {
	if d.cache != nil {
		d.cache.Free()
	}
	for _, b := range d.bufs {
		b.Free()
	}
}

func (d *attnDev) alloc(e *env, n int) (*core.Buffer, error) {
	b, err := e.dev.Alloc(max(n, 4))
	if err == nil {
		d.bufs = append(d.bufs, b)
	}
	return b, err
}

// upload writes the page table (sizes may grow between steps: buffers
// are sized for the final table).
func (d *attnDev) upload(b *attnBatch, c attnCase) error {
	return firstErr(core.CopyFromHost(d.indptr, le.Int32s(b.indptr)), core.CopyFromHost(d.idx, le.Int32s(b.idx)),
		core.CopyFromHost(d.last, le.Int32s(b.last)), core.CopyFromHost(d.qoIndptr, le.Int32s(b.qoIndptr)))
}

// appendTokens appends tokens [from[r], to[r]) of every request through
// attention.KVCache.Append.
func appendTokens(e *env, s *core.Stream, c attnCase, b *attnBatch, d *attnDev, from, to []int) error {
	row := c.hk * c.dim
	var kr, vr []float64
	var bi, pos []int32
	for r := range from {
		for t := from[r]; t < to[r]; t++ {
			kr = append(kr, b.k[r][t*row:(t+1)*row]...)
			vr = append(vr, b.v[r][t*row:(t+1)*row]...)
			bi = append(bi, int32(r))
			pos = append(pos, int32(t))
		}
	}
	nnz := len(bi)
	if nnz == 0 {
		return nil
	}
	// Shuffle the rows: the order of an append must not matter.
	perm := e.rng.Perm(nnz)
	kb := make([]float64, len(kr))
	vb := make([]float64, len(vr))
	bi2 := make([]int32, nnz)
	pos2 := make([]int32, nnz)
	for i, j := range perm {
		copy(kb[i*row:(i+1)*row], kr[j*row:(j+1)*row])
		copy(vb[i*row:(i+1)*row], vr[j*row:(j+1)*row])
		bi2[i], pos2[i] = bi[j], pos[j]
	}
	es := c.dt.Size()
	kbuf, err := e.dev.Alloc(nnz * row * es)
	if err != nil {
		return err
	}
	defer kbuf.Free()
	vbuf, err := e.dev.Alloc(nnz * row * es)
	if err != nil {
		return err
	}
	defer vbuf.Free()
	ib, err := e.dev.Alloc(8 * nnz)
	if err != nil {
		return err
	}
	defer ib.Free()
	biv, _ := ib.View(0, 4*nnz)
	posv, _ := ib.View(4*nnz, 4*nnz)
	if err := firstErr(core.CopyFromHost(kbuf, encode(c.dt, kb)), core.CopyFromHost(vbuf, encode(c.dt, vb)),
		core.CopyFromHost(biv, le.Int32s(bi2)), core.CopyFromHost(posv, le.Int32s(pos2))); err != nil {
		return err
	}
	pt := attention.PageTable{Indptr: d.indptr, Indices: d.idx, LastPageLen: d.last}
	if err := d.cache.Append(s, pt, c.batch, attention.KVRows{K: kbuf, V: vbuf, BatchIndices: biv, Positions: posv, NNZ: nnz}); err != nil {
		return err
	}
	return s.Synchronize() // the rows' buffers are freed on return
}

func runAttnCase(e *env, c attnCase) error {
	if _, _, minor := inspect.PluginVersion(e.rt); c.fp8 && minor < 8 {
		return skip("the plugin speaks ABI 1.%d; fp8 KV caches need 1.8", minor)
	}
	steps := max(c.steps, 1)
	b := newAttnBatch(e, c, steps-1)
	var truth *attnBatch // fp8: the unquantised K and V
	if c.fp8 {
		truth = fp8Batch(b)
	}
	d := &attnDev{}
	defer d.free()
	var err error
	if d.cache, err = attention.AllocKVCache(e.dev, b.desc); err != nil {
		return err
	}
	// Poison the cache: a token the append misses shows.
	if err := firstErr(core.Memset(d.cache.K(), 0xFF), core.Memset(d.cache.V(), 0xFF)); err != nil {
		return err
	}
	maxRows := 0
	for _, q := range b.qoLen {
		maxRows += q
	}
	alloc := func(n int) *core.Buffer {
		if err != nil {
			return nil
		}
		var x *core.Buffer
		x, err = d.alloc(e, n)
		return x
	}
	d.indptr, d.idx, d.last, d.qoIndptr = alloc(4*(c.batch+1)), alloc(4*b.desc.NumPages), alloc(4*c.batch), alloc(4*(c.batch+1))
	rowBytes := c.hq * c.dim * c.dt.Size()
	d.q, d.o = alloc(maxRows*rowBytes), alloc(maxRows*rowBytes)
	if err != nil {
		return err
	}
	return withStream(e, func(s *core.Stream) error {
		att, err := attention.New(e.dev, attention.Desc{Kind: c.kind, NumQOHeads: c.hq, Cache: b.desc, Causal: c.causal,
			SMScale: c.smScale, LogitsSoftCap: c.softCap, MaxBatch: c.batch, MaxRows: maxRows})
		if err != nil {
			if c.fp8 && errors.Is(err, core.ErrUnsupported) { // ABI 1.8, optional per plugin
				return skip("the plugin has no fp8 KV caches: %v", err)
			}
			return attnSkip(err)
		}
		defer att.Close()
		// Step 0: the whole context goes in through AppendKV.
		if err := d.upload(b, c); err != nil {
			return err
		}
		zero := make([]int, c.batch)
		if err := appendTokens(e, s, c, truth.or(b), d, zero, b.kvLen); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		if c.fp8 {
			if err := checkFP8Pages(c, truth, d.cache, b.kvLen); err != nil {
				return err
			}
		}
		var g *core.Graph // c.graph: the run, recorded at step 0
		for step := 0; step < steps; step++ {
			if step > 0 { // one more token per request: page table first, then the rows
				from := append([]int(nil), b.kvLen...)
				for r := range b.kvLen {
					b.kvLen[r]++
				}
				b.table()
				if err := d.upload(b, c); err != nil {
					return err
				}
				if c.fp8 {
					truth.kvLen, truth.indptr, truth.last, truth.idx = b.kvLen, b.indptr, b.last, b.idx
				}
				if err := appendTokens(e, s, c, truth.or(b), d, from, b.kvLen); err != nil {
					return fmt.Errorf("step %d: append: %w", step, err)
				}
			}
			rows := int(b.qoIndptr[c.batch])
			q := randomValues(e.rng, c.dt, rows*c.hq*c.dim, 1)
			if err := core.CopyFromHost(d.q, encode(c.dt, q)); err != nil {
				return err
			}
			out := make([]byte, rows*rowBytes)
			poison(out)
			if err := core.CopyFromHost(d.o, out); err != nil {
				return err
			}
			sched := attention.Schedule{KVIndptr: b.indptr, KVLastPageLen: b.last}
			ops := attention.Operands{Q: d.q, O: d.o, Pages: attention.PageTable{Indptr: d.indptr, Indices: d.idx, LastPageLen: d.last}}
			if c.kind == attention.Prefill {
				sched.QOIndptr = b.qoIndptr
				ops.QOIndptr = d.qoIndptr
			}
			if err := att.Plan(s, sched); err != nil {
				return fmt.Errorf("step %d: plan: %w", step, err)
			}
			if c.graph {
				if g == nil {
					g, err = s.Capture(func(cs *core.Stream) error { return att.Run(cs, d.cache, ops) })
					if errors.Is(err, core.ErrUnsupported) || errors.Is(err, core.ErrFailedPrecondition) {
						return skip("the plugin does not record this attention's runs in graphs: %v", err)
					}
					if err != nil {
						return fmt.Errorf("step %d: capturing the run: %w", step, err)
					}
					defer g.Close()
				}
				if err := g.Launch(s); err != nil {
					return fmt.Errorf("step %d: replaying the run: %w", step, err)
				}
			} else {
				// Two runs of one plan (two layers): the second must match too.
				for run := 0; run < 2; run++ {
					if err := att.Run(s, d.cache, ops); err != nil {
						return fmt.Errorf("step %d: run %d: %w", step, run, err)
					}
				}
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if err := core.CopyToHost(out, d.o); err != nil {
				return err
			}
			got := decode(c.dt, out)
			want := attnRef(c, b, q) // fp8: on the dequantised K and V
			atol, rtol := attnTol(c.dt)
			if c.fp8 {
				if err := fp8Accuracy(c, truth, b, q, got, want); err != nil {
					return fmt.Errorf("step %d: %w", step, err)
				}
			}
			for i := range want {
				if diff := math.Abs(got[i] - want[i]); !(diff <= atol+rtol*math.Abs(want[i])) {
					per := c.hq * c.dim
					return fmt.Errorf("step %d: output[row %d][head %d][%d] = %g, want %g (|diff| %.3g > %.3g; %d rows, lengths %v)",
						step, i/per, i%per/c.dim, i%c.dim, got[i], want[i], diff, atol+rtol*math.Abs(want[i]), rows, lenSummary(b.kvLen))
				}
			}
		}
		return nil
	})
}

func lenSummary(v []int) string {
	if len(v) <= 8 {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%v ... (%d requests)", v[:8], len(v))
}

// attnAppendLayout appends rows and compares the cache's bytes with
// where KVCacheDesc.Offset says each row goes, for both layouts.
func attnAppendLayout(e *env) error {
	for _, lay := range []attention.KVLayout{attention.KVLayoutNHD, attention.KVLayoutHND} {
		c := attnCase{kind: attention.Decode, dt: core.BF16, layout: lay, page: 4, hq: 6, hk: 3, dim: 64, batch: 3, minKV: 1, maxKV: 11}
		b := newAttnBatch(e, c, 0)
		d := &attnDev{}
		err := func() error {
			var err error
			if d.cache, err = attention.AllocKVCache(e.dev, b.desc); err != nil {
				return err
			}
			if d.indptr, err = d.alloc(e, 4*(c.batch+1)); err != nil {
				return err
			}
			if d.idx, err = d.alloc(e, 4*b.desc.NumPages); err != nil {
				return err
			}
			if d.last, err = d.alloc(e, 4*c.batch); err != nil {
				return err
			}
			if d.qoIndptr, err = d.alloc(e, 4*(c.batch+1)); err != nil {
				return err
			}
			if err := firstErr(core.Memset(d.cache.K(), 0), core.Memset(d.cache.V(), 0), d.upload(b, c)); err != nil {
				return err
			}
			return withStream(e, func(s *core.Stream) error {
				if err := appendTokens(e, s, c, b, d, make([]int, c.batch), b.kvLen); err != nil {
					if errors.Is(err, core.ErrUnsupported) {
						return skip("the plugin has no attention: %v", err)
					}
					return err
				}
				raw := make([]byte, b.desc.NumPages*b.desc.PageBytes())
				for kv, reg := range []core.Region{d.cache.K(), d.cache.V()} {
					if err := core.CopyToHost(raw, reg); err != nil {
						return err
					}
					vals := [][][]float64{b.k, b.v}[kv]
					for r, n := range b.kvLen {
						for t := 0; t < n; t++ {
							page := int(b.idx[int(b.indptr[r])+t/c.page])
							for h := 0; h < c.hk; h++ {
								off, err := b.desc.Offset(page, t%c.page, h)
								if err != nil {
									return fmt.Errorf("layout %d: request %d token %d head %d: %w", lay, r, t, h, err)
								}
								got := decode(c.dt, raw[off:off+c.dim*2])
								want := vals[r][(t*c.hk+h)*c.dim:][:c.dim]
								for i := range got {
									if got[i] != want[i] {
										return fmt.Errorf("layout %d: %s of request %d token %d head %d [%d] = %g, want %g",
											lay, [2]string{"K", "V"}[kv], r, t, h, i, got[i], want[i])
									}
								}
							}
						}
					}
				}
				return nil
			})
		}()
		d.free()
		if err != nil {
			return err
		}
	}
	return nil
}

// attnUnsupported: what 1.5 does not define is ErrUnsupported naming the
// field.
func attnUnsupported(e *env) error {
	base := attention.Desc{Kind: attention.Decode, NumQOHeads: 4, MaxBatch: 1,
		Cache: attention.KVCacheDesc{DType: core.BF16, PageSize: 16, NumKVHeads: 2, HeadDim: 128}}
	a, err := attention.New(e.dev, base)
	if err != nil {
		return attnSkip(err)
	}
	if err := a.Close(); err != nil {
		return err
	}
	for _, c := range []struct {
		field string
		mod   func(d *attention.Desc)
	}{
		{"dtype", func(d *attention.Desc) { d.Cache.DType = core.F32 }},
		{"head_dim", func(d *attention.Desc) { d.Cache.HeadDim = 96 }},
	} {
		d := base
		c.mod(&d)
		a, err := attention.New(e.dev, d)
		if err == nil {
			a.Close()
			return fmt.Errorf("%s: no error, want ErrUnsupported", c.field)
		}
		if err := expect(c.field, err, core.ErrUnsupported); err != nil {
			return err
		}
		if !strings.Contains(err.Error(), c.field) {
			return fmt.Errorf("%s: %v does not name the field", c.field, err)
		}
	}
	return nil
}

// attnMisuse: wrong calls are errors, never crashes.
func attnMisuse(e *env) error {
	c := attnCase{kind: attention.Prefill, dt: core.F16, layout: attention.KVLayoutNHD, page: 16, hq: 4, hk: 2, dim: 64, batch: 2, minKV: 5, maxKV: 20, maxQO: 4, causal: true}
	b := newAttnBatch(e, c, 0)
	a, err := attention.New(e.dev, attention.Desc{Kind: c.kind, NumQOHeads: c.hq, Cache: b.desc, Causal: true, MaxBatch: 2, MaxRows: 8})
	if err != nil {
		return attnSkip(err)
	}
	defer a.Close()
	d := &attnDev{}
	defer d.free()
	if d.cache, err = attention.AllocKVCache(e.dev, b.desc); err != nil {
		return err
	}
	bufs := make([]*core.Buffer, 6)
	for i, n := range []int{12, 4 * b.desc.NumPages, 8, 12, 8 * c.hq * c.dim * 2, 8 * c.hq * c.dim * 2} {
		if bufs[i], err = d.alloc(e, n); err != nil {
			return err
		}
	}
	d.indptr, d.idx, d.last, d.qoIndptr, d.q, d.o = bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]
	if err := d.upload(b, c); err != nil {
		return err
	}
	return withStream(e, func(s1 *core.Stream) error {
		return withStream(e, func(s2 *core.Stream) error {
			ops := attention.Operands{Q: d.q, O: d.o, QOIndptr: d.qoIndptr, Pages: attention.PageTable{Indptr: d.indptr, Indices: d.idx, LastPageLen: d.last}}
			sched := attention.Schedule{QOIndptr: b.qoIndptr, KVIndptr: b.indptr, KVLastPageLen: b.last}
			small, _ := d.q.View(0, 64)
			tooBigQO := append([]int32(nil), b.qoIndptr...)
			tooBigQO[2] = tooBigQO[1] + int32(b.kvLen[1]) + 1 // more rows than tokens, causal
			badLast := append([]int32(nil), b.last...)
			badLast[0] = int32(c.page + 1)
			for _, m := range []struct {
				name string
				fn   func() error
				want error
			}{
				{"run before any plan", func() error { return a.Run(s1, d.cache, ops) }, core.ErrFailedPrecondition},
				{"plan: causal with more rows than tokens", func() error {
					return a.Plan(s1, attention.Schedule{QOIndptr: tooBigQO, KVIndptr: b.indptr, KVLastPageLen: b.last})
				}, core.ErrInvalidArgument},
				{"plan: last page length beyond the page", func() error {
					return a.Plan(s1, attention.Schedule{QOIndptr: b.qoIndptr, KVIndptr: b.indptr, KVLastPageLen: badLast})
				}, core.ErrInvalidArgument},
				{"plan: decode schedule for prefill", func() error {
					return a.Plan(s1, attention.Schedule{KVIndptr: b.indptr, KVLastPageLen: b.last})
				}, core.ErrInvalidArgument},
				{"plan", func() error { return a.Plan(s1, sched) }, nil},
				{"run on another stream than the plan's", func() error { return a.Run(s2, d.cache, ops) }, core.ErrFailedPrecondition},
				{"run with a q region too small", func() error {
					o := ops
					o.Q = small
					return a.Run(s1, d.cache, o)
				}, core.ErrOutOfRange},
				{"run with a nil page table", func() error {
					o := ops
					o.Pages.Indices = nil
					return a.Run(s1, d.cache, o)
				}, core.ErrInvalidArgument},
				{"run", func() error { return a.Run(s1, d.cache, ops) }, nil},
				{"append with a nil cache", func() error {
					return (*attention.KVCache)(nil).Append(s1, ops.Pages, 2, attention.KVRows{K: d.q, V: d.o, BatchIndices: d.indptr, Positions: d.indptr, NNZ: 1})
				}, core.ErrInvalidArgument},
			} {
				err := m.fn()
				if m.want == nil {
					if err != nil {
						return fmt.Errorf("%s: %w", m.name, err)
					}
					continue
				}
				if err := expect(m.name, err, m.want); err != nil {
					return err
				}
			}
			if err := s1.Synchronize(); err != nil {
				return err
			}
			if err := a.Close(); err != nil {
				return err
			}
			return expect("plan after close", a.Plan(s1, sched), core.ErrClosed)
		})
	})
}
