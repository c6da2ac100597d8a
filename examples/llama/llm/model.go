// SPDX-License-Identifier: Apache-2.0

// Package llm is a Llama-style decoder on gpurt: the model of
// examples/llama and of `gpurt bench --decoder`. Weights come from a counter
// hash of a seed (scripts/llama_torch.py makes the same ones), decode runs
// over a paged KV cache, eagerly or replayed as graphs.
package llm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/quant"
)

// Presets are the model sizes of the comparison (1b, 8b) and a
// tiny one for tests and the mock.
var Presets = map[string]Config{
	"tiny": {Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, Inter: 512, Vocab: 128, Theta: 10000},
	"1b":   {Layers: 16, Hidden: 2048, Heads: 32, KVHeads: 8, Inter: 8192, Vocab: 32000, Theta: 500000},
	"8b":   {Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, Inter: 14336, Vocab: 32000, Theta: 500000},
}

// Config is a Llama-style decoder: pre-norm blocks of grouped-query
// attention (rotary positions, paged KV cache) and a SiLU-gated MLP, bf16
// activations and weights (or int8 MLX-quantized linear weights), f32
// logits.
type Config struct {
	Layers, Hidden, Heads, KVHeads, Inter, Vocab int
	Theta                                        float64 // rotary base
	Eps                                          float32 // RMSNorm epsilon
	Seed                                         uint64
	Int8                                         bool   // int8 MLX weights for the blocks' linears (QuantMatmul)
	GroupSize                                    int    // int8 group size (0: 64)
	Rope                                         string // "neox" (half-split, as Hugging Face) or "llama" (interleaved)
	PageSize                                     int    // KV cache page (0: 16)
}

// HeadDim is Hidden / Heads.
func (c *Config) HeadDim() int { return c.Hidden / max(c.Heads, 1) }

func (c *Config) check() error {
	switch {
	case c.Layers <= 0 || c.Hidden <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Inter <= 0 || c.Vocab <= 1:
		return fmt.Errorf("llama: layers %d, hidden %d, heads %d, kv heads %d, intermediate %d must be positive and vocab %d above 1",
			c.Layers, c.Hidden, c.Heads, c.KVHeads, c.Inter, c.Vocab)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("llama: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("llama: heads %d is not a multiple of kv heads %d", c.Heads, c.KVHeads)
	case c.Rope != "neox" && c.Rope != "llama":
		return fmt.Errorf("llama: rope style %q is neither neox nor llama", c.Rope)
	case c.Theta <= 0 || c.Eps <= 0:
		return fmt.Errorf("llama: theta %g and eps %g must be positive", c.Theta, c.Eps)
	case c.Vocab > math.MaxInt32:
		return fmt.Errorf("llama: vocab %d exceeds int32", c.Vocab)
	}
	if c.Int8 {
		g := c.groupSize()
		if c.Hidden%g != 0 || c.Inter%g != 0 || c.Heads*c.HeadDim()%g != 0 {
			return fmt.Errorf("llama: int8 weights need hidden %d, intermediate %d and heads*head_dim multiples of the group size %d",
				c.Hidden, c.Inter, g)
		}
	}
	return nil
}

func (c *Config) groupSize() int {
	if c.GroupSize == 0 {
		return 64
	}
	return c.GroupSize
}

func (c *Config) pageSize() int {
	if c.PageSize == 0 {
		return 16
	}
	return c.PageSize
}

// linear is a weight matrix [out][in]: bf16 in w (for a pair, two
// matrices one after the other), or int8 MLX codes, scales and biases.
type linear struct {
	out, in    int
	w          core.Region
	qw, qs, qb core.Region
}

type layer struct {
	attnNorm, mlpNorm core.Region
	wq, wo, wd        linear
	wkv, wgu          linear // bf16: the pairs (K,V) and (gate,up), batched GEMMs
	wk, wv, wg, wu    linear // int8
	cache             *core.KVCache
}

// Model is a decoder on one device, with buffers for up to batch
// requests of up to maxLen tokens, and prefill of up to maxPrompt tokens
// per request.
type Model struct {
	cfg                          Config
	dev                          *core.Device
	s                            *core.Stream
	kRMS, kRope, kEmbed, kArgmax *core.Kernel
	kSilu, kAdd                  *core.Kernel
	embed, finalNorm             core.Region
	lm                           linear
	layers                       []layer
	owned                        []*core.Buffer
	caches                       []*core.KVCache

	batch, capBatch, maxT, maxPages int
	// activations, [tokens][features] row-major
	h, xn, q, kv, o, gu, act, tmp, hl, xl, logits *core.Buffer
	// int32 arrays
	ids, idsSaved, pos, bidx, indptr, indices, lastLen, qoIndptr *core.Buffer
	dec, pre                                                     *core.Attention
	graphs                                                       []*core.Graph
	hist                                                         map[int]core.PinnedView // decode step -> its tokens (pinned)
}

func (m *Model) alloc(n int) (*core.Buffer, error) {
	b, err := m.dev.Alloc(max(n, 16))
	if err != nil {
		return nil, err
	}
	m.owned = append(m.owned, b)
	return b, nil
}

// upload allocates a buffer holding data.
func (m *Model) upload(data []byte) (*core.Buffer, error) {
	b, err := m.alloc(len(data))
	if err == nil {
		err = core.CopyFromHost(b, data)
	}
	return b, err
}

func u16bytes(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], x)
	}
	return out
}

