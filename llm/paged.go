// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/kvpage"
)

// Paged runs a Model's steps over KV pages that the caller allocates
// (continuous batching, kvpage): each step is any mix of requests, each
// with its own new rows (a prompt chunk, or one decode token), described
// by a kvpage.Step (the device page table, query row offsets, and each
// row's request and position, uploaded by a kvpage.Table on Stream). The
// pages index the model's KV caches (Caches): NumPages of PageSize tokens.
// A step of one row per request runs the decode attention, any other the
// causal prefill attention (a decode row is a one-row prefill). A step's
// Sample rows get their next token (Tokens reads them).
//
// Paged does not use the Model's own request lengths: do not mix Prefill,
// Decode or Generate with Paged steps on one model. Used from one
// goroutine at a time.
type Paged struct {
	m      *Model
	pos    []int32
	gather []int32
	out    []byte
}

// NewPaged makes m runnable by pages. The model must have a prefill
// attention (Options.MaxPrompt above 1).
func NewPaged(m *Model) (*Paged, error) {
	if m == nil || m.s == nil {
		return nil, errors.New("llm: paged: nil or closed model")
	}
	if m.pre == nil {
		return nil, errors.New("llm: paged: the model was made for prompts of one token (Options.MaxPrompt 1): no prefill attention")
	}
	return &Paged{m: m, pos: make([]int32, 0, m.maxT), gather: make([]int32, 0, m.capBatch), out: make([]byte, 4*m.capBatch)}, nil
}

// Stream is the model's stream: upload the steps' tables and copy
// copy-on-write pages on it.
func (p *Paged) Stream() *core.Stream { return p.m.s }

// Caches are the model's KV caches, one per layer (copy a copy-on-write
// page in each).
func (p *Paged) Caches() []*attention.KVCache { return p.m.caches }

// NumPages is the pages of each layer's cache.
func (p *Paged) NumPages() int { return p.m.capBatch * p.m.maxPages }

// PageSize is the tokens of a page.
func (p *Paged) PageSize() int { return p.m.cfg.pageSize() }

// MaxRows is the most new rows of a step (the model's activation
// buffers); MaxBatch the most requests of a step, and of sampled rows.
func (p *Paged) MaxRows() int  { return p.m.maxT }
func (p *Paged) MaxBatch() int { return p.m.capBatch }

// Step enqueues one step: st (uploaded on Stream), ids its Rows tokens in
// row order, sample the rows (ascending, at most MaxBatch) whose logits
// pick a token (none: a step of prompt chunks only): greedy when sp is
// nil, else drawn with sp at seed step (one Sampling for the step;
// per-request sampling plugs in here once the sampler takes per-row
// parameters).
func (p *Paged) Step(st *kvpage.Step, ids, sample []int32, sp *Sampling, step int) error {
	m, s := p.m, p.m.s
	if st == nil {
		return errors.New("llm: paged: nil step")
	}
	T, B := st.Rows, st.Batch
	switch {
	case T <= 0 || B <= 0:
		return fmt.Errorf("llm: paged: a step of %d rows and %d requests (both must be positive)", T, B)
	case T > m.maxT:
		return fmt.Errorf("llm: paged: %d rows exceed the model's %d (Options.Batch x MaxPrompt)", T, m.maxT)
	case B > m.capBatch:
		return fmt.Errorf("llm: paged: %d requests exceed the model's batch of %d", B, m.capBatch)
	case len(ids) != T:
		return fmt.Errorf("llm: paged: %d tokens for a step of %d rows", len(ids), T)
	case len(sample) > m.capBatch:
		return fmt.Errorf("llm: paged: %d sampled rows (at most %d)", len(sample), m.capBatch)
	case len(st.QORows) != B+1 || len(st.KVIndptr) != B+1 || len(st.KVLastPageLen) != B:
		return fmt.Errorf("llm: paged: the step's host arrays (%d, %d, %d) do not match its %d requests", len(st.QORows), len(st.KVIndptr), len(st.KVLastPageLen), B)
	}
	for i, r := range sample {
		if r < 0 || int(r) >= T || (i > 0 && r <= sample[i-1]) {
			return fmt.Errorf("llm: paged: sampled row %d is %d: rows ascend within 0 .. %d", i, r, T-1)
		}
	}
	if err := m.checkIDs(ids); err != nil {
		return fmt.Errorf("llm: paged: %w", err)
	}
	// Each row's position: its request's tokens before the step, plus
	// its place among the request's new rows.
	ps := m.cfg.pageSize()
	pos := p.pos[:0]
	for b := 0; b < B; b++ {
		np := int(st.KVIndptr[b+1] - st.KVIndptr[b])
		tokens := (np-1)*ps + int(st.KVLastPageLen[b])
		rows := int(st.QORows[b+1] - st.QORows[b])
		if np <= 0 || rows < 0 || rows > tokens {
			return fmt.Errorf("llm: paged: request %d of the step: %d pages, %d new rows", b, np, rows)
		}
		for i := range rows {
			pos = append(pos, int32(tokens-rows+i))
		}
	}
	if len(pos) != T {
		return fmt.Errorf("llm: paged: the step's query rows add up to %d, not its %d rows", len(pos), T)
	}
	p.pos = pos
	prefill := T != B
	stg := m.stage
	err := stg.begin()
	if err == nil {
		err = firstErr(stg.put(sub(m.ids, 0, 4*T), ids), stg.put(sub(m.pos, 0, 4*T), pos))
	}
	if err == nil && m.cfg.Scaling != nil {
		err = m.putRope(s, pos)
	}
	if err == nil {
		err = stg.end(s)
	}
	a := m.dec
	if prefill {
		a = m.pre
	}
	if err == nil {
		err = firstErr(a.Plan(s, st.Schedule(prefill)), m.embedTokens(s, T))
	}
	for l := 0; err == nil && l < m.cfg.Layers; l++ {
		err = firstErr(m.partA(s, l, T), p.attend(s, a, st, l, T, prefill), m.partB(s, l, T))
	}
	// The sampled rows' hidden states, in runs of consecutive rows, to hl.
	H := m.cfg.Hidden
	n := len(sample)
	for i := 0; err == nil && i < n; {
		j := i + 1
		for j < n && sample[j] == sample[j-1]+1 {
			j++
		}
		err = s.CopyDevice(view(m.hl, 2*i*H, 2*(j-i)*H), view(m.h, 2*int(sample[i])*H, 2*(j-i)*H))
		i = j
	}
	if err == nil && n > 0 {
		err = p.head(s, n, sp, step)
	}
	if err != nil {
		return fmt.Errorf("llm: paged step: %w", err)
	}
	return nil
}

