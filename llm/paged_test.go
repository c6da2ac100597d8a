// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/kvpage"
	"github.com/metrale/gpurt/sampling"
)

// WeightBytes, the bytes a decode step reads, is every tensor the model
// holds but the embedding (whose rows are gathered), in bf16; the LM head
// is the embedding when tied.
func TestWeightBytes(t *testing.T) {
	for _, name := range []string{"tiny", "1b", "8b"} {
		for _, tied := range []bool{false, true} {
			c := Presets[name]
			c.Tied = tied
			var want int64
			for _, s := range c.specs() {
				if s.name != "embed" {
					want += int64(2 * s.elems())
				}
			}
			if tied {
				want += int64(2 * c.Vocab * c.Hidden)
			}
			assert.Equal(t, want, c.WeightBytes(), "%s tied=%v", name, tied)
		}
		c := Presets[name]
		assert.Equal(t, int64(c.Layers*2*c.KVHeads*c.HeadDim()*2), c.KVBytesPerToken(), name)
		// int8: the head's bf16 bytes become codes and a bf16 scale and
		// bias per group of 64 when it is quantized too
		c.Int8 = true
		i8 := c.WeightBytes()
		c.Int8Head = true
		assert.Equal(t, i8-int64(2*c.Vocab*c.Hidden)+int64(c.Vocab*c.Hidden+4*c.Vocab*c.Hidden/64), c.WeightBytes(), name)
	}
}

// Paged refuses a model without a prefill attention, and every bad step
// with an error naming the cause (nothing enqueued).
func TestPagedChecks(t *testing.T) {
	_, d := openMock(t)
	one := testModel(t, d, tinyConfig(), 2, 32, 1)
	_, err := NewPaged(one)
	require.ErrorContains(t, err, "no prefill attention")
	_, err = NewPaged(nil)
	require.ErrorContains(t, err, "nil or closed model")

	m := testModel(t, d, tinyConfig(), 2, 32, 4)
	p, err := NewPaged(m)
	require.NoError(t, err)
	assert.Equal(t, 8, p.MaxRows())
	assert.Equal(t, 2, p.MaxBatch())
	assert.Equal(t, 16, p.PageSize())
	assert.Equal(t, 4, p.NumPages())
	assert.Len(t, p.Caches(), tinyConfig().Layers)

	tab, err := kvpage.NewTable(d, kvpage.TableConfig{MaxBatch: 2, MaxPages: 4, MaxRows: 8})
	require.NoError(t, err)
	defer tab.Close()
	st := promptStep(t, p, tab, []int32{1, 2, 3})

	require.ErrorContains(t, p.Step(nil, nil, nil, nil, 0), "nil step")
	require.ErrorContains(t, p.Step(&st, []int32{1, 2}, []int32{2}, nil, 0), "2 tokens for a step of 3 rows")
	require.ErrorContains(t, p.Step(&st, []int32{1, 2, 3}, []int32{3}, nil, 0), "sampled row 0 is 3")
	require.ErrorContains(t, p.Step(&st, []int32{1, 2, 3}, []int32{1, 1}, nil, 0), "sampled row 1 is 1")
	require.ErrorContains(t, p.Step(&st, []int32{1, 2, 3}, []int32{0, 1, 2}, nil, 0), "3 sampled rows (at most 2)")
	require.ErrorContains(t, p.Step(&st, []int32{1, 2, 999}, []int32{2}, nil, 0), "outside the vocab")
	big := st
	big.Rows = 9
	require.ErrorContains(t, p.Step(&big, make([]int32, 9), []int32{8}, nil, 0), "9 rows exceed the model's 8")
	require.ErrorContains(t, p.Tokens(nil), "0 tokens asked")

	// A good step: the last row's token, the argmax of its logits.
	require.NoError(t, p.Step(&st, []int32{1, 2, 3}, []int32{2}, nil, 0))
	got := make([]int32, 1)
	require.NoError(t, p.Tokens(got))
	assert.True(t, got[0] >= 0 && int(got[0]) < tinyConfig().Vocab)
}