func i32bytes(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

func bytesI32(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// tensor uploads the bf16 tensors ts one after the other into one buffer.
func (m *Model) tensor(ts ...tensorSpec) (*core.Buffer, error) {
	n := 0
	for _, t := range ts {
		n += t.elems()
	}
	b, err := m.alloc(2 * n)
	if err != nil {
		return nil, err
	}
	off := 0
	for _, t := range ts {
		bits := make([]uint16, t.elems())
		genBF16(m.cfg.Seed, t, bits)
		v, err := b.View(off, 2*len(bits))
		if err == nil {
			err = core.CopyFromHost(v, u16bytes(bits))
		}
		if err != nil {
			return nil, fmt.Errorf("llama: %s: %w", t.name, err)
		}
		off += 2 * len(bits)
	}
	return b, nil
}

// quantized makes t's int8 MLX weights (quantized from its bf16 values).
func (m *Model) quantized(t tensorSpec) (linear, error) {
	q, err := quant.Quantize(genFloat(m.cfg.Seed, t), t.rows, t.cols, quant.Options{GroupSize: m.cfg.groupSize(), Bits: 8, ScaleType: core.BF16})
	if err != nil {
		return linear{}, fmt.Errorf("llama: quantizing %s: %w", t.name, err)
	}
	l := linear{out: t.rows, in: t.cols}
	for i, data := range [][]byte{q.Q, q.Scales, q.Biases} {
		b, err := m.upload(data)
		if err != nil {
			return linear{}, fmt.Errorf("llama: %s: %w", t.name, err)
		}
		switch i {
		case 0:
			l.qw = b
		case 1:
			l.qs = b
		case 2:
			l.qb = b
		}
	}
	return l, nil
}

// NewModel generates the weights on the host from cfg.Seed and uploads
// them, and allocates the KV caches and buffers for batch requests of up to
// maxLen tokens (context, prompt and generated), prompts up to maxPrompt.
func NewModel(dev *core.Device, cfg Config, batch, maxLen, maxPrompt int) (m *Model, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if batch <= 0 || maxLen <= 0 || maxPrompt < 1 || maxPrompt > maxLen {
		return nil, fmt.Errorf("llama: batch %d and max length %d must be positive, max prompt %d in 1 .. max length", batch, maxLen, maxPrompt)
	}
	m = &Model{cfg: cfg, dev: dev, batch: batch, capBatch: batch, maxT: batch * maxPrompt}
	defer func() {
		if err != nil {
			m.Close()
			m = nil
		}
	}()
	if m.s, err = dev.NewStream(); err != nil {
		return nil, err
	}
	mod, err := dev.BuiltinModule()
	if err != nil {
		return nil, err
	}
	for _, k := range []struct {
		dst  **core.Kernel
		name string
	}{{&m.kRMS, "rmsnorm_bf16"}, {&m.kRope, "rope_" + cfg.Rope + "_bf16"}, {&m.kEmbed, "embed_bf16"},
		{&m.kArgmax, "argmax_f32"}, {&m.kSilu, "silu_mul_bf16"}, {&m.kAdd, "add_bf16"}} {
		if *k.dst, err = mod.Kernel(k.name); err != nil {
			return nil, fmt.Errorf("llama: built-in kernel %s: %w", k.name, err)
		}
	}
	c := &m.cfg
	hd := c.HeadDim()
	if m.embed, err = m.tensor(c.embedTensor()); err != nil {
		return nil, err
	}
	if m.finalNorm, err = m.tensor(c.finalNormTensor()); err != nil {
		return nil, err
	}
	lm := c.lmHeadTensor()
	m.lm = linear{out: lm.rows, in: lm.cols}
	if m.lm.w, err = m.tensor(lm); err != nil {
		return nil, err
	}
	ps := c.pageSize()
	m.maxPages = (maxLen + ps - 1) / ps
	kvDesc := core.KVCacheDesc{DType: core.BF16, Layout: core.KVLayoutNHD, PageSize: ps, NumKVHeads: c.KVHeads,
		HeadDim: hd, NumPages: batch * m.maxPages}
	m.layers = make([]layer, c.Layers)
	for l := range m.layers {
		L := &m.layers[l]
		t := func(k int) tensorSpec { return c.layerTensor(l, k) }
		if L.attnNorm, err = m.tensor(t(tAttnNorm)); err != nil {
			return nil, err
		}
		if L.mlpNorm, err = m.tensor(t(tMLPNorm)); err != nil {
			return nil, err
		}
		if c.Int8 {
			for _, x := range []struct {
				dst *linear
				k   int
			}{{&L.wq, tWQ}, {&L.wk, tWK}, {&L.wv, tWV}, {&L.wo, tWO}, {&L.wg, tWG}, {&L.wu, tWU}, {&L.wd, tWD}} {
				if *x.dst, err = m.quantized(t(x.k)); err != nil {
					return nil, err
				}
			}
		} else {
			for _, x := range []struct {
				dst *linear
				ks  []int
			}{{&L.wq, []int{tWQ}}, {&L.wkv, []int{tWK, tWV}}, {&L.wo, []int{tWO}}, {&L.wgu, []int{tWG, tWU}}, {&L.wd, []int{tWD}}} {
				var specs []tensorSpec
				for _, k := range x.ks {
					specs = append(specs, t(k))
				}
				x.dst.out, x.dst.in = specs[0].rows, specs[0].cols
				if x.dst.w, err = m.tensor(specs...); err != nil {
					return nil, err
				}
			}
		}
		if L.cache, err = dev.AllocKVCache(kvDesc); err != nil {
			return nil, fmt.Errorf("llama: layer %d: KV cache of %d pages: %w", l, kvDesc.NumPages, err)
		}
		m.caches = append(m.caches, L.cache)
		if err = firstErr(core.Memset(L.cache.K(), 0), core.Memset(L.cache.V(), 0)); err != nil {
			return nil, err
		}
	}
	T, H, Q, KV, I := m.maxT, c.Hidden, c.Heads*hd, c.KVHeads*hd, c.Inter
	for _, b := range []struct {
		dst   **core.Buffer
		bytes int
	}{{&m.h, 2 * T * H}, {&m.xn, 2 * T * H}, {&m.q, 2 * T * Q}, {&m.kv, 2 * 2 * T * KV}, {&m.o, 2 * T * Q},
		{&m.gu, 2 * 2 * T * I}, {&m.act, 2 * T * I}, {&m.tmp, 2 * T * H}, {&m.hl, 2 * batch * H}, {&m.xl, 2 * batch * H},
		{&m.logits, 4 * batch * c.Vocab}, {&m.ids, 4 * T}, {&m.idsSaved, 4 * batch}, {&m.pos, 4 * T}, {&m.bidx, 4 * T},
		{&m.indptr, 4 * (batch + 1)}, {&m.indices, 4 * batch * m.maxPages}, {&m.lastLen, 4 * batch}, {&m.qoIndptr, 4 * (batch + 1)}} {
		if *b.dst, err = m.alloc(b.bytes); err != nil {
			return nil, err
		}
	}
	ad := core.AttentionDesc{Kind: core.AttentionDecode, NumQOHeads: c.Heads, Cache: kvDesc, MaxBatch: batch}
	if m.dec, err = dev.NewAttention(ad); err != nil {
		return nil, fmt.Errorf("llama: decode attention: %w", err)
	}
	if maxPrompt > 1 {
		ad.Kind, ad.Causal, ad.MaxRows = core.AttentionPrefill, true, T
		if m.pre, err = dev.NewAttention(ad); err != nil {
			return nil, fmt.Errorf("llama: prefill attention: %w", err)
		}
	}
	return m, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Close frees everything the model holds.
func (m *Model) Close() {
	if m == nil {
		return
	}
	if m.s != nil {
		_ = m.s.Synchronize()
	}
	for _, g := range m.graphs {
		_ = g.Close()
	}
	m.graphs = nil
	for _, a := range []*core.Attention{m.dec, m.pre} {
		if a != nil {
			_ = a.Close()
		}
	}
	m.dec, m.pre = nil, nil
	for _, c := range m.caches {
		_ = c.Free()
	}
	m.caches = nil
	for _, b := range m.owned {
		_ = b.Free()
	}
	m.owned = nil
	if m.s != nil {
		_ = m.s.Close()
		m.s = nil
	}
}

// SetBatch makes later Generate calls run b requests (at most the
// batch the model was made for); the captured graphs are dropped.
func (m *Model) SetBatch(b int) error {
	if b <= 0 || b > m.capBatch {
		return fmt.Errorf("llama: batch %d is outside 1 .. %d (the model's buffers)", b, m.capBatch)
	}
	if err := m.s.Synchronize(); err != nil {
		return err
	}
	for _, g := range m.graphs {
		if err := g.Close(); err != nil {
			return err
		}
	}
	m.graphs, m.batch = nil, b
	return nil
}

// view is bytes [off, off+n) of b (n > 0 inside b by construction).
func view(b *core.Buffer, off, n int) core.View {
	v, err := b.View(off, n)
	if err != nil {
		panic(fmt.Sprintf("llama: view %d+%d of a %d-byte buffer: %v", off, n, b.Len(), err))
	}
	return v
}

func rowBlock(cols int) uint32 {
	b := 32
	for b < 1024 && b*4 < cols {
		b *= 2
	}
	return uint32(b)
}

func grid(g int, block uint32) core.LaunchConfig {
	return core.LaunchConfig{Grid: [3]uint32{uint32(g), 1, 1}, Block: [3]uint32{block, 1, 1}}
}

func (m *Model) rmsnorm(s *core.Stream, y, x, w core.Region, rows int) error {
	H := m.cfg.Hidden
	return s.Launch(m.kRMS, grid(rows, rowBlock(H)), core.ArgBuffer(y), core.ArgBuffer(x), core.ArgBuffer(w),
		core.ArgF32(m.cfg.Eps), core.ArgU64(uint64(rows)), core.ArgU64(uint64(H)))
}

func (m *Model) rope(s *core.Stream, x core.Region, tokens, heads int) error {
	hd := m.cfg.HeadDim()
	n := tokens * heads * hd / 2
	return s.Launch(m.kRope, grid((n+255)/256, 256), core.ArgBuffer(x), core.ArgBuffer(view(m.pos, 0, 4*tokens)),
		core.ArgF32(float32(m.cfg.Theta)), core.ArgU64(uint64(tokens)), core.ArgU64(uint64(heads)), core.ArgU64(uint64(hd)))
}

// mm is y[T][out] = x[T][in] * W^T (plus y when residual): one GEMM for
// bf16 (pair: a batch of two, W and y each two matrices one after the
// other), QuantMatmul for int8 (a residual through tmp and add_T).
func (m *Model) mm(s *core.Stream, w linear, x, y core.Region, T int, residual, pair bool) error {
	if w.qw != nil {
		d := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, Bits: 8, GroupSize: m.cfg.groupSize(), M: w.out, N: T, K: w.in}
		if !residual {
			return matmul.Quant(s, d, matmul.QuantOperands{W: w.qw, Scales: w.qs, Biases: w.qb, X: x, Y: y})
		}
		t := view(m.tmp, 0, 2*T*w.out)
		return firstErr(matmul.Quant(s, d, matmul.QuantOperands{W: w.qw, Scales: w.qs, Biases: w.qb, X: x, Y: t}),
			s.Launch(m.kAdd, grid((T*w.out+255)/256, 256), core.ArgBuffer(y), core.ArgBuffer(y), core.ArgBuffer(t), core.ArgU64(uint64(T*w.out))))
	}
	d := core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.BF16, DType: core.BF16, TransA: true, M: w.out, N: T, K: w.in}
	if pair {
		d.Batch, d.StrideA, d.StrideD, d.StrideC = 2, int64(w.out*w.in), int64(T*w.out), int64(T*w.out)
	}
	ops := core.GemmOperands{A: w.w, B: x, D: y, Alpha: 1}
	if residual {
		ops.C, ops.Beta = y, 1
	}
	return s.Gemm(d, ops)
}

// partA: the attention block up to the attention (norm, QKV, rotary).
func (m *Model) partA(s *core.Stream, l, T int) error {
	c, L := &m.cfg, &m.layers[l]
	hd := c.HeadDim()
	Q, KV := c.Heads*hd, c.KVHeads*hd
	h, xn := view(m.h, 0, 2*T*c.Hidden), view(m.xn, 0, 2*T*c.Hidden)
	q, k, v := view(m.q, 0, 2*T*Q), view(m.kv, 0, 2*T*KV), view(m.kv, 2*T*KV, 2*T*KV)
	err := firstErr(m.rmsnorm(s, xn, h, L.attnNorm, T), m.mm(s, L.wq, xn, q, T, false, false))
	if err == nil && c.Int8 {
		err = firstErr(m.mm(s, L.wk, xn, k, T, false, false), m.mm(s, L.wv, xn, v, T, false, false))
	} else if err == nil {
		err = m.mm(s, L.wkv, xn, view(m.kv, 0, 4*T*KV), T, false, true)
	}
	if err == nil {
		err = firstErr(m.rope(s, q, T, c.Heads), m.rope(s, k, T, c.KVHeads))
	}
	if err != nil {
		return fmt.Errorf("llama: layer %d attention input: %w", l, err)
	}
	return nil
}

func (m *Model) pages() core.PageTable {
	return core.PageTable{Indptr: view(m.indptr, 0, 4*(m.batch+1)), Indices: m.indices, LastPageLen: view(m.lastLen, 0, 4*m.batch)}
}

// attend appends the layer's K and V rows and runs the attention (eager:
// graphs do not record attention).
func (m *Model) attend(s *core.Stream, l, T int, prefill bool) error {
	c, L := &m.cfg, &m.layers[l]
	hd := c.HeadDim()
	Q, KV := c.Heads*hd, c.KVHeads*hd
	pt := m.pages()
	rows := core.KVRows{K: view(m.kv, 0, 2*T*KV), V: view(m.kv, 2*T*KV, 2*T*KV), BatchIndices: view(m.bidx, 0, 4*T),
		Positions: view(m.pos, 0, 4*T), NNZ: T}
	a, ops := m.dec, core.AttentionOperands{Q: view(m.q, 0, 2*T*Q), O: view(m.o, 0, 2*T*Q), Pages: pt}
	if prefill {
		a, ops.QOIndptr = m.pre, view(m.qoIndptr, 0, 4*(m.batch+1))
	}
	if err := firstErr(s.AppendKV(L.cache, pt, m.batch, rows), s.RunAttention(a, L.cache, ops)); err != nil {
		return fmt.Errorf("llama: layer %d attention: %w", l, err)
	}
	return nil
}

// partB: the attention output projection and the MLP block.
func (m *Model) partB(s *core.Stream, l, T int) error {
	c, L := &m.cfg, &m.layers[l]
	Q, I := c.Heads*c.HeadDim(), c.Inter
	h, xn := view(m.h, 0, 2*T*c.Hidden), view(m.xn, 0, 2*T*c.Hidden)
	g, u, act := view(m.gu, 0, 2*T*I), view(m.gu, 2*T*I, 2*T*I), view(m.act, 0, 2*T*I)
	err := firstErr(m.mm(s, L.wo, view(m.o, 0, 2*T*Q), h, T, true, false), m.rmsnorm(s, xn, h, L.mlpNorm, T))
	if err == nil && c.Int8 {
		err = firstErr(m.mm(s, L.wg, xn, g, T, false, false), m.mm(s, L.wu, xn, u, T, false, false))
	} else if err == nil {
		err = m.mm(s, L.wgu, xn, view(m.gu, 0, 4*T*I), T, false, true)
	}
	if err == nil {
		err = firstErr(s.Launch(m.kSilu, grid((T*I+255)/256, 256), core.ArgBuffer(act), core.ArgBuffer(g), core.ArgBuffer(u), core.ArgU64(uint64(T*I))),
			m.mm(s, L.wd, act, h, T, true, false))
	}
	if err != nil {
		return fmt.Errorf("llama: layer %d mlp: %w", l, err)
	}
	return nil
}

func (m *Model) embedTokens(s *core.Stream, T int) error {
	H, V := m.cfg.Hidden, m.cfg.Vocab
	return s.Launch(m.kEmbed, grid((T*H+255)/256, 256), core.ArgBuffer(view(m.h, 0, 2*T*H)), core.ArgBuffer(m.embed),
		core.ArgBuffer(view(m.ids, 0, 4*T)), core.ArgU64(uint64(T)), core.ArgU64(uint64(H)), core.ArgU64(uint64(V)))
}

// head: final norm of hl, f32 logits, greedy tokens into ids[0:batch].
func (m *Model) head(s *core.Stream, hl core.Region) error {
	B, H, V := m.batch, m.cfg.Hidden, m.cfg.Vocab
	d := core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.F32, DType: core.F32, TransA: true, M: V, N: B, K: H}
	err := firstErr(m.rmsnorm(s, m.xl, hl, m.finalNorm, B),
		s.Gemm(d, core.GemmOperands{A: m.lm.w, B: m.xl, D: m.logits, Alpha: 1}),
		s.Launch(m.kArgmax, grid(B, rowBlock(V)), core.ArgBuffer(view(m.ids, 0, 4*B)), core.ArgBuffer(m.logits),
			core.ArgU64(uint64(B)), core.ArgU64(uint64(V))))
	if err != nil {
		return fmt.Errorf("llama: head: %w", err)
	}
	return nil
}

