// SPDX-License-Identifier: Apache-2.0

// Package llm is a Llama-style decoder on gpurt: the model of
// examples/llama and of examples/decoderbench. Weights come from a
// Hugging Face checkpoint (Load: Llama, Mistral and Qwen2 safetensors) or
// from a counter hash of a seed (NewModel; scripts/llama_torch.py makes the
// same ones). Prefill takes ragged prompts over a paged KV cache, Decode
// one token per request at each request's own position, eagerly or
// replayed as graphs, greedy or sampled; Generate runs a request set.
package llm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/le"
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
// logits (bf16 with Int8Head). ReadConfig makes one from a Hugging Face
// config.json.
type Config struct {
	Layers, Hidden, Heads, KVHeads, Inter, Vocab int
	Theta                                        float64 // rotary base
	Eps                                          float32 // RMSNorm epsilon
	Seed                                         uint64
	Int8                                         bool   // int8 MLX weights for the blocks' linears (matmul.Quant)
	GroupSize                                    int    // int8 group size (0: 64)
	Rope                                         string // "neox" (half-split, as Hugging Face) or "llama" (interleaved)
	PageSize                                     int    // KV cache page (0: 16)

	HeadSize      int          // head_dim when it is not Hidden / Heads (0: Hidden / Heads)
	QKVBias       bool         // q, k and v projections have biases (Qwen2)
	OBias         bool         // the output projection has a bias (attention_bias)
	Tied          bool         // the LM head is the embedding (tie_word_embeddings)
	Scaling       *RopeScaling // nil: plain rotary frequencies
	MaxPositions  int          // max_position_embeddings (0: unknown)
	SlidingWindow int          // 0: none; else sequences must fit in it
	Family        string       // llama, mistral, qwen2 (from config.json), "" for the seeded presets
	// Int8Head (with Int8): the LM head int8 too, as MLX and gpt-fast's
	// int8 quantize every linear: half of the head's bytes a step, and
	// bf16 logits (matmul.Quant's output type; Logits widens them).
	Int8Head bool
}

// HeadDim is HeadSize, or Hidden / Heads.
func (c *Config) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.Hidden / max(c.Heads, 1)
}

