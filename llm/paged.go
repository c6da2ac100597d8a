// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/kvpage"
	"github.com/metrale/gpurt/sampling"
)

// Paged runs a Model's steps over KV pages that the caller allocates
// (continuous batching, kvpage): each step is any mix of requests, each
// with its own new rows (a prompt chunk, or one decode token), described
// by a kvpage.Step (the device page table, query row offsets, and each
// row's request and position, uploaded by a kvpage.Table on Stream). The
// pages index the model's KV caches (Caches): NumPages of PageSize tokens.
// A step of one row per request runs the decode attention, any other the
// causal prefill attention (a decode row is a one-row prefill). A step's
// Sample rows get their next token (Tokens reads them): greedy or with one
// Sampling (Step), or each with its own parameters (StepRows, with
// Logprobs). Close frees what StepRows made.
//
// Paged does not use the Model's own request lengths: do not mix Prefill,
// Decode or Generate with Paged steps on one model. Used from one
// goroutine at a time.
type Paged struct {
	m      *Model
	pos    []int32
	gather []int32
	out    []byte
	graphs bool
	// StepRows: sample_rows_f32, the params' device buffer and their
	// pinned staging (made on first use, grown to the largest batch).
	sampler *sampling.Sampler
	params  *core.Buffer
	pstage  *halves
	drawn   int // the rows the last step drew through StepRows (0: it did not)
}

// UseGraphs turns graph mode on or off for later steps. In graph mode a
// step that only decodes (one row per request, every row sampled) replays
// a graph captured for its batch size on first use (the model's graphs,
// kept until Close: a batch-size bucket each), over the step's device
// arrays, whose kvpage table must stay the same (another table's steps
// capture again); the attention plan runs before it, outside the graph.
// Other steps, and ops the plugin does not record, run eagerly. Tokens
// are the same either way.
func (p *Paged) UseGraphs(on bool) { p.graphs = on }

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
// StepRows takes parameters per request).
func (p *Paged) Step(st *kvpage.Step, ids, sample []int32, sp *Sampling, step int) error {
	return p.step(st, ids, sample, picker{sp: sp, step: step})
}

// StepRows is Step with per-request sampling (issue 26): row i of params
// (one row per sampled row, over the model's vocabulary) draws sample[i]'s
// token with its own temperature, top-k, top-p, min-p, penalties over its
// history, and Philox seed and offset (the caller advances the offsets);
// sample_rows_f32 (ABI 1.8) applies the penalties to the logits. Tokens
// reads the tokens and Logprobs their log-probabilities. In graph mode the
// params are uploaded before the replay and the draw is in the graph.
func (p *Paged) StepRows(st *kvpage.Step, ids, sample []int32, params *sampling.Batch) error {
	switch {
	case params == nil:
		return errors.New("llm: paged: nil sampling params (Step draws without per-request parameters)")
	case params.Rows() != len(sample):
		return fmt.Errorf("llm: paged: sampling params of %d rows for %d sampled rows", params.Rows(), len(sample))
	case params.Vocab() != p.m.cfg.Vocab:
		return fmt.Errorf("llm: paged: sampling params over a vocabulary of %d, the model's is %d", params.Vocab(), p.m.cfg.Vocab)
	}
	return p.step(st, ids, sample, picker{rows: params})
}

// picker is how a step's sampled rows get their tokens: one Sampling (sp,
// nil: greedy) at seed step, or parameters per request (rows).
type picker struct {
	sp   *Sampling
	step int
	rows *sampling.Batch
}