// schedule is the page table of batch requests of length n each
// (request b owns pages b*maxPages ..).
func (m *Model) schedule(n int) (indptr, indices, last []int32) {
	ps := m.cfg.pageSize()
	np := (n + ps - 1) / ps
	indptr = make([]int32, m.batch+1)
	last = make([]int32, m.batch)
	indices = make([]int32, 0, m.batch*np)
	for b := 0; b < m.batch; b++ {
		indptr[b+1] = int32((b + 1) * np)
		last[b] = int32(n - (np-1)*ps)
		for j := 0; j < np; j++ {
			indices = append(indices, int32(b*m.maxPages+j))
		}
	}
	return
}

// Run is what Generate returns: Tokens[step][request]; Logits[step] the
// f32 logits of every request ([request][vocab]) when collected;
// DecodeTime the wall time of the timed decode steps.
type Run struct {
	Tokens     [][]int32
	Logits     [][]float32
	DecodeTime time.Duration
	Decoded    int // decode steps timed
}

// GenOptions: the prompt (batch x P tokens; P 1 decodes from it at
// once, P > 1 prefills it) placed after Ctx tokens of zero K/V, Steps
// tokens generated per request (the prefill's counts as the first), Graph
// replays each step's graph segments, Collect reads logits every step.
type GenOptions struct {
	Prompt  []int32
	P, Ctx  int
	Steps   int
	Graph   bool
	Collect bool
}