// promptStep is the uploaded step of one request of prompt, on pages of a
// fresh allocator.
func promptStep(t *testing.T, p *Paged, tab *kvpage.Table, prompt []int32) kvpage.Step {
	t.Helper()
	a, err := kvpage.New(kvpage.Config{NumPages: p.NumPages(), PageSize: p.PageSize(), MaxRequests: 2})
	require.NoError(t, err)
	id, _, err := a.Join(prompt)
	require.NoError(t, err)
	_, _, err = a.Append(id, prompt)
	require.NoError(t, err)
	require.NoError(t, tab.Begin())
	_, err = tab.Add(a, id, len(prompt))
	require.NoError(t, err)
	st, err := tab.Upload(p.Stream())
	require.NoError(t, err)
	return st
}

// newPagedEnv is a tiny model of two requests of 32 tokens (prompts of up
// to 8) on the mock, its Paged and a page table, closed at the test's end.
func newPagedEnv(t *testing.T) (*Model, *Paged, *kvpage.Table) {
	t.Helper()
	return newPagedEnvWith(t, tinyConfig())
}

// newPagedEnvWith is newPagedEnv over a model of config c.
func newPagedEnvWith(t *testing.T, c Config) (*Model, *Paged, *kvpage.Table) {
	t.Helper()
	_, d := openMock(t)
	m := testModel(t, d, c, 2, 32, 8)
	p, err := NewPaged(m)
	require.NoError(t, err)
	return m, p, newPagedTable(t, p)
}

// newPagedTable is a page table for p's model, closed at the test's end.
func newPagedTable(t *testing.T, p *Paged) *kvpage.Table {
	t.Helper()
	tab, err := kvpage.NewTable(p.m.dev, kvpage.TableConfig{MaxBatch: 2, MaxPages: p.NumPages(), MaxRows: p.MaxRows()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tab.Close() })
	return tab
}

// pagedRun prefills two requests, decodes steps tokens each (the second
// request leaves after two, so the batch drops to 1), in graph mode or
// eagerly, and returns every step's tokens. The pages come from a fresh
// allocator each run; tab is reused, as a server does.
func pagedRun(t *testing.T, p *Paged, tab *kvpage.Table, graphs bool, sp *Sampling, steps int) [][]int32 {
	return pagedRunWith(t, p, tab, graphs, steps, func(st *kvpage.Step, ids, sample []int32, k int) error {
		return p.Step(st, ids, sample, sp, k)
	})
}

// pagedRunWith is pagedRun with draw running each step (k: the step).
func pagedRunWith(t *testing.T, p *Paged, tab *kvpage.Table, graphs bool, steps int,
	draw func(st *kvpage.Step, ids, sample []int32, k int) error) [][]int32 {
	t.Helper()
	p.UseGraphs(graphs)
	a, err := kvpage.New(kvpage.Config{NumPages: p.NumPages(), PageSize: p.PageSize(), MaxRequests: 2})
	require.NoError(t, err)
	prompts := [][]int32{{1, 2, 3, 4, 5}, {6, 7, 8}}
	ids := make([]kvpage.ReqID, len(prompts))
	require.NoError(t, tab.Begin())
	var rows []int32
	for i, pr := range prompts {
		ids[i], _, err = a.Join(pr)
		require.NoError(t, err)
		_, _, err = a.Append(ids[i], pr)
		require.NoError(t, err)
		_, err = tab.Add(a, ids[i], len(pr))
		require.NoError(t, err)
		rows = append(rows, pr...)
	}
	st, err := tab.Upload(p.Stream())
	require.NoError(t, err)
	require.NoError(t, draw(&st, rows, []int32{4, 7}, 0))
	last := make([]int32, 2)
	require.NoError(t, p.Tokens(last))
	out := [][]int32{append([]int32(nil), last...)}
	live := ids
	for k := 1; k <= steps; k++ {
		if k == 3 {
			require.NoError(t, a.Leave(live[1]))
			live, last = live[:1], last[:1]
		}
		require.NoError(t, tab.Begin())
		sample := make([]int32, len(live))
		for i, id := range live {
			_, _, err = a.Append(id, last[i:i+1])
			require.NoError(t, err)
			_, err = tab.Add(a, id, 1)
			require.NoError(t, err)
			sample[i] = int32(i)
		}
		st, err := tab.Upload(p.Stream())
		require.NoError(t, err)
		require.NoError(t, draw(&st, append([]int32(nil), last...), sample, k))
		got := make([]int32, len(live))
		require.NoError(t, p.Tokens(got))
		out = append(out, got)
		last = got
	}
	return out
}