// attend appends the layer's new K/V rows to the pages and runs the
// step's attention.
func (p *Paged) attend(s *core.Stream, a *attention.Attention, st *kvpage.Step, l, T int, prefill bool) error {
	m := p.m
	c, L := &m.cfg, &m.layers[l]
	Q := c.Heads * c.HeadDim()
	q, k, v := m.qkv(T)
	rows := st.KVRows(k, v)
	ops := attention.Operands{Q: q, O: view(m.o, 0, 2*T*Q), Pages: st.PageTable}
	if prefill {
		ops.QOIndptr = st.QOIndptr
	}
	if err := firstErr(L.cache.Append(s, st.PageTable, st.Batch, rows), a.Run(s, L.cache, ops)); err != nil {
		return fmt.Errorf("llm: layer %d attention: %w", l, err)
	}
	return nil
}

// head: the final norm and the logits of the n gathered rows, and their
// next tokens into ids[0:n].
func (p *Paged) head(s *core.Stream, n int, sp *Sampling, step int) error {
	m := p.m
	H, V := m.cfg.Hidden, m.cfg.Vocab
	d := core.GemmDesc{AType: core.BF16, BType: core.BF16, CType: core.F32, DType: core.F32, TransA: true, M: V, N: n, K: H}
	err := firstErr(m.rmsnorm(s, view(m.xl, 0, 2*n*H), view(m.hl, 0, 2*n*H), m.finalNorm, n),
		s.Gemm(d, core.GemmOperands{A: m.lm.w, B: view(m.xl, 0, 2*n*H), D: view(m.logits, 0, 4*n*V), Alpha: 1}))
	if err != nil {
		return fmt.Errorf("llm: head: %w", err)
	}
	ids := core.ArgBuffer(sub(m.ids, 0, 4*n))
	if sp == nil {
		return s.Launch(m.kArgmax, grid(n, rowBlock(V)), ids, core.ArgBuffer(m.logits), core.ArgScalar[uint64](uint64(n)), core.ArgScalar[uint64](uint64(V)))
	}
	return s.Launch(m.kSample, grid(n, rowBlock(V)), ids, core.ArgBuffer(m.logits), core.ArgScalar[uint64](uint64(n)), core.ArgScalar[uint64](uint64(V)),
		core.ArgScalar[uint64](uint64(sp.TopK)), core.ArgScalar[float32](sp.TopP), core.ArgScalar[float32](sp.Temperature), core.ArgScalar[uint64](sp.Seed+uint64(step)))
}

// Tokens waits for the last step and writes its len(dst) picked tokens
// (one per sampled row, in order) to dst.
func (p *Paged) Tokens(dst []int32) error {
	m := p.m
	if len(dst) == 0 || len(dst) > m.capBatch {
		return fmt.Errorf("llm: paged: %d tokens asked (1 to %d)", len(dst), m.capBatch)
	}
	raw := p.out[:4*len(dst)]
	if err := firstErr(m.s.Synchronize(), core.CopyToHost(raw, sub(m.ids, 0, len(raw)))); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return nil
}

// WeightBytes is the bytes of the weights a decode step reads: every
// block's linears and norms, the final norm and the LM head (the
// embedding's rows gathered are not counted).
func (c *Config) WeightBytes() int64 {
	hd := c.HeadDim()
	Q, KV, H, I := int64(c.Heads*hd), int64(c.KVHeads*hd), int64(c.Hidden), int64(c.Inter)
	per := H*Q + 2*H*KV + Q*H + 3*H*I // q, k, v, o, gate, up, down
	var w int64
	if c.Int8 {
		g := int64(c.groupSize())
		w = per + 2*2*per/g // int8 codes, a bf16 scale and bias per group
	} else {
		w = 2 * per
	}
	return int64(c.Layers)*(w+2*2*H) + 2*H + 2*int64(c.Vocab)*H
}

// KVBytesPerToken is the K and V bytes of one token over all layers
// (bf16).
func (c *Config) KVBytesPerToken() int64 {
	return int64(c.Layers) * 2 * int64(c.KVHeads*c.HeadDim()) * 2
}