func (c *Config) check() error {
	switch {
	case c.Layers <= 0 || c.Hidden <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Inter <= 0 || c.Vocab <= 1:
		return fmt.Errorf("llm: layers %d, hidden %d, heads %d, kv heads %d, intermediate %d must be positive and vocab %d above 1",
			c.Layers, c.Hidden, c.Heads, c.KVHeads, c.Inter, c.Vocab)
	case c.HeadSize == 0 && c.Hidden%c.Heads != 0:
		return fmt.Errorf("llm: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	case c.HeadSize < 0 || c.HeadDim()%2 != 0:
		return fmt.Errorf("llm: head dim %d is not a positive even number", c.HeadDim())
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("llm: heads %d is not a multiple of kv heads %d", c.Heads, c.KVHeads)
	case c.Rope != "neox" && c.Rope != "llama":
		return fmt.Errorf("llm: rope style %q is neither neox nor llama", c.Rope)
	case c.Scaling != nil && c.Rope != "neox":
		return fmt.Errorf("llm: rope scaling %q needs the neox rope style", c.Scaling.Type)
	case c.Theta <= 0 || c.Eps <= 0:
		return fmt.Errorf("llm: theta %g and eps %g must be positive", c.Theta, c.Eps)
	case c.Vocab > math.MaxInt32:
		return fmt.Errorf("llm: vocab %d exceeds int32", c.Vocab)
	}
	if c.Int8Head && !c.Int8 {
		return fmt.Errorf("llm: an int8 LM head needs int8 weights (Int8)")
	}
	if c.Int8 {
		g := c.groupSize()
		if c.Hidden%g != 0 || c.Inter%g != 0 || c.Heads*c.HeadDim()%g != 0 {
			return fmt.Errorf("llm: int8 weights need hidden %d, intermediate %d and heads*head_dim multiples of the group size %d",
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
// matrices one after the other), or int8 MLX codes, scales and biases;
// bias (out bf16 values, optional) is added to the product.
type linear struct {
	out, in    int
	w          core.Region
	qw, qs, qb core.Region
	bias       core.Region
}

type layer struct {
	attnNorm, mlpNorm core.Region
	wq, wo, wd        linear
	wkv, wgu          linear // bf16: the pairs (K,V) and (gate,up), batched GEMMs
	wk, wv, wg, wu    linear // int8 (and K, V with biases)
	// One token (T = 1): Q, K and V as one GEMM of Q+2KV rows, gate and up
	// as one of 2I rows: their weights are one allocation, rows one after
	// the other (wq, wkv / wk, wv, wg, wu are views of it), so the
	// product of the concatenation is the outputs one after the other, as
	// the activations lie. Unset (w and qw nil) where not fused: K and V
	// with biases.
	wqkv, wgu1 linear
	cache      *attention.KVCache
}

// Model is a decoder on one device, with buffers for up to batch
// requests of up to maxLen tokens each, and prefills of up to
// batch*maxPrompt tokens in all. Requests have their own lengths
// (positions): Prefill appends ragged prompts, Decode one token to each.
// A Model is used from one goroutine at a time.
type Model struct {
	cfg                          Config
	dev                          *core.Device
	rt                           *core.Runtime
	s                            *core.Stream
	kRMS, kRope, kEmbed, kArgmax *core.Kernel
	kSilu, kAdd, kMul, kSample   *core.Kernel
	logitsType                   core.DType // F32, or BF16 with an int8 head (Config.Int8Head)
	embed, finalNorm             core.Region
	lm                           linear
	layers                       []layer
	owned                        []*core.Buffer
	caches                       []*attention.KVCache

	// kAddNorm is add_rmsnorm_bf16, nil where the plugin lacks it (it came
	// after ABI 1.8): the int8 blocks' residual adds then run as add_T.
	kAddNorm *core.Kernel
	// kRopeF is rope_neox_freqs_bf16 (the same kind): with rope scaling,
	// one launch from invFreq (the step's inv_freq, f32) instead of the
	// cos/sin tables, rotate_half GEMM and three element-wise kernels.
	kRopeF  *core.Kernel
	invFreq *core.Buffer
	invLast []float32 // the inv_freq invFreq holds (nil: none yet)
	invKey  int       // the length invLast was computed for, 0 when it does not depend on it (putRope)
	// proNorm and proSwiGLU: the plugin runs the one-token bf16
	// projections with a GEMM prologue (ABI 1.10; probePrologues): the
	// attention and MLP norms inside the QKV and gate/up GEMMs
	// (RMSNormB, reading h), silu(g)*u inside the down GEMM (SwiGLUB,
	// reading gu), so that a decode step of batch 1 launches no norm or
	// silu_mul kernel between two layers.
	proNorm, proSwiGLU bool
	// pf: Options.PrefetchL2MiB's kernel and per-layer launches (nil: off).
	pf *prefetcher
	// ropeAppend: the layers' KV appends rotate q and K on the way in
	// (ABI 1.10, KVRows.InvFreq; probeRopeAppend) in place of the
	// rope_neox_freqs_T launch: the same arithmetic, one launch fewer a
	// layer at every batch. Only where the rotation runs on invFreq
	// (rope scaling with rope_neox_freqs_T).
	ropeAppend bool

	batch, capBatch, maxT, maxPages int
	lens                            []int // tokens in the cache per request
	// activations, [tokens][features] row-major
	// qkv: a step of T tokens has q [T][Q], then k [T][KV], then v
	// [T][KV] (Model.qkv), so that one token's q, k and v are one GEMM's
	// output.
	h, xn, qkvb, o, gu, act, tmp, hl, xl, logits *core.Buffer
	// int32 arrays: a step's inputs, regions of one device block (in)
	// uploaded by one copy a step (stepStage)
	in                                                 *core.Buffer
	ids, pos, bidx, indptr, indices, lastLen, qoIndptr core.View
	// rpos: a step of T > 1 tokens' positions per row of its q and k
	// heads (T*Heads rows of q, then T*KVHeads of k), so that one rotary
	// launch covers both (putPos).
	rpos core.View
	// scaled rope: cos/sin tables of q and k, two scratch buffers, the
	// signed half-swap matrix, bf16 ones (bias of int8 linears)
	cosQ, sinQ, cosK, sinK, rotA, rotB, ones *core.Buffer
	// qkvIdx (int8 weights, batch > 1, fused QKV): embed_bf16's row ids
	// that move a step of batch tokens' fused QKV output ([T][Q+2KV], in
	// rows of qkvUnit elements) into qkvb's layout (qkvSplit).
	qkvIdx               *core.Buffer
	qkvUnit              int
	swap                 linear
	dec, pre             *attention.Attention
	graphs               map[graphKey]*stepGraph
	captures, recaptures int // GraphCaptures, GraphRecaptures
	// host time inside the step graphs' launch calls (launchStep, capture
	// excluded) and inside Decode's attention plan, since the model was
	// made: Generate's Run.LaunchTime and Run.PlanTime are their growth;
	// stageTime likewise, the step's inputs computed and uploaded (Decode's
	// schedule through its one copy, less the wait for a free half)
	launchTime, planTime, stageTime time.Duration
	stage                           *stepStage
	recordable                      map[string]bool // op kind -> the plugin records it (probed once)
	// scratch is Decode's host arrays, kept between steps (a step
	// allocates nothing for them once the batch was seen)
	scratch struct {
		lens                                  []int
		pos, seq, indptr, indices, last, rpos []int32
	}
	// sched: the page counts per request the scratch page table (indptr,
	// indices) was built for, and its version, counted from 1 at each
	// rebuild (schedule)
	sched struct {
		pages []int
		ver   uint64
	}

	// LoadStats are the figures of Load (zero for NewModel).
	LoadStats LoadStats
	uploaded  time.Time // the weights' copies done
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

// tensor uploads the bf16 tensors ts one after the other into one buffer.
func (m *Model) tensor(up *uploader, ts ...tensorSpec) (*core.Buffer, error) {
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
		if err := up.put(b, off, t); err != nil {
			return nil, fmt.Errorf("llm: %s: %w", t.name, err)
		}
		off += 2 * t.elems()
	}
	return b, nil
}

// quantized makes t's int8 MLX weights (quantized from its bf16 values).
func (m *Model) quantized(up *uploader, t tensorSpec) (linear, error) {
	l, _, err := m.quantizedCat(up, t)
	return l, err
}

// quantizedCat quantizes the tensors ts (of one column count) and uploads
// their codes, scales and biases each one after the other: the whole
// (rows added) and each tensor's part, views of it. Groups run along a
// row, so the concatenation of rows quantizes as the parts do.
func (m *Model) quantizedCat(up *uploader, ts ...tensorSpec) (linear, []linear, error) {
	var codes, scales, biases []byte
	parts := make([]linear, len(ts))
	rows := 0
	for i, t := range ts {
		f, err := up.src.floats(t)
		if err != nil {
			return linear{}, nil, err
		}
		q, err := quantizeRows(f, t.rows, t.cols, quant.Options{GroupSize: m.cfg.groupSize(), Bits: 8, ScaleType: core.BF16})
		if err != nil {
			return linear{}, nil, fmt.Errorf("llm: quantizing %s: %w", t.name, err)
		}
		if len(ts) == 1 {
			codes, scales, biases = q.Q, q.Scales, q.Biases
		} else {
			codes, scales, biases = append(codes, q.Q...), append(scales, q.Scales...), append(biases, q.Biases...)
		}
		parts[i] = linear{out: t.rows, in: t.cols}
		rows += t.rows
	}
	l := linear{out: rows, in: ts[0].cols}
	for i, data := range [][]byte{codes, scales, biases} {
		b, err := m.upload(data)
		if err != nil {
			return linear{}, nil, fmt.Errorf("llm: %s: %w", ts[0].name, err)
		}
		off := 0
		for j := range parts {
			n := len(data) * parts[j].out / rows
			p := view(b, off, n)
			off += n
			switch i {
			case 0:
				parts[j].qw = p
			case 1:
				parts[j].qs = p
			case 2:
				parts[j].qb = p
			}
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
	for _, t := range ts {
		up.advance(int64(2 * t.elems()))
	}
	if len(ts) == 1 {
		parts[0] = l
	}
	return l, parts, nil
}

// quantizeRows is quant.Quantize over stretches of rows in parallel (its
// groups run along a row, row-major: the stretches' outputs, one after
// the other, are the whole matrix's).
func quantizeRows(f []float32, rows, cols int, o quant.Options) (*quant.Weights, error) {
	n := min(runtime.GOMAXPROCS(0), rows, max(1, rows*cols/(1<<20)))
	if n <= 1 {
		return quant.Quantize(f, rows, cols, o)
	}
	parts := make([]*quant.Weights, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*rows/n, (i+1)*rows/n
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], errs[i] = quant.Quantize(f[lo*cols:hi*cols], hi-lo, cols, o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := *parts[0]
	out.Rows = rows
	for _, p := range parts[1:] {
		out.Q = append(out.Q, p.Q...)
		out.Scales = append(out.Scales, p.Scales...)
		out.Biases = append(out.Biases, p.Biases...)
	}
	return &out, nil
}

// NewModel generates the weights on the host from cfg.Seed and uploads
// them, and allocates the KV caches and buffers for batch requests of up to
// maxLen tokens (context, prompt and generated), prompts up to maxPrompt.
func NewModel(dev *core.Device, cfg Config, batch, maxLen, maxPrompt int) (m *Model, err error) {
	return newModel(dev, cfg, seedSource{cfg.Seed}, Options{Batch: batch, MaxLen: maxLen, MaxPrompt: maxPrompt})
}

// NewModelWith is NewModel with its options (Int8 aside: cfg.Int8 says it).
func NewModelWith(dev *core.Device, cfg Config, o Options) (*Model, error) {
	return newModel(dev, cfg, seedSource{cfg.Seed}, o)
}

// Options size a model's buffers: Batch requests of up to MaxLen tokens
// (context, prompt and generated) each, prefills of up to Batch*MaxPrompt
// tokens in all; Progress (optional) is called as weights upload.
type Options struct {
	Batch, MaxLen, MaxPrompt int
	Int8                     bool // quantize the blocks' linears to int8 (MLX affine, group 64) at load
	Int8Head                 bool // with Int8, the LM head too (Config.Int8Head)
	Progress                 func(done, total int64)
	// Unfused builds the model as on a plugin without the built-in kernels
	// that came after ABI 1.8 (add_rmsnorm_T, rope_neox_freqs_T) and
	// without GEMM prologues (NoPrologues): the same tokens, more
	// launches; to measure what they save.
	Unfused bool
	// NoPrologues builds the model without GEMM prologues (ABI 1.10): at
	// batch 1 the norms and silu_mul run as kernels of their own, as on a
	// plugin that refuses them. The same bits on the mock (its prologues
	// round as the kernels they replace), nearly the same tokens on CUDA
	// (its GEMV does not round the normalized values to bf16), three more
	// launches a layer; to measure what they save.
	NoPrologues bool
	// NoRopeAppend builds the model without the rotary embedding in the
	// KV append (ABI 1.10): rope_neox_freqs_T rotates q and k in a launch
	// of its own, as on a plugin that refuses it. The same bits, one more
	// launch a layer; to measure what it saves. Unfused implies it.
	NoRopeAppend bool
	// PrefetchL2MiB > 0 asks the L2, just before each layer's decode
	// attention, for up to that many MiB of the layer's output projection
	// and gate/up weights (prefetch.go): HBM idles while a small batch's
	// attention runs. The same results; CUDA on sm_90 or newer only (its
	// kernel is PTX), refused elsewhere.
	PrefetchL2MiB int
}

func newModel(dev *core.Device, cfg Config, src source, o Options) (m *Model, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	batch, maxLen, maxPrompt := o.Batch, o.MaxLen, o.MaxPrompt
	if batch <= 0 || maxLen <= 0 || maxPrompt < 1 || maxPrompt > maxLen {
		return nil, fmt.Errorf("llm: batch %d and max length %d must be positive, max prompt %d in 1 .. max length", batch, maxLen, maxPrompt)
	}
	if cfg.SlidingWindow > 0 && maxLen > cfg.SlidingWindow {
		return nil, fmt.Errorf("llm: max length %d exceeds the model's sliding window %d (sliding-window attention is not implemented)", maxLen, cfg.SlidingWindow)
	}
	m = &Model{cfg: cfg, dev: dev, rt: dev.Runtime(), batch: batch, capBatch: batch, maxT: batch * maxPrompt, lens: make([]int, batch),
		logitsType: core.F32}
	if cfg.Int8Head {
		m.logitsType = core.BF16
	}
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
		{&m.kArgmax, "argmax_" + m.logitsType.String()}, {&m.kSilu, "silu_mul_bf16"}, {&m.kAdd, "add_bf16"},
		{&m.kMul, "mul_bf16"}, {&m.kSample, "sample_" + m.logitsType.String()}} {
		if *k.dst, err = mod.Kernel(k.name); err != nil {
			return nil, fmt.Errorf("llm: built-in kernel %s: %w", k.name, err)
		}
	}
	for _, k := range []struct {
		dst  **core.Kernel
		name string
	}{{&m.kAddNorm, "add_rmsnorm_bf16"}, {&m.kRopeF, "rope_neox_freqs_bf16"}} {
		if *k.dst, err = mod.Kernel(k.name); errors.Is(err, core.ErrNotFound) || o.Unfused {
			*k.dst, err = nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("llm: built-in kernel %s: %w", k.name, err)
		}
	}
	c := &m.cfg
	hd := c.HeadDim()
	specs := c.specs()
	var total int64
	for _, t := range specs {
		total += int64(2 * t.elems())
	}
	if c.Int8Head && c.Tied { // the embedding read a second time, for the int8 head
		total += int64(2 * c.embedTensor().elems())
	}
	up, err := newUploader(m.rt, m.s, src, total, o.Progress)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := up.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if m.embed, err = m.tensor(up, c.embedTensor()); err != nil {
		return nil, err
	}
	if m.finalNorm, err = m.tensor(up, c.finalNormTensor()); err != nil {
		return nil, err
	}
	lm := c.lmHeadTensor()
	m.lm = linear{out: lm.rows, in: lm.cols, w: m.embed}
	switch {
	case c.Int8Head: // quantized from the head's bf16 values (the embedding's when tied)
		src := lm
		if c.Tied {
			src = c.embedTensor()
		}
		if m.lm, err = m.quantized(up, src); err != nil {
			return nil, err
		}
	case !c.Tied:
		if m.lm.w, err = m.tensor(up, lm); err != nil {
			return nil, err
		}
	}
	ps := c.pageSize()
	m.maxPages = (maxLen + ps - 1) / ps
	kvDesc := attention.KVCacheDesc{DType: core.BF16, Layout: attention.KVLayoutNHD, PageSize: ps, NumKVHeads: c.KVHeads,
		HeadDim: hd, NumPages: batch * m.maxPages}
	m.layers = make([]layer, c.Layers)
	for l := range m.layers {
		L := &m.layers[l]
		t := func(k int) tensorSpec { return c.layerTensor(l, k) }
		if L.attnNorm, err = m.tensor(up, t(tAttnNorm)); err != nil {
			return nil, err
		}
		if L.mlpNorm, err = m.tensor(up, t(tMLPNorm)); err != nil {
			return nil, err
		}
		if c.Int8 {
			for _, x := range []struct {
				dst *linear
				k   int
			}{{&L.wo, tWO}, {&L.wd, tWD}} {
				if *x.dst, err = m.quantized(up, t(x.k)); err != nil {
					return nil, err
				}
			}
			// Q, K, V and gate, up: one allocation each (the one-token
			// GEMMs), parts as views; with Q/K/V biases no QKV fusion.
			var parts []linear
			if c.QKVBias {
				for _, x := range []struct {
					dst *linear
					k   int
				}{{&L.wq, tWQ}, {&L.wk, tWK}, {&L.wv, tWV}} {
					if *x.dst, err = m.quantized(up, t(x.k)); err != nil {
						return nil, err
					}
				}
			} else if L.wqkv, parts, err = m.quantizedCat(up, t(tWQ), t(tWK), t(tWV)); err != nil {
				return nil, err
			} else {
				L.wq, L.wk, L.wv = parts[0], parts[1], parts[2]
			}
			if L.wgu1, parts, err = m.quantizedCat(up, t(tWG), t(tWU)); err != nil {
				return nil, err
			}
			L.wg, L.wu = parts[0], parts[1]
		} else {
			kv := []*linear{&L.wkv}
			kvk := [][]int{{tWK, tWV}}
			if c.QKVBias { // K and V each with its bias: two GEMMs
				kv, kvk = []*linear{&L.wk, &L.wv}, [][]int{{tWK}, {tWV}}
			}
			for i, x := range []struct {
				dst *linear
				ks  []int
			}{{&L.wq, []int{tWQ}}, {kv[0], kvk[0]}, {nil, nil}, {&L.wo, []int{tWO}}, {&L.wgu, []int{tWG, tWU}}, {&L.wd, []int{tWD}}} {
				if i == 2 {
					if len(kv) == 1 {
						continue
					}
					x.dst, x.ks = kv[1], kvk[1]
				}
				var sp []tensorSpec
				for _, k := range x.ks {
					sp = append(sp, t(k))
				}
				x.dst.out, x.dst.in = sp[0].rows, sp[0].cols
				if i == 0 && len(kv) == 1 { // Q, K, V one after the other
					sp = append(sp, t(tWK), t(tWV))
					b, err := m.tensor(up, sp...)
					if err != nil {
						return nil, err
					}
					qb := 2 * sp[0].elems()
					L.wq.w, L.wkv.w = view(b, 0, qb), view(b, qb, b.Len()-qb)
					L.wqkv = linear{out: sp[0].rows + sp[1].rows + sp[2].rows, in: sp[0].cols, w: b}
					continue
				}
				if i == 1 && len(kv) == 1 {
					x.dst.out, x.dst.in = sp[0].rows, sp[0].cols // its weights came with Q's
					continue
				}
				if x.dst.w, err = m.tensor(up, sp...); err != nil {
					return nil, err
				}
			}
			L.wgu1 = linear{out: 2 * L.wgu.out, in: L.wgu.in, w: L.wgu.w}
		}
		for _, b := range []struct {
			on  bool
			dst *linear
			k   int
		}{{c.QKVBias, &L.wq, tBQ}, {c.QKVBias, &L.wk, tBK}, {c.QKVBias, &L.wv, tBV}, {c.OBias, &L.wo, tBO}} {
			if b.on {
				if b.dst.bias, err = m.tensor(up, t(b.k)); err != nil {
					return nil, err
				}
			}
		}
		if L.cache, err = attention.AllocKVCache(dev, kvDesc); err != nil {
			return nil, fmt.Errorf("llm: layer %d: KV cache of %d pages: %w", l, kvDesc.NumPages, err)
		}
		m.caches = append(m.caches, L.cache)
		if err = firstErr(core.Memset(L.cache.K(), 0), core.Memset(L.cache.V(), 0)); err != nil {
			return nil, err
		}
	}
	if err := up.finish(); err != nil {
		return nil, err
	}
	m.uploaded = time.Now()
	T, H, Q, KV, I := m.maxT, c.Hidden, c.Heads*hd, c.KVHeads*hd, c.Inter
	tmpQKV := 0 // the int8 decode step's fused QKV output (qkvSplit)
	if c.Int8 && !c.QKVBias && batch > 1 {
		tmpQKV = Q + 2*KV
	}
	bufs := []struct {
		dst   **core.Buffer
		bytes int
	}{{&m.h, 2 * T * H}, {&m.xn, 2 * T * H}, {&m.qkvb, 2 * T * (Q + 2*KV)}, {&m.o, 2 * T * Q},
		{&m.gu, 2 * 2 * T * I}, {&m.act, 2 * T * I}, {&m.tmp, 2 * T * max(H, Q, KV, tmpQKV)}, {&m.hl, 2 * batch * H}, {&m.xl, 2 * batch * H},
		{&m.logits, 4 * batch * c.Vocab}}
	if c.Scaling != nil && m.kRopeF != nil {
		bufs = append(bufs, struct {
			dst   **core.Buffer
			bytes int
		}{&m.invFreq, 4 * (hd / 2)})
	} else if c.Scaling != nil {
		bufs = append(bufs, []struct {
			dst   **core.Buffer
			bytes int
		}{{&m.cosQ, 2 * T * Q}, {&m.sinQ, 2 * T * Q}, {&m.cosK, 2 * T * KV}, {&m.sinK, 2 * T * KV},
			{&m.rotA, 2 * T * Q}, {&m.rotB, 2 * T * Q}}...)
	}
	if c.Int8 && (c.QKVBias || c.OBias) {
		bufs = append(bufs, struct {
			dst   **core.Buffer
			bytes int
		}{&m.ones, 2 * T})
	}
	for _, b := range bufs {
		if *b.dst, err = m.alloc(b.bytes); err != nil {
			return nil, err
		}
	}
	if err := m.allocInputs(); err != nil {
		return nil, err
	}
	if tmpQKV > 0 {
		if err := m.allocQKVSplit(); err != nil {
			return nil, err
		}
	}
	if m.ones != nil {
		if err := core.Memset16(m.ones, 0x3F80); err != nil { // bf16 1.0
			return nil, err
		}
	}
	if c.Scaling != nil && m.kRopeF == nil {
		// r = x P^T with P[o][o+hd/2] = -1, P[o][o-hd/2] = 1: transformers'
		// rotate_half as an exact bf16 GEMM
		p := make([]uint16, hd*hd)
		for o := 0; o < hd; o++ {
			if o < hd/2 {
				p[o*hd+o+hd/2] = floatbits.BF16FromFloat32(-1)
			} else {
				p[o*hd+o-hd/2] = floatbits.BF16FromFloat32(1)
			}
		}
		m.swap = linear{out: hd, in: hd}
		if m.swap.w, err = m.upload(le.Uint16s(p)); err != nil {
			return nil, err
		}
	}
	ad := attention.Desc{Kind: attention.Decode, NumQOHeads: c.Heads, Cache: kvDesc, MaxBatch: batch}
	if m.dec, err = attention.New(dev, ad); err != nil {
		return nil, fmt.Errorf("llm: decode attention: %w", err)
	}
	if maxPrompt > 1 {
		ad.Kind, ad.Causal, ad.MaxRows = attention.Prefill, true, T
		if m.pre, err = attention.New(dev, ad); err != nil {
			return nil, fmt.Errorf("llm: prefill attention: %w", err)
		}
	}
	if m.stage, err = newStepStage(m); err != nil {
		return nil, err
	}
	if !o.Unfused && !o.NoPrologues {
		if err := m.probePrologues(); err != nil {
			return nil, err
		}
	}
	if !o.Unfused && !o.NoRopeAppend && c.Scaling != nil && m.kRopeF != nil && c.Rope == "neox" {
		if m.ropeAppend, err = m.probeRopeAppend(kvDesc); err != nil {
			return nil, err
		}
	}
	switch {
	case o.PrefetchL2MiB < 0 || o.PrefetchL2MiB > 1<<20:
		return nil, fmt.Errorf("llm: PrefetchL2MiB %d out of range 0 .. %d", o.PrefetchL2MiB, 1<<20)
	case o.PrefetchL2MiB > 0:
		if m.pf, err = newPrefetcher(m, o.PrefetchL2MiB<<20); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// probeRopeAppend says whether the plugin rotates q and K in a KV append
// (ABI 1.10), asked by one append of one zero row, with q, into a cache
// of one page of the model's layout made for the question.
func (m *Model) probeRopeAppend(kv attention.KVCacheDesc) (ok bool, err error) {
	kv.NumPages = 1
	cache, err := attention.AllocKVCache(m.dev, kv)
	if err != nil {
		return false, err
	}
	defer cache.Free()
	hd := m.cfg.HeadDim()
	rowBytes := 2 * hd * max(m.cfg.Heads, kv.NumKVHeads)
	b, err := m.dev.Alloc(4*4 + rowBytes)
	if err != nil {
		return false, err
	}
	defer b.Free()
	// indptr {0, 1}, indices {0}, last {1}, then a zero row
	if err := firstErr(core.Memset(b, 0), core.CopyFromHost(view(b, 0, 16), le.Int32s([]int32{0, 1, 0, 1}))); err != nil {
		return false, err
	}
	row := view(b, 16, rowBytes)
	pt := attention.PageTable{Indptr: view(b, 0, 8), Indices: view(b, 8, 4), LastPageLen: view(b, 12, 4)}
	rows := attention.KVRows{K: row, V: row, BatchIndices: view(b, 8, 4), Positions: view(b, 8, 4), NNZ: 1,
		InvFreq: m.invFreq, Q: row, QOHeads: m.cfg.Heads}
	err = cache.Append(m.s, pt, 1, rows)
	if errors.Is(err, core.ErrUnsupported) {
		return false, nil
	}
	if err == nil {
		err = m.s.Synchronize()
	}
	if err != nil {
		return false, fmt.Errorf("llm: probing the rotary embedding in the KV append: %w", err)
	}
	return true, nil
}

// withRope adds the rotary embedding of the step's T tokens' q to rows
// when the append runs it (ropeAppend).
func (m *Model) withRope(rows attention.KVRows, T int) attention.KVRows {
	if m.ropeAppend {
		q, _, _ := m.qkv(T)
		rows.InvFreq, rows.Q, rows.QOHeads = m.invFreq, q, m.cfg.Heads
	}
	return rows
}

// probePrologues sets proNorm and proSwiGLU: whether the plugin runs layer
// 0's one-token QKV and gate/up projections with RMSNormB and its down
// projection with SwiGLUB, asked by running each once, eagerly, on the
// (zeroed) activations. A refusal (ErrUnsupported: a plugin older than
// ABI 1.10, a backend or shape without the prologue) leaves the separate
// kernels; every layer has layer 0's shapes. Graph captures record only
// what this saw run.
func (m *Model) probePrologues() error {
	c := &m.cfg
	if c.Int8 || len(m.layers) == 0 {
		return nil
	}
	L := &m.layers[0]
	if !L.wqkv.set() || L.wqkv.bias != nil || !L.wgu1.set() || L.wd.bias != nil {
		return nil
	}
	if err := firstErr(core.Memset(m.h, 0), core.Memset(m.gu, 0)); err != nil {
		return err
	}
	Q, KV, I := c.Heads*c.HeadDim(), c.KVHeads*c.HeadDim(), c.Inter
	h, gu := view(m.h, 0, 2*c.Hidden), view(m.gu, 0, 4*I)
	runs := func(err error) (bool, error) {
		if errors.Is(err, core.ErrUnsupported) {
			return false, nil
		}
		if err == nil {
			err = m.s.Synchronize()
		}
		return err == nil, err
	}
	var err error
	if m.proNorm, err = runs(firstErr(m.mmPro(m.s, L.wqkv, h, view(m.qkvb, 0, 2*(Q+2*KV)), false, L.attnNorm, false),
		m.mmPro(m.s, L.wgu1, h, gu, false, L.mlpNorm, false))); err != nil {
		return fmt.Errorf("llm: probing the GEMM prologues: %w", err)
	}
	if m.proSwiGLU, err = runs(m.mmPro(m.s, L.wd, gu, view(m.xn, 0, 2*c.Hidden), true, nil, true)); err != nil {
		return fmt.Errorf("llm: probing the GEMM prologues: %w", err)
	}
	return nil
}

// linearDesc is the bf16 GEMM y[T][out] = x[T][in] * W^T of w's weights.
// A is w.w, a weight (or m.swap, rope's constant matrix): uploaded and
// synchronized at load, never written by a step, so ConstA (ABI 1.9)
// holds and lets CUDA's GEMV read it before the kernel ahead finishes.
func linearDesc(w linear, T int) core.GemmDesc {
	return core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.BF16, DType: core.BF16, TransA: true,
		M: w.out, N: T, K: w.in, ConstA: true}
}

// mmPro is mm for one token of bf16 weights without a bias, with a GEMM
// prologue on x: its RMSNorm by the weight norm (the model's epsilon), or
// (swiglu) silu(g)*u of x = [g; u].
func (m *Model) mmPro(s *core.Stream, w linear, x, y core.Region, residual bool, norm core.Region, swiglu bool) error {
	d := linearDesc(w, 1)
	d.RMSNormB, d.SwiGLUB = norm != nil, swiglu
	ops := core.GemmOperands{A: w.w, B: x, D: y, Alpha: 1}
	if norm != nil {
		ops.NormWeight, ops.NormEps = norm, float64(m.cfg.Eps)
	}
	if residual {
		ops.C, ops.Beta = y, 1
	}
	return s.Gemm(d, ops)
}

// Config is the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// RopeInAppend says whether the layers' KV appends rotate q and K on the
// way in (ABI 1.10; Options.NoRopeAppend), in place of a rotary launch.
func (m *Model) RopeInAppend() bool { return m.ropeAppend }

// Prologues names the GEMM prologues (ABI 1.10) the model's one-token
// decode steps run: "rmsnorm", "swiglu", both joined by "+", or "none"
// (Options.NoPrologues, int8 weights, or a plugin that refuses them).
func (m *Model) Prologues() string {
	switch {
	case m.proNorm && m.proSwiGLU:
		return "rmsnorm+swiglu"
	case m.proNorm:
		return "rmsnorm"
	case m.proSwiGLU:
		return "swiglu"
	}
	return "none"
}

// Batch is the number of requests the model runs now.
func (m *Model) Batch() int { return m.batch }

// Lens are the requests' lengths (tokens in the cache).
func (m *Model) Lens() []int { return append([]int(nil), m.lens[:m.batch]...) }

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
	m.stage.close()
	m.stage = nil
	for _, g := range m.graphs {
		_ = g.close()
	}
	m.graphs = nil
	for _, a := range []*attention.Attention{m.dec, m.pre} {
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

// SetBatch makes later calls run b requests (at most the batch the model
// was made for), all empty. The graphs captured for each batch size are
// kept (a batch-size bucket each: the buffers are the model's, fixed).
func (m *Model) SetBatch(b int) error {
	if b <= 0 || b > m.capBatch {
		return fmt.Errorf("llm: batch %d is outside 1 .. %d (the model's buffers)", b, m.capBatch)
	}
	if err := m.s.Synchronize(); err != nil {
		return err
	}
	m.batch = b
	return m.Reset(0)
}

// Reset empties every request (ctx 0), or gives each ctx tokens of zero
// K/V (a context for timing: every cache page is cleared).
func (m *Model) Reset(ctx int) error {
	if ctx < 0 || ctx > m.capacity() {
		return fmt.Errorf("llm: context %d is outside 0 .. %d (the cache's tokens per request)", ctx, m.capacity())
	}
	if ctx > 0 {
		for _, c := range m.caches {
			if err := firstErr(m.s.Memset(c.K(), 0), m.s.Memset(c.V(), 0)); err != nil {
				return err
			}
		}
	}
	for b := range m.lens {
		m.lens[b] = ctx
	}
	return nil
}

func (m *Model) capacity() int { return m.maxPages * m.cfg.pageSize() }

// view is bytes [off, off+n) of b (n > 0 inside b by construction).
func view(b *core.Buffer, off, n int) core.View {
	v, err := b.View(off, n)
	if err != nil {
		panic(fmt.Sprintf("llm: view %d+%d of a %d-byte buffer: %v", off, n, b.Len(), err))
	}
	return v
}

// sub is view's for a view (the step's input regions).
func sub(v core.View, off, n int) core.View {
	w, err := v.Sub(off, n)
	if err != nil {
		panic(fmt.Sprintf("llm: view %d+%d of a %d-byte view: %v", off, n, v.Len(), err))
	}
	return w
}

// inputs are the sizes of the step's int32 inputs, in the order of their
// regions in the device block: ids first and qoIndptr last, so that what
// a step writes is one stretch (decode without ids: pos to lastLen, or to
// the page table's indices when the table changed; a paged step: ids, pos
// and rpos; a prefill: all).
func (m *Model) inputs() []struct {
	dst   *core.View
	bytes int
} {
	T, B := m.maxT, m.capBatch
	return []struct {
		dst   *core.View
		bytes int
	}{{&m.ids, 4 * T}, {&m.pos, 4 * T}, {&m.rpos, 4 * T * (m.cfg.Heads + m.cfg.KVHeads)}, {&m.lastLen, 4 * B}, {&m.bidx, 4 * T},
		{&m.indptr, 4 * (B + 1)}, {&m.indices, 4 * B * m.maxPages}, {&m.qoIndptr, 4 * (B + 1)}}
}

// allocInputs allocates the device block of the step's inputs (each
// region 16-byte aligned) and points the regions into it.
func (m *Model) allocInputs() error {
	regions := m.inputs()
	n := 0
	for _, r := range regions {
		n += (r.bytes + 15) &^ 15
	}
	var err error
	if m.in, err = m.alloc(n); err != nil {
		return err
	}
	off := 0
	for _, r := range regions {
		*r.dst = view(m.in, off, r.bytes)
		off += (r.bytes + 15) &^ 15
	}
	return nil
}

// resize is s's storage holding n elements (grown when short), for the
// host arrays a step rewrites.
func resize[T any](s []T, n int) []T { return slices.Grow(s[:0], n)[:n] }

// normBlock is the block of a norm's row: a thread per 16-byte vector of
// bf16 (CUDA's norms load 8 elements at once), 32 to 1024.
func normBlock(cols int) uint32 {
	b := 32
	for b < 1024 && b*8 < cols {
		b *= 2
	}
	return uint32(b)
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
	return s.Launch(m.kRMS, grid(rows, normBlock(H)), core.ArgBuffer(y), core.ArgBuffer(x), core.ArgBuffer(w),
		core.ArgScalar[float32](m.cfg.Eps), core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(H)))
}

// addNormed says whether the residual add of w's output runs fused into
// the next RMSNorm (add_rmsnorm_T): for int8 weights without a bias, whose
// residual is otherwise matmul.Quant into a temporary plus add_T (a bf16
// GEMM adds it in its epilogue instead, one rounding fewer, so it stays).
// On the mock the bits are those of add_T then rmsnorm_T (gpurt.h).
func (m *Model) addNormed(w linear) bool { return m.kAddNorm != nil && w.qw != nil && w.bias == nil }

// addNorm is r += x, x = rmsnorm(r) * w over rows rows of the hidden size.
func (m *Model) addNorm(s *core.Stream, x, r, w core.Region, rows int) error {
	H := m.cfg.Hidden
	return s.Launch(m.kAddNorm, grid(rows, normBlock(H)), core.ArgBuffer(x), core.ArgBuffer(r), core.ArgBuffer(w),
		core.ArgScalar[float32](m.cfg.Eps), core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(H)))
}

func (m *Model) elementwise(s *core.Stream, k *core.Kernel, y, a, b core.Region, n int) error {
	return s.Launch(k, grid((n+255)/256, 256), core.ArgBuffer(y), core.ArgBuffer(a), core.ArgBuffer(b), core.ArgScalar[uint64](uint64(n)))
}

// ropeTables rotates x ([tokens][heads][head_dim]) where no position
// kernel applies (scaling without rope_neox_freqs_T, !ropeByPos):
// transformers' bf16 arithmetic, x*cos + rotate_half(x)*sin (each product
// and the sum rounded to bf16), from the step's cos and sin tables of q
// (k false) or k.
func (m *Model) ropeTables(s *core.Stream, x core.Region, tokens, heads int, k bool) error {
	n := tokens * heads * m.cfg.HeadDim()
	cos, sin := m.cosQ, m.sinQ
	if k {
		cos, sin = m.cosK, m.sinK
	}
	a, b := view(m.rotA, 0, 2*n), view(m.rotB, 0, 2*n)
	return firstErr(m.mm(s, m.swap, x, a, tokens*heads, false, false),
		m.elementwise(s, m.kMul, a, a, view(sin, 0, 2*n), n),
		m.elementwise(s, m.kMul, b, x, view(cos, 0, 2*n), n),
		m.elementwise(s, m.kAdd, x, b, a, n))
}

// ropeByPos says whether the rotation runs on a kernel that reads each
// token's position from a device array (plain frequencies, or
// rope_neox_freqs_T with scaling), not on the step's cos and sin tables.
func (m *Model) ropeByPos() bool { return m.cfg.Scaling == nil || m.kRopeF != nil }

// ropeAt rotates x ([tokens][heads][head_dim]) at the positions pos (one
// int32 a token) on the position kernel (ropeByPos).
func (m *Model) ropeAt(s *core.Stream, x core.Region, pos core.View, tokens, heads int) error {
	hd := m.cfg.HeadDim()
	n := tokens * heads * hd / 2
	if m.cfg.Scaling == nil {
		return s.Launch(m.kRope, grid((n+255)/256, 256), core.ArgBuffer(x), core.ArgBuffer(pos),
			core.ArgScalar[float32](float32(m.cfg.Theta)), core.ArgScalar[uint64](uint64(tokens)), core.ArgScalar[uint64](uint64(heads)), core.ArgScalar[uint64](uint64(hd)))
	}
	return s.Launch(m.kRopeF, grid((n+255)/256, 256), core.ArgBuffer(x), core.ArgBuffer(pos),
		core.ArgBuffer(m.invFreq), core.ArgScalar[uint64](uint64(tokens)), core.ArgScalar[uint64](uint64(heads)), core.ArgScalar[uint64](uint64(hd)))
}

// putPos stages the step's positions (pos, one a token) and, for T > 1
// tokens on the position kernel, rpos: each row of the step's q heads
// (T*Heads rows, token-major) and then of its k heads (T*KVHeads) with
// its token's position, so that partA rotates q and k in one launch (they
// are one after the other in qkvb) instead of two.
func (m *Model) putPos(st *stepStage, pos []int32) error {
	T := len(pos)
	if err := st.put(sub(m.pos, 0, 4*T), pos); err != nil || T == 1 || !m.ropeByPos() {
		return err
	}
	H, KV := m.cfg.Heads, m.cfg.KVHeads
	rp := resize(m.scratch.rpos, T*(H+KV))
	m.scratch.rpos = rp
	for t, p := range pos {
		for h := 0; h < H; h++ {
			rp[t*H+h] = p
		}
		for h := 0; h < KV; h++ {
			rp[T*H+t*KV+h] = p
		}
	}
	return st.put(sub(m.rpos, 0, 4*len(rp)), rp)
}

// mm is y[T][out] = x[T][in] * W^T (plus y when residual, plus the bias):
// one GEMM for bf16 (pair: a batch of two, W and y each two matrices one
// after the other; no bias), matmul.Quant for int8 (a residual through tmp
// and add_T, a bias as a rank-one GEMM).
func (m *Model) mm(s *core.Stream, w linear, x, y core.Region, T int, residual, pair bool) error {
	if w.qw != nil {
		d := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, Bits: 8, GroupSize: m.cfg.groupSize(), M: w.out, N: T, K: w.in}
		var err error
		if !residual {
			err = matmul.Quant(s, d, matmul.QuantOperands{W: w.qw, Scales: w.qs, Biases: w.qb, X: x, Y: y})
		} else {
			t := view(m.tmp, 0, 2*T*w.out)
			err = firstErr(matmul.Quant(s, d, matmul.QuantOperands{W: w.qw, Scales: w.qs, Biases: w.qb, X: x, Y: t}),
				m.elementwise(s, m.kAdd, y, y, t, T*w.out))
		}
		if err == nil && w.bias != nil { // y += bias (M x 1) * ones (1 x T)
			bd := core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.BF16, DType: core.BF16, M: w.out, N: T, K: 1, ConstA: true}
			err = s.Gemm(bd, core.GemmOperands{A: w.bias, B: view(m.ones, 0, 2*T), C: y, D: y, Alpha: 1, Beta: 1})
		}
		return err
	}
	d := linearDesc(w, T)
	if pair {
		d.Batch, d.StrideA, d.StrideD, d.StrideC = 2, int64(w.out*w.in), int64(T*w.out), int64(T*w.out)
	}
	ops := core.GemmOperands{A: w.w, B: x, D: y, Alpha: 1}
	if residual {
		ops.C, ops.Beta = y, 1
	}
	if w.bias != nil {
		d.Epilogue, ops.Bias = core.EpilogueBias, w.bias
	}
	return s.Gemm(d, ops)
}

// partA: the attention block up to the attention (norm, QKV, rotary).
func (m *Model) partA(s *core.Stream, l, T int) error {
	c, L := &m.cfg, &m.layers[l]
	hd := c.HeadDim()
	Q, KV := c.Heads*hd, c.KVHeads*hd
	h, xn := view(m.h, 0, 2*T*c.Hidden), view(m.xn, 0, 2*T*c.Hidden)
	q, k, v := m.qkv(T)
	var err error
	fused := T == 1 && m.proNorm                              // the norm inside the QKV GEMM (one token, bf16)
	if !fused && (l == 0 || !m.addNormed(m.layers[l-1].wd)) { // else partB(l-1) left the norm in xn
		err = m.rmsnorm(s, xn, h, L.attnNorm, T)
	}
	switch {
	case err != nil:
	case fused:
		err = m.mmPro(s, L.wqkv, h, view(m.qkvb, 0, 2*(Q+2*KV)), false, L.attnNorm, false)
	case T == 1 && L.wqkv.set(): // one token: q, k, v one GEMM's output
		err = m.mm(s, L.wqkv, xn, view(m.qkvb, 0, 2*(Q+2*KV)), 1, false, false)
	case T == m.batch && m.qkvIdx != nil && L.wqkv.set(): // int8 decode step: one GEMV, then its rows moved
		err = m.qkvSplit(s, L.wqkv, xn, T)
	case L.wkv.w == nil:
		err = firstErr(m.mm(s, L.wq, xn, q, T, false, false), m.mm(s, L.wk, xn, k, T, false, false),
			m.mm(s, L.wv, xn, v, T, false, false))
	default:
		err = firstErr(m.mm(s, L.wq, xn, q, T, false, false), m.mm(s, L.wkv, xn, view(m.qkvb, 2*T*Q, 4*T*KV), T, false, true))
	}
	switch {
	case err != nil:
	case m.ropeAppend: // the KV append rotates q and k on the way in
	case T == 1 && m.ropeByPos(): // one token: q's heads then k's, one rotation at pos
		err = m.ropeAt(s, view(m.qkvb, 0, 2*(Q+KV)), sub(m.pos, 0, 4), 1, c.Heads+c.KVHeads)
	case m.ropeByPos(): // q's rows then k's (contiguous), each at its token's position (putPos's rpos)
		err = m.ropeAt(s, view(m.qkvb, 0, 2*T*(Q+KV)), sub(m.rpos, 0, 4*T*(c.Heads+c.KVHeads)), T*(c.Heads+c.KVHeads), 1)
	default:
		err = firstErr(m.ropeTables(s, q, T, c.Heads, false), m.ropeTables(s, k, T, c.KVHeads, true))
	}
	if err != nil {
		return fmt.Errorf("llm: layer %d attention input: %w", l, err)
	}
	return nil
}

// allocQKVSplit makes qkvIdx for a step of m.batch tokens (qkvSplit):
// with u = gcd(Q, KV), a token's fused output is r = (Q + 2 KV) / u rows
// of u elements (q's Q/u, k's KV/u, v's KV/u), and the ids list, for each
// row of qkvb's layout (q's rows of every token, then k's, then v's), the
// fused row it comes from.
func (m *Model) allocQKVSplit() error {
	Q, KV, T := m.cfg.Heads*m.cfg.HeadDim(), m.cfg.KVHeads*m.cfg.HeadDim(), m.batch
	u := gcd(Q, KV)
	a, b := Q/u, KV/u
	r := a + 2*b
	ids := make([]int32, 0, T*r)
	for _, part := range [][2]int{{0, a}, {a, b}, {a + b, b}} { // q, k, v: (first row, rows) of a token's
		for t := 0; t < T; t++ {
			for j := 0; j < part[1]; j++ {
				ids = append(ids, int32(t*r+part[0]+j))
			}
		}
	}
	var err error
	if m.qkvIdx, err = m.alloc(4 * len(ids)); err != nil {
		return err
	}
	m.qkvUnit = u
	return core.CopyFromHost(m.qkvIdx, le.Int32s(ids))
}

// qkvSplit is an int8 decode step's QKV projection of T = m.batch tokens
// as one GEMV over the fused weights (into tmp, [T][Q+2KV]) and one
// embed_bf16 launch that moves its rows into qkvb's layout ([T][Q], then
// [T][KV] twice). Three GEMVs would read the same bytes of W in three
// launches, two of them (k and v, KV rows) too few blocks to fill the GPU:
// on the H100 the 8B's k and v GEMVs take about as long as q's (each
// block's work is the same), against 19.1 us for the fused 6,144 rows at
// n = 32 (BENCHMARKS.md, seventeenth session).
func (m *Model) qkvSplit(s *core.Stream, w linear, xn core.Region, T int) error {
	rows := w.out / m.qkvUnit * T
	t := view(m.tmp, 0, 2*T*w.out)
	return firstErr(m.mm(s, w, xn, t, T, false, false),
		m.gather(s, view(m.qkvb, 0, 2*T*w.out), t, m.qkvIdx, rows, m.qkvUnit, rows))
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// qkv is a step's q, k and v ([T][Q], [T][KV], [T][KV], one after the
// other).
func (m *Model) qkv(T int) (q, k, v core.View) {
	Q, KV := m.cfg.Heads*m.cfg.HeadDim(), m.cfg.KVHeads*m.cfg.HeadDim()
	return view(m.qkvb, 0, 2*T*Q), view(m.qkvb, 2*T*Q, 2*T*KV), view(m.qkvb, 2*T*(Q+KV), 2*T*KV)
}

// set says whether the linear has weights (a fused one may not).
func (w linear) set() bool { return w.w != nil || w.qw != nil }

func (m *Model) pages() attention.PageTable {
	return attention.PageTable{Indptr: sub(m.indptr, 0, 4*(m.batch+1)), Indices: m.indices, LastPageLen: sub(m.lastLen, 0, 4*m.batch)}
}

// attend appends the layer's K and V rows and runs the attention (eager:
// graphs do not record attention).
func (m *Model) attend(s *core.Stream, l, T int, prefill bool) error {
	c, L := &m.cfg, &m.layers[l]
	Q := c.Heads * c.HeadDim()
	pt := m.pages()
	q, k, v := m.qkv(T)
	rows := m.withRope(attention.KVRows{K: k, V: v, BatchIndices: sub(m.bidx, 0, 4*T), Positions: sub(m.pos, 0, 4*T), NNZ: T}, T)
	a, ops := m.dec, attention.Operands{Q: q, O: view(m.o, 0, 2*T*Q), Pages: pt}
	if prefill {
		a, ops.QOIndptr = m.pre, sub(m.qoIndptr, 0, 4*(m.batch+1))
	}
	if err := firstErr(L.cache.Append(s, pt, m.batch, rows), a.Run(s, L.cache, ops)); err != nil {
		return fmt.Errorf("llm: layer %d attention: %w", l, err)
	}
	return nil
}

// appendKV appends the layer's K and V rows of a decode step (one token
// per request) to its cache.
func (m *Model) appendKV(s *core.Stream, l, B int) error {
	_, k, v := m.qkv(B)
	rows := m.withRope(attention.KVRows{K: k, V: v, BatchIndices: sub(m.bidx, 0, 4*B), Positions: sub(m.pos, 0, 4*B), NNZ: B}, B)
	if err := m.layers[l].cache.Append(s, m.pages(), m.batch, rows); err != nil {
		return fmt.Errorf("llm: layer %d kv append: %w", l, err)
	}
	return nil
}

// attendDecode runs the layer's decode attention (the plan made outside).
func (m *Model) attendDecode(s *core.Stream, l, B int) error {
	Q := m.cfg.Heads * m.cfg.HeadDim()
	q, _, _ := m.qkv(B)
	ops := attention.Operands{Q: q, O: view(m.o, 0, 2*B*Q), Pages: m.pages()}
	if err := m.dec.Run(s, m.layers[l].cache, ops); err != nil {
		return fmt.Errorf("llm: layer %d attention: %w", l, err)
	}
	return nil
}

// partB: the attention output projection and the MLP block.
func (m *Model) partB(s *core.Stream, l, T int) error {
	c, L := &m.cfg, &m.layers[l]
	Q, I := c.Heads*c.HeadDim(), c.Inter
	h, xn := view(m.h, 0, 2*T*c.Hidden), view(m.xn, 0, 2*T*c.Hidden)
	g, u, act := view(m.gu, 0, 2*T*I), view(m.gu, 2*T*I, 2*T*I), view(m.act, 0, 2*T*I)
	// One token with prologues: the MLP norm inside the gate/up GEMM
	// (reading h), silu(g)*u inside the down GEMM (reading gu = [g; u]).
	norm, swiglu := T == 1 && m.proNorm, T == 1 && m.proSwiGLU && L.wgu1.set()
	var err error
	switch {
	case norm: // h += o Wo^T; gate, up of its norm
		err = firstErr(m.mm(s, L.wo, view(m.o, 0, 2*T*Q), h, T, true, false),
			m.mmPro(s, L.wgu1, h, view(m.gu, 0, 4*I), false, L.mlpNorm, false))
	case m.addNormed(L.wo): // h += o Wo^T and xn = its norm: the projection into xn, then one launch
		err = firstErr(m.mm(s, L.wo, view(m.o, 0, 2*T*Q), xn, T, false, false), m.addNorm(s, xn, h, L.mlpNorm, T))
	default:
		err = firstErr(m.mm(s, L.wo, view(m.o, 0, 2*T*Q), h, T, true, false), m.rmsnorm(s, xn, h, L.mlpNorm, T))
	}
	switch {
	case err != nil || norm: // failed, or gate and up were done above
	case T == 1 && L.wgu1.set(): // one token: gate, up one GEMM's output
		err = m.mm(s, L.wgu1, xn, view(m.gu, 0, 4*I), 1, false, false)
	case c.Int8:
		err = firstErr(m.mm(s, L.wg, xn, g, T, false, false), m.mm(s, L.wu, xn, u, T, false, false))
	default:
		err = m.mm(s, L.wgu, xn, view(m.gu, 0, 4*T*I), T, false, true)
	}
	if err == nil && !swiglu {
		err = m.elementwise(s, m.kSilu, act, g, u, T*I)
	}
	switch {
	case err != nil:
	case swiglu: // h += silu(g)*u Wd^T
		err = m.mmPro(s, L.wd, view(m.gu, 0, 4*I), h, true, nil, true)
	case l+1 < c.Layers && m.addNormed(L.wd):
		// h += act Wd^T and the next layer's attention norm of it into xn
		// (its partA then starts at the QKV projection).
		err = firstErr(m.mm(s, L.wd, act, xn, T, false, false), m.addNorm(s, xn, h, m.layers[l+1].attnNorm, T))
	default:
		err = m.mm(s, L.wd, act, h, T, true, false)
	}
	if err != nil {
		return fmt.Errorf("llm: layer %d mlp: %w", l, err)
	}
	return nil
}

func (m *Model) embedTokens(s *core.Stream, T int) error {
	H, V := m.cfg.Hidden, m.cfg.Vocab
	return m.gather(s, view(m.h, 0, 2*T*H), m.embed, sub(m.ids, 0, 4*T), T, H, V)
}

// gather is embed_bf16: y's rows rows of cols are table's rows ids[i] (of
// its vocab rows).
func (m *Model) gather(s *core.Stream, y, table, ids core.Region, rows, cols, vocab int) error {
	return s.Launch(m.kEmbed, grid((rows*cols+255)/256, 256), core.ArgBuffer(y), core.ArgBuffer(table), core.ArgBuffer(ids),
		core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(cols)), core.ArgScalar[uint64](uint64(vocab)))
}

// head: final norm of the n rows of hl, their logits (f32; bf16 from an
// int8 head).
func (m *Model) head(s *core.Stream, hl core.Region, n int) error {
	H, V := m.cfg.Hidden, m.cfg.Vocab
	xl := view(m.xl, 0, 2*n*H)
	err := m.rmsnorm(s, xl, hl, m.finalNorm, n)
	if err == nil && m.lm.qw != nil {
		d := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, Bits: 8, GroupSize: m.cfg.groupSize(), M: V, N: n, K: H}
		err = matmul.Quant(s, d, matmul.QuantOperands{W: m.lm.qw, Scales: m.lm.qs, Biases: m.lm.qb, X: xl,
			Y: view(m.logits, 0, 2*n*V)})
	} else if err == nil {
		d := core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.F32, DType: core.F32, TransA: true, M: V, N: n, K: H, ConstA: true} // A: the lm head's weight
		err = s.Gemm(d, core.GemmOperands{A: m.lm.w, B: xl, D: view(m.logits, 0, 4*n*V), Alpha: 1})
	}
	if err != nil {
		return fmt.Errorf("llm: head: %w", err)
	}
	return nil
}

// Sampling draws tokens from the logits (the sample_f32 kernel): TopK
// (0: all), TopP (1: all), Temperature (0: greedy); step i of a request
// uses the seed Seed + i.
type Sampling struct {
	TopK        int
	TopP        float32
	Temperature float32
	Seed        uint64
}

// pick writes each request's next token into ids[0:batch]: the argmax, or
// drawn with sp at the given step.
func (m *Model) pick(s *core.Stream, sp *Sampling, step, n int) error {
	V := m.cfg.Vocab
	ids := core.ArgBuffer(sub(m.ids, 0, 4*n))
	if sp == nil {
		return s.Launch(m.kArgmax, grid(n, rowBlock(V)), ids, core.ArgBuffer(m.logits), core.ArgScalar[uint64](uint64(n)), core.ArgScalar[uint64](uint64(V)))
	}
	return s.Launch(m.kSample, grid(n, rowBlock(V)), ids, core.ArgBuffer(m.logits), core.ArgScalar[uint64](uint64(n)), core.ArgScalar[uint64](uint64(V)),
		core.ArgScalar[uint64](uint64(sp.TopK)), core.ArgScalar[float32](sp.TopP), core.ArgScalar[float32](sp.Temperature), core.ArgScalar[uint64](sp.Seed+uint64(step)))
}

// schedule is the page table of the batch's requests at lengths lens
// (request b owns pages b*maxPages ..).
//
// The page table is built again only when a request's page count changed
// since the last call (m.sched.ver counts the builds): a decode step
// changes it once every page size tokens.
func (m *Model) schedule(lens []int) (indptr, indices, last []int32) {
	ps := m.cfg.pageSize()
	B := m.batch
	last = resize(m.scratch.last, B)
	same := len(m.sched.pages) == B // (B >= 1: a table was built)
	for b := 0; b < B; b++ {
		np := (lens[b] + ps - 1) / ps
		last[b] = int32(lens[b] - (np-1)*ps)
		same = same && m.sched.pages[b] == np
	}
	m.scratch.last = last
	if same {
		return m.scratch.indptr, m.scratch.indices, last
	}
	pages := resize(m.sched.pages, B)
	indptr, indices = resize(m.scratch.indptr, B+1), m.scratch.indices[:0]
	indptr[0] = 0
	for b := 0; b < B; b++ {
		np := (lens[b] + ps - 1) / ps
		pages[b] = np
		indptr[b+1] = indptr[b] + int32(np)
		for j := 0; j < np; j++ {
			indices = append(indices, int32(b*m.maxPages+j))
		}
	}
	m.scratch.indptr, m.scratch.indices = indptr, indices
	m.sched.pages = pages
	m.sched.ver++
	return indptr, indices, last
}

// halves is pinned host memory in two halves for uploads that alternate:
// a step takes the half the step before the last used, once that half's
// copies are done (an event recorded after them).
type halves struct {
	hs     *core.HostBuffer
	half   int
	cur    int
	ev     [2]*core.Event
	used   [2]bool
	waited time.Duration // in next, waiting for a half's last copies
}

// newHalves allocates two halves of n bytes (from the host heap when heap).
func newHalves(m *Model, n int, heap bool) (*halves, error) {
	var hs *core.HostBuffer
	var err error
	if heap {
		hs, err = m.rt.AllocHostFromHeap(2 * n)
	} else {
		hs, err = m.rt.AllocHost(2 * n)
	}
	if err != nil {
		return nil, err
	}
	h := &halves{hs: hs, half: n}
	for i := range h.ev {
		if h.ev[i], err = m.dev.NewEvent(false); err != nil {
			h.close()
			return nil, err
		}
	}
	return h, nil
}

func (h *halves) close() {
	if h == nil {
		return
	}
	for _, e := range h.ev {
		if e != nil {
			_ = e.Close()
		}
	}
	_ = h.hs.Free()
}

// next takes the next half (waiting for its last copies).
func (h *halves) next() error {
	h.cur ^= 1
	if h.used[h.cur] {
		t0 := time.Now()
		err := h.ev[h.cur].Synchronize()
		h.waited += time.Since(t0)
		return err
	}
	return nil
}

// mark records, after the copies enqueued on s so far, that the current
// half is free again once they are done.
func (h *halves) mark(s *core.Stream) error {
	h.used[h.cur] = true
	return h.ev[h.cur].Record(s)
}

// upload copies b into the next half and enqueues its copy to dst on s.
func (h *halves) upload(s *core.Stream, dst core.Region, b []byte) error {
	if err := h.next(); err != nil {
		return err
	}
	pv, err := h.hs.View(h.cur*h.half, len(b))
	if err != nil {
		return err
	}
	copy(pv.Bytes(), b)
	if err := s.CopyFromPinned(dst, pv); err != nil {
		return err
	}
	return h.mark(s)
}

// stepStage is the pinned host memory of the steps' inputs (token ids,
// positions, page tables, rope tables): halves.
type stepStage struct {
	*halves
	off int
	// The step's int32 inputs: the first in.Len() bytes of a half mirror
	// the device block in; put writes at a region's offset in the block,
	// end uploads the stretch [lo, hi) the step wrote, in one copy.
	in     *core.Buffer
	lo, hi int
	// dev: the version (Model.sched.ver) of the decode page table (bidx,
	// indptr, indices: the stretch table) the device block holds, 0 when
	// unknown; pend: the version put since begin, which end's upload makes
	// the device's. A put into the stretch clears dev (putTable).
	dev, pend uint64
	table     struct{ lo, hi int }
	// upload: the time inside end (the copy and the event record's calls),
	// since the stage was made (Run.UploadTime)
	upload time.Duration
}

func newStepStage(m *Model) (*stepStage, error) {
	c := &m.cfg
	T := m.maxT
	n := m.in.Len() + 4*64
	if c.Scaling != nil {
		hd := c.HeadDim()
		n += 2 * 2 * T * (c.Heads + c.KVHeads) * hd
	}
	n = (n + 255) &^ 255
	h, err := newHalves(m, n, true)
	if err != nil {
		return nil, err
	}
	st := &stepStage{halves: h, in: m.in}
	st.table.lo, st.table.hi = m.bidx.Offset(), m.indices.Offset()+m.indices.Len()
	return st, nil
}

func (st *stepStage) close() {
	if st != nil {
		st.halves.close()
	}
}

// begin takes the next half (waiting for its last copies).
func (st *stepStage) begin() error {
	st.off = (st.in.Len() + 15) &^ 15
	st.lo, st.hi, st.pend = st.in.Len(), 0, 0
	return st.next()
}

// end uploads the inputs put since begin (one copy) and marks the half's
// copies enqueued so far.
func (st *stepStage) end(s *core.Stream) error {
	t0 := time.Now()
	defer func() { st.upload += time.Since(t0) }()
	pend := st.pend
	st.pend = 0
	if st.hi > st.lo {
		pv, err := st.hs.View(st.cur*st.half+st.lo, st.hi-st.lo)
		if err == nil {
			err = s.CopyFromPinned(view(st.in, st.lo, st.hi-st.lo), pv)
		}
		st.lo, st.hi = st.in.Len(), 0
		if err != nil {
			st.dev = 0
			return err
		}
	}
	if pend != 0 {
		st.dev = pend
	}
	return st.mark(s)
}

// bytes reserves n bytes of the half.
func (st *stepStage) bytes(n int) (core.PinnedView, error) {
	if st.off+n > st.half {
		return core.PinnedView{}, errors.New("llm: step staging exhausted")
	}
	pv, err := st.hs.View(st.cur*st.half+st.off, n)
	st.off += (n + 15) &^ 15
	return pv, err
}

// put writes v for dst, a region of the input block, to be uploaded at
// end.
func (st *stepStage) put(dst core.View, v []int32) error {
	o := dst.Offset()
	if dst.Buffer() != st.in || o+4*len(v) > st.in.Len() || 4*len(v) > dst.Len() {
		return fmt.Errorf("llm: step input of %d bytes at %d is not a region of the input block", 4*len(v), o)
	}
	pv, err := st.hs.View(st.cur*st.half+o, 4*len(v))
	if err != nil {
		return err
	}
	b := pv.Bytes()
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	st.lo, st.hi = min(st.lo, o), max(st.hi, o+4*len(v))
	if o < st.table.hi && o+4*len(v) > st.table.lo {
		st.dev, st.pend = 0, 0
	}
	return nil
}

// putTable puts a decode step's page table (bidx, indptr, indices)
// unless the device block holds version ver of it already: a step that
// keeps the table uploads only its positions and last-page lengths,
// which precede the table in the block (Model.inputs).
func (st *stepStage) putTable(ver uint64, bidx, indptr, indices core.View, seq, ip, ix []int32) error {
	if st.dev == ver { // (dev 0: unknown; a version counts from 1)
		return nil
	}
	if err := firstErr(st.put(bidx, seq), st.put(indptr, ip), st.put(indices, ix)); err != nil {
		return err
	}
	st.pend = ver
	return nil
}

// putRope uploads the cos and sin tables of q and k at the tokens'
// positions (cos/sin of float32(pos*inv_freq), in float32 then bf16, as
// transformers computes them).
func (m *Model) putRope(s *core.Stream, pos []int32) error {
	c := &m.cfg
	hd := c.HeadDim()
	seq := 0
	for _, p := range pos {
		seq = max(seq, int(p)+1)
	}
	if m.kRopeF != nil { // the frequencies only, when they change (dynamic scaling)
		// They depend on the length only under dynamic NTK past the
		// trained length: otherwise the ones uploaded stay (no work, no
		// allocation in the step).
		key := 0
		if sc := c.Scaling; sc != nil && sc.Type == "dynamic" && seq > sc.OriginalMaxPos {
			key = seq
		}
		if m.invLast != nil && key == m.invKey {
			return nil
		}
		inv := c.invFreq(seq)
		if slices.Equal(inv, m.invLast) {
			m.invKey = key
			return nil
		}
		p, err := m.stage.bytes(4 * len(inv))
		if err != nil {
			return err
		}
		b := p.Bytes()
		for j, f := range inv {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
		}
		if err := s.CopyFromPinned(view(m.invFreq, 0, 4*len(inv)), p); err != nil {
			return err
		}
		m.invLast, m.invKey = inv, key
		return nil
	}
	inv := c.invFreq(seq)
	T := len(pos)
	rowC := make([]uint16, hd)
	rowS := make([]uint16, hd)
	fill := func(cosT, sinT *core.Buffer, heads int) error {
		n := 2 * T * heads * hd
		pc, err := m.stage.bytes(n)
		if err != nil {
			return err
		}
		psn, err := m.stage.bytes(n)
		if err != nil {
			return err
		}
		bc, bs := pc.Bytes(), psn.Bytes()
		for t, p := range pos {
			for j, f := range inv {
				a := float64(float32(p) * f)
				cv := floatbits.BF16FromFloat32(float32(math.Cos(a)))
				sv := floatbits.BF16FromFloat32(float32(math.Sin(a)))
				rowC[j], rowC[j+hd/2], rowS[j], rowS[j+hd/2] = cv, cv, sv, sv
			}
			for h := 0; h < heads; h++ {
				o := 2 * (t*heads + h) * hd
				for j := 0; j < hd; j++ {
					binary.LittleEndian.PutUint16(bc[o+2*j:], rowC[j])
					binary.LittleEndian.PutUint16(bs[o+2*j:], rowS[j])
				}
			}
		}
		return firstErr(s.CopyFromPinned(view(cosT, 0, n), pc), s.CopyFromPinned(view(sinT, 0, n), psn))
	}
	return firstErr(fill(m.cosQ, m.sinQ, c.Heads), fill(m.cosK, m.sinK, c.KVHeads))
}

// Prefill appends prompts[b] (at least one token each) to request b of
// the batch, at the request's own positions, and computes each request's
// logits after its last prompt token (Logits, and Next's tokens: greedy,
// or drawn with sp at step 0). It enqueues work and returns (Tokens or
// Logits wait for it).
func (m *Model) Prefill(prompts [][]int32, sp *Sampling) error {
	B, s := m.batch, m.s
	if m.pre == nil {
		return errors.New("llm: the model was made for prompts of one token (Options.MaxPrompt 1): no prefill")
	}
	if len(prompts) != B {
		return fmt.Errorf("llm: %d prompts for a batch of %d requests", len(prompts), B)
	}
	T := 0
	for b, p := range prompts {
		if len(p) == 0 {
			return fmt.Errorf("llm: prompt %d is empty", b)
		}
		if m.lens[b]+len(p) > m.capacity() {
			return fmt.Errorf("llm: request %d: %d tokens + a prompt of %d exceed the cache's %d tokens per request", b, m.lens[b], len(p), m.capacity())
		}
		if err := m.checkIDs(p); err != nil {
			return fmt.Errorf("%w (prompt %d)", err, b)
		}
		T += len(p)
	}
	if T > m.maxT {
		return fmt.Errorf("llm: prompts of %d tokens in all exceed the model's %d (batch x max prompt)", T, m.maxT)
	}
	ids := make([]int32, 0, T)
	bidx := make([]int32, 0, T)
	pos := make([]int32, 0, T)
	qo := make([]int32, B+1)
	lens := make([]int, B)
	for b, p := range prompts {
		ids = append(ids, p...)
		for j := range p {
			bidx = append(bidx, int32(b))
			pos = append(pos, int32(m.lens[b]+j))
		}
		qo[b+1] = qo[b] + int32(len(p))
		lens[b] = m.lens[b] + len(p)
	}
	indptr, indices, last := m.schedule(lens)
	st := m.stage
	err := st.begin()
	if err == nil {
		err = firstErr(st.put(sub(m.ids, 0, 4*T), ids), st.put(sub(m.bidx, 0, 4*T), bidx),
			m.putPos(st, pos), st.put(sub(m.indptr, 0, 4*(B+1)), indptr),
			st.put(sub(m.indices, 0, 4*max(len(indices), 1)), pad1(indices)), st.put(sub(m.lastLen, 0, 4*B), last),
			st.put(sub(m.qoIndptr, 0, 4*(B+1)), qo))
	}
	if err == nil && m.cfg.Scaling != nil {
		err = m.putRope(s, pos)
	}
	if err == nil {
		err = st.end(s)
	}
	if err == nil {
		err = firstErr(m.pre.Plan(s, attention.Schedule{QOIndptr: qo, KVIndptr: indptr, KVLastPageLen: last}),
			m.embedTokens(s, T))
	}
	for l := 0; err == nil && l < m.cfg.Layers; l++ {
		err = firstErr(m.partA(s, l, T), m.attend(s, l, T, true), m.partB(s, l, T))
	}
	H := m.cfg.Hidden
	for b := 0; err == nil && b < B; b++ {
		err = s.CopyDevice(view(m.hl, 2*b*H, 2*H), view(m.h, 2*int(qo[b+1]-1)*H, 2*H))
	}
	if err == nil {
		err = firstErr(m.head(s, view(m.hl, 0, 2*B*H), B), m.pick(s, sp, 0, B))
	}
	if err != nil {
		return fmt.Errorf("llm: prefill: %w", err)
	}
	copy(m.lens, lens)
	return nil
}

func pad1(v []int32) []int32 {
	if len(v) == 0 {
		return []int32{0}
	}
	return v
}

func (m *Model) checkIDs(ids []int32) error {
	for i, id := range ids {
		if id < 0 || int(id) >= m.cfg.Vocab {
			return fmt.Errorf("llm: token %d is %d, outside the vocab of %d", i, id, m.cfg.Vocab)
		}
	}
	return nil
}

// Decode appends one token to each request of the batch at its own
// position: ids (one per request), or nil for the tokens the last step
// picked (they stay on the device); graph replays the step captured for
// the batch size (on first use): one graph launch when the plugin records
// every op of the step, else graphs around the ops it does not record
// (GraphInfo says which). The logits and the picked tokens
// (greedy, or drawn with sp at step) follow, as after Prefill.
func (m *Model) Decode(ids []int32, graph bool, sp *Sampling, step int) error {
	B, s := m.batch, m.s
	if ids != nil {
		if len(ids) != B {
			return fmt.Errorf("llm: %d tokens for a batch of %d requests", len(ids), B)
		}
		if err := m.checkIDs(ids); err != nil {
			return err
		}
	}
	lens, pos, seq := resize(m.scratch.lens, B), resize(m.scratch.pos, B), resize(m.scratch.seq, B)
	m.scratch.lens, m.scratch.pos, m.scratch.seq = lens, pos, seq
	for b := range lens {
		if m.lens[b]+1 > m.capacity() {
			return fmt.Errorf("llm: request %d: %d tokens fill the cache's %d tokens per request", b, m.lens[b], m.capacity())
		}
		pos[b], lens[b], seq[b] = int32(m.lens[b]), m.lens[b]+1, int32(b)
	}
	st := m.stage
	ts, w0 := time.Now(), st.waited
	indptr, indices, last := m.schedule(lens)
	err := st.begin()
	if err == nil && ids != nil {
		err = st.put(sub(m.ids, 0, 4*B), ids)
	}
	if err == nil {
		bi, ip, ix := sub(m.bidx, 0, 4*B), sub(m.indptr, 0, 4*(B+1)), sub(m.indices, 0, 4*len(indices))
		err = firstErr(st.putTable(m.sched.ver, bi, ip, ix, seq, indptr, indices),
			m.putPos(st, pos), st.put(sub(m.lastLen, 0, 4*B), last))
	}
	if err == nil && m.cfg.Scaling != nil {
		err = m.putRope(s, pos)
	}
	// The attention plan runs outside any graph, into the attention's
	// fixed device buffers, before the step's work (FlashInfer's CUDA-graph
	// wrappers' way): the graph replays read the plan of their step.
	if err == nil {
		err = st.end(s)
	}
	m.stageTime += time.Since(ts) - (st.waited - w0)
	if err == nil {
		t0 := time.Now()
		err = m.dec.Plan(s, attention.Schedule{KVIndptr: indptr, KVLastPageLen: last})
		m.planTime += time.Since(t0)
	}
	if err == nil && graph {
		err = m.launchStep(s, sp, step, func(fresh bool) (*stepGraph, error) { return m.stepGraph(sp, fresh) })
	} else if err == nil {
		for _, op := range m.decodeOps() {
			if err = op.run(s); err != nil {
				break
			}
		}
		if err == nil {
			err = m.pick(s, sp, step, m.batch)
		}
	}
	if err != nil {
		return fmt.Errorf("llm: decode: %w", err)
	}
	copy(m.lens, lens)
	return nil
}

// Tokens waits for the work enqueued and returns the tokens the last
// step picked, one per request.
func (m *Model) Tokens() ([]int32, error) {
	ids := make([]byte, 4*m.batch)
	if err := firstErr(m.s.Synchronize(), core.CopyToHost(ids, sub(m.ids, 0, len(ids)))); err != nil {
		return nil, err
	}
	return le.ToInt32s(ids), nil
}

// Logits waits for the work enqueued and returns the last step's f32
// logits, [request][vocab] row-major.
func (m *Model) Logits() ([]float32, error) {
	es := m.logitsType.Size()
	raw := make([]byte, es*m.batch*m.cfg.Vocab)
	if err := firstErr(m.s.Synchronize(), core.CopyToHost(raw, view(m.logits, 0, len(raw)))); err != nil {
		return nil, err
	}
	lg := make([]float32, m.batch*m.cfg.Vocab)
	for i := range lg {
		if es == 2 { // bf16 (an int8 head)
			lg[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		} else {
			lg[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return lg, nil
}

// Run is what Generate returns: Tokens[step][request] (the picked
// tokens); Logits[step] the f32 logits of every request ([request][vocab])
// when collected; DecodeTime the wall time of the timed decode steps.
type Run struct {
	Tokens     [][]int32
	Logits     [][]float32
	DecodeTime time.Duration
	Decoded    int           // decode steps timed
	HostTime   time.Duration // of DecodeTime, the time inside Decode calls less their waits for the device (the host cost of enqueueing the steps)
	// Of HostTime: the time inside the step graph's launch calls (graph
	// mode; 0 eagerly; a recapture's capture not included) and inside the
	// attention plan of each step.
	LaunchTime time.Duration
	PlanTime   time.Duration
	// Of HostTime: the step's inputs (token ids, positions, page tables)
	// computed and uploaded, one copy a step; of StageTime, UploadTime is
	// the time inside the upload's calls (the copy and an event record),
	// the rest the Go work of computing and staging the inputs.
	StageTime  time.Duration
	UploadTime time.Duration
}

// GenOptions: the prompts, either Prompts (one per request, ragged) or
// Prompt (batch x P tokens), placed after Ctx tokens of zero K/V; prompts
// of one token are decoded at once, longer ones prefilled. Steps tokens
// are picked per request (the prefill's counts as the first). Force[k]
// (one token per request), when given, is fed as the k-th token after the
// prompt instead of the one picked (teacher forcing; the picked tokens are
// still reported). Sample draws tokens instead of the argmax. Graph
// replays each step's graph (Decode), Collect reads the logits every step.
// Idle waits for the device before each decode step (outside the timing),
// so that Run.HostTime is the bare cost of enqueueing a step, with no
// wait hidden in the driver's calls (a full launch queue blocks a graph
// launch; the attention plan waits for its pinned buffer); the tokens/s
// of such a run are not the pipelined ones.
type GenOptions struct {
	Prompts [][]int32
	Prompt  []int32
	P, Ctx  int
	Steps   int
	Force   [][]int32
	Sample  *Sampling
	Graph   bool
	Collect bool
	Idle    bool
}

func (o *GenOptions) prompts(B int) ([][]int32, error) {
	if o.Prompts != nil {
		if len(o.Prompts) != B {
			return nil, fmt.Errorf("llm: %d prompts for a batch of %d requests", len(o.Prompts), B)
		}
		return o.Prompts, nil
	}
	if o.P < 1 || len(o.Prompt) != B*o.P {
		return nil, fmt.Errorf("llm: a prompt of %d tokens is not %d requests of %d", len(o.Prompt), B, o.P)
	}
	out := make([][]int32, B)
	for b := range out {
		out[b] = o.Prompt[b*o.P : (b+1)*o.P]
	}
	return out, nil
}

// Generate runs the prompts and the decode steps from empty requests (or
// Ctx tokens of zero K/V).
func (m *Model) Generate(rt *core.Runtime, o GenOptions) (*Run, error) {
	B, s := m.batch, m.s
	prompts, err := o.prompts(B)
	if err != nil {
		return nil, err
	}
	prefill := false
	for _, p := range prompts {
		if len(p) == 0 {
			return nil, errors.New("llm: an empty prompt")
		}
		prefill = prefill || len(p) > 1
		if err := m.checkIDs(p); err != nil {
			return nil, err
		}
		if o.Ctx+len(p)+o.Steps > m.capacity() {
			return nil, fmt.Errorf("llm: context %d + prompt %d + steps %d exceed the cache's %d tokens per request",
				o.Ctx, len(p), o.Steps, m.capacity())
		}
	}
	if o.Steps < 1 || o.Ctx < 0 {
		return nil, fmt.Errorf("llm: %d steps (at least 1) and context %d (not negative)", o.Steps, o.Ctx)
	}
	for k, f := range o.Force {
		if len(f) != B {
			return nil, fmt.Errorf("llm: forced tokens %d: %d for a batch of %d", k, len(f), B)
		}
		if err := m.checkIDs(f); err != nil {
			return nil, fmt.Errorf("%w (forced tokens %d)", err, k)
		}
	}
	if err := m.Reset(o.Ctx); err != nil {
		return nil, err
	}
	run := &Run{}
	hist, err := rt.AllocHostFromHeap(4 * B * o.Steps)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Synchronize(); _ = hist.Free() }()
	step, fed := 0, 0 // steps done; tokens fed after the prompt
	collect := func() error {
		if o.Collect {
			lg, err := m.Logits()
			if err != nil {
				return err
			}
			run.Logits = append(run.Logits, lg)
		}
		pv, err := hist.View(4*B*step, 4*B)
		if err == nil {
			err = s.CopyToPinned(pv, sub(m.ids, 0, 4*B))
		}
		step++
		return err
	}
	if prefill {
		if err := firstErr(m.Prefill(prompts, o.Sample), collect()); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	decoded := 0
	for step < o.Steps {
		var ids []int32
		switch {
		case !prefill && step == 0:
			ids = make([]int32, B)
			for b, p := range prompts {
				ids[b] = p[0]
			}
		case fed < len(o.Force):
			ids = o.Force[fed]
			fed++
		default:
			fed++
		}
		if o.Idle {
			if err := s.Synchronize(); err != nil {
				return nil, err
			}
		}
		th, w0, l0, p0, s0, u0 := time.Now(), m.stage.waited, m.launchTime, m.planTime, m.stageTime, m.stage.upload
		err := m.Decode(ids, o.Graph, o.Sample, step)
		run.HostTime += time.Since(th) - (m.stage.waited - w0)
		run.LaunchTime += m.launchTime - l0
		run.PlanTime += m.planTime - p0
		run.StageTime += m.stageTime - s0
		run.UploadTime += m.stage.upload - u0
		if err := firstErr(err, collect()); err != nil {
			return nil, fmt.Errorf("llm: decode step %d: %w", step, err)
		}
		decoded++
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	run.DecodeTime, run.Decoded = time.Since(t0), decoded
	all := le.ToInt32s(hist.Bytes())
	for i := 0; i < o.Steps; i++ {
		run.Tokens = append(run.Tokens, all[i*B:(i+1)*B])
	}
	return run, nil
}

// bf16 helpers for the reference and the output.
func bf16(v float32) float32 { return floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(v)) }