// Graph mode replays the decode-only steps as graphs (one per batch size
// and pick) and picks the same tokens as eager steps, greedy and sampled;
// a table with other device arrays captures again.
func TestPagedGraphsMatchEager(t *testing.T) {
	m, p, tab := newPagedEnv(t)
	for _, sp := range []*Sampling{nil, {TopK: 5, TopP: 0.9, Temperature: 0.8, Seed: 7}} {
		eager := pagedRun(t, p, tab, false, sp, 6)
		graph := pagedRun(t, p, tab, true, sp, 6)
		assert.Equal(t, eager, graph, "sampled=%v", sp != nil)
		for _, b := range []int{1, 2} {
			g := m.graphs[graphKey{batch: b, sampled: sp != nil, paged: true}]
			require.NotNil(t, g, "batch %d: no graph captured", b)
			assert.Equal(t, 1, g.launches, "batch %d: the mock records the whole step", b)
		}
	}
	tab2 := newPagedTable(t, p)
	old := m.graphs[graphKey{batch: 1, paged: true}]
	assert.Equal(t, pagedRun(t, p, tab, false, nil, 4), pagedRun(t, p, tab2, true, nil, 4))
	assert.NotSame(t, old, m.graphs[graphKey{batch: 1, paged: true}], "another table's arrays: captured again")
}

// A graph-mode decode step allocates nothing once its graph is captured
// (staging, plan, replay). (An eager step boxes its operand views: about
// 30 small allocations a step on the tiny model.)
func TestPagedStepAllocs(t *testing.T) {
	_, p, tab := newPagedEnv(t)
	a, err := kvpage.New(kvpage.Config{NumPages: p.NumPages(), PageSize: p.PageSize(), MaxRequests: 2})
	require.NoError(t, err)
	var ids [2]kvpage.ReqID
	for i := range ids {
		ids[i], _, err = a.Join([]int32{int32(i + 1)})
		require.NoError(t, err)
		_, _, err = a.Append(ids[i], []int32{int32(i + 1)})
		require.NoError(t, err)
	}
	toks, sample := []int32{3, 4}, []int32{0, 1}
	sp := &Sampling{TopK: 4, TopP: 1, Temperature: 1, Seed: 3}
	p.UseGraphs(true)
	k := 0
	step := func() {
		require.NoError(t, tab.Begin())
		for _, id := range ids {
			_, err = tab.Add(a, id, 1)
			require.NoError(t, err)
		}
		st, err := tab.Upload(p.Stream())
		require.NoError(t, err)
		require.NoError(t, p.Step(&st, toks, sample, sp, k))
		k++
	}
	step() // captures the graph
	assert.Zero(t, testing.AllocsPerRun(20, step))
}