func (p *Paged) step(st *kvpage.Step, ids, sample []int32, pk picker) error {
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
		err = firstErr(stg.put(sub(m.ids, 0, 4*T), ids), m.putPos(stg, pos))
	}
	if err == nil && m.cfg.Scaling != nil {
		err = m.putRope(s, pos)
	}
	if err == nil {
		err = stg.end(s)
	}
	p.drawn = 0
	if err == nil && pk.rows != nil {
		err = p.putParams(s, pk.rows)
	}
	a := m.dec
	if prefill {
		a = m.pre
	}
	if err == nil && p.graphs && !prefill && allRows(sample, T) {
		err = a.Plan(s, st.Schedule(false))
		if err == nil {
			err = p.m.launchStep(s, pk.sp, pk.step, func(fresh bool) (*stepGraph, error) { return p.graph(st, pk, fresh) })
		}
		if err != nil {
			return fmt.Errorf("llm: paged step (graph): %w", err)
		}
		if pk.rows != nil {
			p.drawn = T
		}
		return nil
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
		err = firstErr(m.head(s, view(m.hl, 0, 2*n*H), n), p.pick(s, pk, n))
	}
	if err != nil {
		return fmt.Errorf("llm: paged step: %w", err)
	}
	if pk.rows != nil {
		p.drawn = n
	}
	return nil
}

// allRows says whether sample is every row 0 .. T-1.
func allRows(sample []int32, T int) bool {
	if len(sample) != T {
		return false
	}
	for i, r := range sample {
		if int(r) != i {
			return false
		}
	}
	return true
}

// graph is the decode step's graph for st's batch, captured over st's
// device arrays on first use, and again when a step's arrays are others
// or when fresh.
func (p *Paged) graph(st *kvpage.Step, pk picker, fresh bool) (*stepGraph, error) {
	m, B := p.m, st.Batch
	key := graphKey{batch: B, sampled: pk.sp != nil, paged: true}
	bind := [6]core.Region{st.PageTable.Indptr, st.PageTable.Indices, st.PageTable.LastPageLen, st.BatchIndices, st.Positions}
	if pk.rows != nil {
		key.rowsHist = pk.rows.Hist() + 1
		bind[5] = p.params
	}
	if g := m.graphs[key]; g != nil && g.bind == bind && !fresh {
		return g, nil
	}
	// The step's values are read at capture only for the device arrays'
	// addresses: a copy keeps them (st is the caller's).
	cs := *st
	ops := m.stepOps(B, func(s *core.Stream, l int) error { return p.appendKV(s, &cs, l, B) },
		func(s *core.Stream, l int) error { return p.run(s, m.dec, &cs, l, B, false) })
	pk.step = 0 // the seed is set per replay
	g, err := m.captureStep(ops, pk.sp, func(s *core.Stream) error { return p.pick(s, pk, B) })
	if err != nil {
		return nil, err
	}
	g.bind = bind
	m.keepGraph(key, g)
	return g, nil
}

// attend appends the layer's new K/V rows to the pages and runs the
// step's attention.
func (p *Paged) attend(s *core.Stream, a *attention.Attention, st *kvpage.Step, l, T int, prefill bool) error {
	return firstErr(p.appendKV(s, st, l, T), p.run(s, a, st, l, T, prefill))
}

// appendKV appends the layer's T new K/V rows to st's pages.
func (p *Paged) appendKV(s *core.Stream, st *kvpage.Step, l, T int) error {
	_, k, v := p.m.qkv(T)
	if err := p.m.layers[l].cache.Append(s, st.PageTable, st.Batch, p.m.withRope(st.KVRows(k, v), T)); err != nil {
		return fmt.Errorf("llm: layer %d kv append: %w", l, err)
	}
	return nil
}

// run runs the layer's attention of st's T query rows.
func (p *Paged) run(s *core.Stream, a *attention.Attention, st *kvpage.Step, l, T int, prefill bool) error {
	m := p.m
	Q := m.cfg.Heads * m.cfg.HeadDim()
	q, _, _ := m.qkv(T)
	ops := attention.Operands{Q: q, O: view(m.o, 0, 2*T*Q), Pages: st.PageTable}
	if prefill {
		ops.QOIndptr = st.QOIndptr
	}
	if err := a.Run(s, m.layers[l].cache, ops); err != nil {
		return fmt.Errorf("llm: layer %d attention: %w", l, err)
	}
	return nil
}