type stager struct {
	hb  *core.HostBuffer
	off int
}

// put copies v into fresh pinned bytes and enqueues their upload to dst:
// each step's host data gets its own bytes, never rewritten while a copy
// may still read them.
func (st *stager) put(s *core.Stream, dst core.Region, v []int32) error {
	n := 4 * len(v)
	if st.off+n > st.hb.Len() {
		return errors.New("llama: pinned staging exhausted")
	}
	pv, err := st.hb.View(st.off, n)
	if err != nil {
		return err
	}
	copy(pv.Bytes(), i32bytes(v))
	st.off += n
	return s.CopyFromPinned(dst, pv)
}

// Generate runs the prompt and the decode steps.
func (m *Model) Generate(rt *core.Runtime, o GenOptions) (*Run, error) {
	B, s := m.batch, m.s
	if o.P < 1 || len(o.Prompt) != B*o.P || B*o.P > m.maxT || o.Ctx < 0 || o.Steps < 1 || (o.P > 1 && m.pre == nil) {
		return nil, fmt.Errorf("llama: prompt of %d tokens for %d requests of %d, context %d and %d steps do not fit the model's buffers",
			len(o.Prompt), B, o.P, o.Ctx, o.Steps)
	}
	for i, id := range o.Prompt {
		if id < 0 || int(id) >= m.cfg.Vocab {
			return nil, fmt.Errorf("llama: prompt token %d is %d, outside the vocab of %d", i, id, m.cfg.Vocab)
		}
	}
	if o.Ctx+o.P+o.Steps > m.maxPages*m.cfg.pageSize() {
		return nil, fmt.Errorf("llama: context %d + prompt %d + steps %d exceed the cache's %d tokens per request",
			o.Ctx, o.P, o.Steps, m.maxPages*m.cfg.pageSize())
	}
	perStep := 4 * (4*B + 4 + B*m.maxPages)
	hb, err := rt.AllocHost(perStep*(o.Steps+2) + 4*3*m.maxT)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Synchronize(); _ = hb.Free() }()
	st := &stager{hb: hb}
	run := &Run{}
	if o.Ctx > 0 { // the context is zero K/V: clear what earlier runs appended
		for _, c := range m.caches {
			if err := firstErr(s.Memset(c.K(), 0), s.Memset(c.V(), 0)); err != nil {
				return nil, err
			}
		}
	}
	collect := func() error {
		ids := make([]byte, 4*B)
		if err := firstErr(s.Synchronize(), core.CopyToHost(ids, view(m.ids, 0, 4*B))); err != nil {
			return err
		}
		run.Tokens = append(run.Tokens, bytesI32(ids))
		if o.Collect {
			raw := make([]byte, 4*B*m.cfg.Vocab)
			if err := core.CopyToHost(raw, view(m.logits, 0, len(raw))); err != nil {
				return err
			}
			lg := make([]float32, B*m.cfg.Vocab)
			for i := range lg {
				lg[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			run.Logits = append(run.Logits, lg)
		}
		return nil
	}
	bidx := make([]int32, B*o.P)
	pos := make([]int32, B*o.P)
	for i := range bidx {
		bidx[i], pos[i] = int32(i/o.P), int32(o.Ctx+i%o.P)
	}
	steps := o.Steps
	n := o.Ctx // tokens in the cache
	if o.P > 1 {
		T := B * o.P
		n += o.P
		indptr, indices, last := m.schedule(n)
		qo := make([]int32, B+1)
		for b := range qo {
			qo[b] = int32(b * o.P)
		}
		err := firstErr(st.put(s, view(m.ids, 0, 4*T), o.Prompt), st.put(s, view(m.bidx, 0, 4*T), bidx),
			st.put(s, view(m.pos, 0, 4*T), pos), st.put(s, view(m.indptr, 0, 4*(B+1)), indptr),
			st.put(s, view(m.indices, 0, 4*len(indices)), indices), st.put(s, view(m.lastLen, 0, 4*B), last),
			st.put(s, view(m.qoIndptr, 0, 4*(B+1)), qo),
			s.PlanAttention(m.pre, core.AttentionSchedule{QOIndptr: qo, KVIndptr: indptr, KVLastPageLen: last}),
			m.embedTokens(s, T))
		for l := 0; err == nil && l < m.cfg.Layers; l++ {
			err = firstErr(m.partA(s, l, T), m.attend(s, l, T, true), m.partB(s, l, T))
		}
		for b := 0; err == nil && b < B; b++ {
			err = s.CopyDevice(view(m.hl, 2*b*m.cfg.Hidden, 2*m.cfg.Hidden), view(m.h, 2*(b*o.P+o.P-1)*m.cfg.Hidden, 2*m.cfg.Hidden))
		}
		if err == nil {
			err = m.head(s, m.hl)
		}
		if err == nil {
			err = collect()
		}
		if err != nil {
			return nil, fmt.Errorf("llama: prefill: %w", err)
		}
		steps--
	} else if err := st.put(s, view(m.ids, 0, 4*B), o.Prompt); err != nil {
		return nil, err
	}
	seq := make([]int32, B)
	for b := range seq {
		seq[b] = int32(b)
	}
	if err := st.put(s, view(m.bidx, 0, 4*B), seq); err != nil {
		return nil, err
	}
	if o.Graph && len(m.graphs) == 0 {
		if err := m.capture(); err != nil {
			return nil, err
		}
	}
	hl := view(m.h, 0, 2*B*m.cfg.Hidden)
	t0 := time.Now()
	for i := 0; i < steps; i++ {
		p := make([]int32, B)
		for b := range p {
			p[b] = int32(n)
		}
		n++
		indptr, indices, last := m.schedule(n)
		err := firstErr(st.put(s, view(m.pos, 0, 4*B), p), st.put(s, view(m.indptr, 0, 4*(B+1)), indptr),
			st.put(s, view(m.indices, 0, 4*len(indices)), indices), st.put(s, view(m.lastLen, 0, 4*B), last),
			s.PlanAttention(m.dec, core.AttentionSchedule{KVIndptr: indptr, KVLastPageLen: last}))
		if err == nil && o.Graph {
			err = m.graphs[0].Launch(s)
			for l := 0; err == nil && l < m.cfg.Layers; l++ {
				err = firstErr(m.attend(s, l, B, false), m.graphs[l+1].Launch(s))
			}
		} else if err == nil {
			err = m.embedTokens(s, B)
			for l := 0; err == nil && l < m.cfg.Layers; l++ {
				err = firstErr(m.partA(s, l, B), m.attend(s, l, B, false), m.partB(s, l, B))
			}
			if err == nil {
				err = m.head(s, hl)
			}
		}
		if err == nil && (o.Collect || i == steps-1) {
			err = collect()
		} else if err == nil {
			// tokens are kept on the device: copy them out without a
			// synchronization (read back after the loop)
			err = m.keep(s, st, i)
		}
		if err != nil {
			return nil, fmt.Errorf("llama: decode step %d: %w", i, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	run.DecodeTime, run.Decoded = time.Since(t0), steps
	if err := m.unkeep(st, run); err != nil {
		return nil, err
	}
	return run, nil
}

// capture records the decode step's graph segments: embed + layer 0's
// input; each layer's output and the next layer's input; the last layer's
// output and the head.
func (m *Model) capture() error {
	B, L := m.batch, m.cfg.Layers
	hl := view(m.h, 0, 2*B*m.cfg.Hidden)
	for i := 0; i <= L; i++ {
		g, err := m.s.Capture(func(cs *core.Stream) error {
			if i == 0 {
				return firstErr(m.embedTokens(cs, B), m.partA(cs, 0, B))
			}
			if err := m.partB(cs, i-1, B); err != nil {
				return err
			}
			if i < L {
				return m.partA(cs, i, B)
			}
			return m.head(cs, hl)
		})
		if err != nil {
			return fmt.Errorf("llama: capturing graph segment %d: %w", i, err)
		}
		m.graphs = append(m.graphs, g)
	}
	return nil
}

// keep: tokens of step i go to the pinned history (read after the loop).
func (m *Model) keep(s *core.Stream, st *stager, i int) error {
	if m.hist == nil {
		m.hist = map[int]core.PinnedView{}
	}
	n := 4 * m.batch
	if st.off+n > st.hb.Len() {
		return errors.New("llama: pinned staging exhausted")
	}
	pv, err := st.hb.View(st.off, n)
	if err != nil {
		return err
	}
	st.off += n
	m.hist[i] = pv
	return s.CopyToPinned(pv, view(m.ids, 0, n))
}

func (m *Model) unkeep(st *stager, run *Run) error {
	if len(m.hist) == 0 {
		return nil
	}
	// the steps kept on the device come before the last one collected
	last := run.Tokens[len(run.Tokens)-1]
	run.Tokens = run.Tokens[:len(run.Tokens)-1]
	for i := 0; i < len(m.hist); i++ {
		pv, ok := m.hist[i]
		if !ok {
			return fmt.Errorf("llama: step %d's tokens were not kept", i)
		}
		run.Tokens = append(run.Tokens, bytesI32(pv.Bytes()))
	}
	run.Tokens = append(run.Tokens, last)
	m.hist = nil
	return nil
}

// bf16 helpers for the reference and the output.
func bf16(v float32) float32 { return floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(v)) }