// StepRows draws each row with its own parameters: greedy rows pick what
// Step's argmax picks, sampled rows the same tokens and logprobs in graph
// mode as eagerly; bad parameters are refused with the cause.
func TestPagedStepRows(t *testing.T) {
	m, p, tab := newPagedEnv(t)
	defer p.Close()
	V := m.cfg.Vocab
	params := func(n, k int, greedy bool) *sampling.Batch {
		b, err := sampling.NewBatch(n, V, 4)
		require.NoError(t, err)
		for r := range n {
			q := sampling.Params{Temperature: 0.7 + 0.2*float32(r), TopK: 8, TopP: 0.95, Seed: uint64(11 + r), Offset: uint64(k),
				RepetitionPenalty: 1.1, History: []int32{1, 2}}
			if greedy {
				q = sampling.Greedy()
			}
			require.NoError(t, b.Set(r, &q))
		}
		return b
	}
	var lps [][]float32
	rows := func(greedy bool) func(st *kvpage.Step, ids, sample []int32, k int) error {
		return func(st *kvpage.Step, ids, sample []int32, k int) error {
			if err := p.StepRows(st, ids, sample, params(len(sample), k, greedy)); err != nil {
				return err
			}
			lp := make([]float32, len(sample))
			if err := p.Logprobs(lp); err != nil {
				return err
			}
			for _, v := range lp {
				assert.False(t, math.IsNaN(float64(v)) || v > 0, "logprob %v", v)
			}
			lps = append(lps, lp)
			return nil
		}
	}
	argmax := pagedRun(t, p, tab, false, nil, 5)
	for _, graphs := range []bool{false, true} {
		assert.Equal(t, argmax, pagedRunWith(t, p, tab, graphs, 5, rows(true)), "greedy rows, graphs=%v", graphs)
	}
	lps = nil
	eager := pagedRunWith(t, p, tab, false, 5, rows(false))
	assert.NotEqual(t, argmax, eager, "the draws are not all the argmax")
	eagerLP := lps
	lps = nil
	assert.Equal(t, eager, pagedRunWith(t, p, tab, true, 5, rows(false)), "sampled rows")
	assert.Equal(t, eagerLP, lps, "their logprobs")
	require.NotNil(t, m.graphs[graphKey{batch: 2, paged: true, rowsHist: 5}], "a per-row graph")

	st := promptStep(t, p, tab, []int32{1})
	require.ErrorContains(t, p.StepRows(&st, []int32{1}, []int32{0}, nil), "nil sampling params")
	require.ErrorContains(t, p.StepRows(&st, []int32{1}, []int32{0}, params(2, 0, true)), "params of 2 rows for 1 sampled rows")
	other, err := sampling.NewBatch(1, V+1, 0)
	require.NoError(t, err)
	require.ErrorContains(t, p.StepRows(&st, []int32{1}, []int32{0}, other), fmt.Sprintf("vocabulary of %d, the model's is %d", V+1, V))
	require.NoError(t, p.Step(&st, []int32{1}, []int32{0}, nil, 0))
	require.ErrorContains(t, p.Logprobs(make([]float32, 1)), "drew no tokens with per-request parameters")
}

// An int8 LM head gives bf16 logits: the per-row sampler then reads bf16,
// and its greedy rows still pick the argmax kernel's tokens.
func TestPagedStepRowsInt8Head(t *testing.T) {
	c := tinyConfig()
	c.Int8, c.Int8Head = true, true
	m, p, tab := newPagedEnvWith(t, c)
	defer p.Close()
	require.Equal(t, core.BF16, m.logitsType)
	greedy := func(st *kvpage.Step, ids, sample []int32, k int) error {
		b, err := sampling.NewBatch(len(sample), m.cfg.Vocab, 0)
		if err != nil {
			return err
		}
		for r := range sample {
			g := sampling.Greedy()
			if err := b.Set(r, &g); err != nil {
				return err
			}
		}
		return p.StepRows(st, ids, sample, b)
	}
	argmax := pagedRun(t, p, tab, false, nil, 5)
	assert.Equal(t, argmax, pagedRunWith(t, p, tab, false, 5, greedy))
	assert.Equal(t, argmax, pagedRunWith(t, p, tab, true, 5, greedy), "graphs")
}

// Paged's graph steps take the same recapture path: a refused replay
// (the mock's refuse_replay_nth fault) captures the step again, with the
// same tokens as eager steps.
func TestPagedGraphRecapturesRefusedReplay(t *testing.T) {
	rt := mockrt.Open(t, "refuse_replay_nth=3")
	m := testModel(t, mockrt.Device0(t, rt), tinyConfig(), 2, 32, 8)
	p, err := NewPaged(m)
	require.NoError(t, err)
	tab := newPagedTable(t, p)
	eager := pagedRun(t, p, tab, false, nil, 6)
	assert.Equal(t, eager, pagedRun(t, p, tab, true, nil, 6), "the 3rd replay refused and captured again")
	assert.Equal(t, eager, pagedRun(t, p, tab, true, nil, 6))
}