// pick writes the next tokens of the n rows of logits into ids[0:n]:
// m.pick's argmax or draw, or (StepRows) sample_rows_f32 over the uploaded
// params, whose log-probabilities follow the tokens in ids.
func (p *Paged) pick(s *core.Stream, pk picker, n int) error {
	m := p.m
	if pk.rows == nil {
		return m.pick(s, pk.sp, pk.step, n)
	}
	V, h := m.cfg.Vocab, pk.rows.Hist()
	return p.sampler.Sample(s, sub(m.ids, 0, sampling.OutBytes(n)), view(m.logits, 0, m.logitsType.Size()*n*V),
		view(p.params, 0, sampling.ParamsBytes(n, h)), n, V, h)
}

// putParams uploads b's bytes to the params buffer on s (the sampler and
// the buffers made, or grown, first).
func (p *Paged) putParams(s *core.Stream, b *sampling.Batch) error {
	m := p.m
	if sampling.OutBytes(b.Rows()) > m.ids.Len() {
		return fmt.Errorf("llm: paged: %d sampled rows' tokens and logprobs exceed the token buffer", b.Rows())
	}
	if p.sampler == nil {
		sm, err := sampling.NewSampler(m.dev, m.logitsType)
		if err != nil {
			return fmt.Errorf("llm: paged: %w", err)
		}
		p.sampler = sm
	}
	need := len(b.Bytes())
	if p.params == nil || p.params.Len() < need || p.pstage == nil {
		// A larger history or batch than before: the stream's earlier
		// steps may still read the old buffer.
		if err := s.Synchronize(); err != nil {
			return err
		}
		if p.params != nil {
			_ = p.params.Free()
			p.params = nil
		}
		buf, err := m.dev.Alloc(sampling.ParamsBytes(m.capBatch, b.Hist()))
		if err != nil {
			return fmt.Errorf("llm: paged: sampling params buffer: %w", err)
		}
		p.params = buf
		p.pstage.close()
		if p.pstage, err = newHalves(m, buf.Len(), false); err != nil {
			p.pstage = nil
			return fmt.Errorf("llm: paged: sampling params staging: %w", err)
		}
	}
	return p.pstage.upload(s, view(p.params, 0, need), b.Bytes())
}

// Logprobs waits for the last step and writes the log-probabilities of
// its first len(dst) drawn tokens to dst; the last step must have been a
// StepRows.
func (p *Paged) Logprobs(dst []float32) error {
	m, n := p.m, p.drawn
	switch {
	case n == 0:
		return errors.New("llm: paged: the last step drew no tokens with per-request parameters (StepRows)")
	case len(dst) == 0 || len(dst) > n:
		return fmt.Errorf("llm: paged: %d logprobs asked (1 to the %d rows drawn)", len(dst), n)
	}
	raw := p.out[:4*len(dst)]
	if err := firstErr(m.s.Synchronize(), core.CopyToHost(raw, sub(m.ids, 4*n, 4*len(dst)))); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return nil
}

// Close frees what StepRows made (the model's own buffers are the
// model's); the Paged is not used after.
func (p *Paged) Close() {
	if p.params != nil {
		_ = p.m.s.Synchronize()
		_ = p.params.Free()
		p.params = nil
	}
	p.pstage.close()
	p.pstage = nil
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
	head := 2 * int64(c.Vocab) * H
	if c.Int8 && c.Int8Head {
		head = int64(c.Vocab) * (H + 2*2*H/int64(c.groupSize()))
	}
	return int64(c.Layers)*(w+2*2*H) + 2*H + head
}

// KVBytesPerToken is the K and V bytes of one token over all layers
// (bf16).
func (c *Config) KVBytesPerToken() int64 {
	return int64(c.Layers) * 2 * int64(c.KVHeads*c.HeadDim()) * 2
}
