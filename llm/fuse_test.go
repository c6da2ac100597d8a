// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core/inspect"
)

// TestOneTokenFusion: at batch 1 a decode step computes Q, K and V with
// one GEMM, and gate and up with one, over weights concatenated at load
// (the parts are views of them), and rotates q's and k's heads with one
// launch (plain rotary frequencies); on the mock (float64 per element)
// the tokens and logits are those of the unfused GEMMs, eager and in
// graphs. With Q/K/V biases there is no QKV fusion.
func TestOneTokenFusion(t *testing.T) {
	rt, dev := openMock(t)
	for _, tc := range []struct {
		name       string
		int8, bias bool
	}{
		{"bf16", false, false},
		{"int8", true, false},
		{"bf16 qkv bias", false, true},
		{"int8 qkv bias", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			c.Int8, c.QKVBias = tc.int8, tc.bias
			const ctx, P, steps = 5, 3, 4
			m := testModel(t, dev, c, 1, ctx+P+steps+1, P)
			// Without GEMM prologues: the linears below are taken away
			// (TestPrologues covers them).
			m.proNorm, m.proSwiGLU = false, false
			Q, KV := c.Heads*c.HeadDim(), c.KVHeads*c.HeadDim()
			for l, L := range m.layers {
				assert.Equal(t, !tc.bias, L.wqkv.set(), "layer %d: QKV fused", l)
				if !tc.bias {
					assert.Equal(t, Q+2*KV, L.wqkv.out, "layer %d", l)
				}
				require.True(t, L.wgu1.set(), "layer %d: gate/up fused", l)
				assert.Equal(t, 2*c.Inter, L.wgu1.out, "layer %d", l)
			}
			o := GenOptions{Prompt: PromptTokens(c.Seed, 1, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true}
			fused := generate(t, rt, m, o)
			o.Graph = true
			sameRun(t, fused, generate(t, rt, m, o))
			// The same model with the one-token GEMMs taken away.
			for i := range m.layers {
				m.layers[i].wqkv, m.layers[i].wgu1 = linear{}, linear{}
			}
			o.Graph = false
			plain := generate(t, rt, m, o)
			sameRun(t, plain, fused)
			assert.NotEmpty(t, plain.Logits)
		})
	}
}

// TestFusedKernels: the built-ins after ABI 1.8 in the decoder. With
// int8 weights the residual adds of the output and down projections run
// fused into the next RMSNorm (add_rmsnorm_bf16; the down projection's into
// the next layer's attention norm, the last layer's unfused before the
// final norm); with rope scaling the rotary embedding is one
// rope_neox_freqs_bf16 launch (q and k together, at any batch) instead of the
// cos/sin tables, a rotate_half GEMM and three element-wise kernels. On the
// mock the tokens and logits are those of a model built without the
// kernels (as on a plugin that lacks them), eager and in graphs, at batch 1
// (fused QKV) and more. bf16 weights keep the residual in the GEMM epilogue.
func TestFusedKernels(t *testing.T) {
	rt, dev := openMock(t)
	for _, tc := range []struct {
		name          string
		batch         int
		int8, obias   bool
		scaling       string
		addNormO, rot bool
	}{
		{"int8 batch 1", 1, true, false, "", true, false},
		{"int8 batch 3", 3, true, false, "", true, false},
		{"int8 o bias batch 2", 2, true, true, "", false, false},
		{"bf16 llama3 rope batch 1", 1, false, false, "llama3", false, true},
		{"bf16 llama3 rope batch 3", 3, false, false, "llama3", false, true},
		{"int8 dynamic rope batch 2", 2, true, false, "dynamic", true, true},
		{"bf16 batch 2", 2, false, false, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			c.Int8, c.OBias = tc.int8, tc.obias
			c.Layers = 3
			switch tc.scaling {
			case "llama3":
				c.Rope = "neox"
				c.Scaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8, AttentionFactor: 1}
			case "dynamic":
				c.Rope = "neox"
				c.Scaling = &RopeScaling{Type: "dynamic", Factor: 2, OriginalMaxPos: 6, AttentionFactor: 1}
			}
			const ctx, P, steps = 5, 3, 4
			gen := func(graph, unfused bool) *Run {
				m, err := NewModelWith(dev, c, Options{Batch: tc.batch, MaxLen: ctx + P + steps + 1, MaxPrompt: P, Unfused: unfused})
				require.NoError(t, err)
				defer m.Close()
				if unfused {
					require.Nil(t, m.kAddNorm)
					require.Nil(t, m.kRopeF)
				} else {
					require.NotNil(t, m.kAddNorm, "the mock has add_rmsnorm_bf16")
					require.NotNil(t, m.kRopeF, "the mock has rope_neox_freqs_bf16")
					for l, L := range m.layers {
						assert.Equal(t, tc.addNormO, m.addNormed(L.wo), "layer %d: output projection fused", l)
						assert.Equal(t, tc.int8, m.addNormed(L.wd), "layer %d: down projection fused", l)
					}
					assert.Equal(t, tc.rot, m.cosQ == nil && m.invFreq != nil, "rotation from inv_freq")
				}
				o := GenOptions{Prompt: PromptTokens(c.Seed, tc.batch, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true, Graph: graph}
				r := generate(t, rt, m, o)
				require.NotEmpty(t, r.Logits)
				return r
			}
			fused := gen(false, false)
			sameRun(t, fused, gen(true, false))
			sameRun(t, gen(false, true), fused)
		})
	}
}

// TestPutPosRowsOfQAndK: a step of several tokens stages, besides the
// tokens' positions, one position per row of its q heads (token-major) and
// then of its k heads, which partA's single rotary launch reads (the
// end-to-end check against the float64 reference is
// TestDecoderMatchesReference at batch 2 and in prefills).
func TestPutPosRowsOfQAndK(t *testing.T) {
	_, dev := openMock(t)
	c := tinyConfig()
	m := testModel(t, dev, c, 3, 8, 1)
	H, KV := c.Heads, c.KVHeads
	require.True(t, m.ropeByPos())
	pos := []int32{5, 9, 2}
	require.NoError(t, m.stage.begin())
	require.NoError(t, m.putPos(m.stage, pos))
	require.NoError(t, m.stage.end(m.s))
	var want []int32
	for _, p := range pos {
		for range H {
			want = append(want, p)
		}
	}
	for _, p := range pos {
		for range KV {
			want = append(want, p)
		}
	}
	assert.Equal(t, want, m.scratch.rpos)
	// One token: the rotation reads pos itself (q's heads then k's at one
	// position), no rows are staged.
	m.scratch.rpos = nil
	require.NoError(t, m.stage.begin())
	require.NoError(t, m.putPos(m.stage, pos[:1]))
	require.NoError(t, m.stage.end(m.s))
	assert.Empty(t, m.scratch.rpos)
	require.NoError(t, m.s.Synchronize())
}

// TestPrologues: on the mock, which runs every GEMM prologue (ABI 1.10),
// a bf16 decoder at batch 1 takes its two norms into the QKV and gate/up
// GEMMs and silu_mul into the down GEMM: three launches fewer a layer and
// a decode step, the same bits as NoPrologues (the mock's prologue rounds
// as the kernel it replaces, so a request's tokens do not depend on its
// batch), graph replay identical to eager. NoPrologues, int8 weights and
// steps of more than one token keep the separate kernels.
func TestPrologues(t *testing.T) {
	rt, dev := openMock(t)
	c := tinyConfig()
	const ctx, P, steps = 6, 3, 5
	build := func(t *testing.T, c Config, batch int, noPro bool) *Model {
		m, err := NewModelWith(dev, c, Options{Batch: batch, MaxLen: ctx + P + steps + 1, MaxPrompt: P, NoPrologues: noPro})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	}
	launches := func(t *testing.T, m *Model, o GenOptions) (*Run, uint64) {
		before := inspect.Metrics(rt).Launches
		r := generate(t, rt, m, o)
		return r, inspect.Metrics(rt).Launches - before
	}
	t.Run("batch 1", func(t *testing.T) {
		m, plain := build(t, c, 1, false), build(t, c, 1, true)
		require.True(t, m.proNorm, "the mock runs RMSNormB")
		require.True(t, m.proSwiGLU, "the mock runs SwiGLUB")
		assert.False(t, plain.proNorm || plain.proSwiGLU, "NoPrologues")
		prompt := PromptTokens(c.Seed, 1, P, c.Vocab)
		o := GenOptions{Prompt: prompt, P: P, Ctx: ctx, Steps: steps, Collect: true}
		fused, nf := launches(t, m, o)
		unfused, nu := launches(t, plain, o)
		// steps-1 decode steps: the prefill gives the first token.
		assert.Equal(t, uint64(3*c.Layers*(steps-1)), nu-nf, "three launches fewer a layer and a decode step")
		sameRun(t, unfused, fused, "the mock's prologues round as the kernels they replace")
		checkAgainstRef(t, c, 1, ctx, P, prompt, fused)
		o.Graph = true
		sameRun(t, fused, generate(t, rt, m, o), "graph replay with prologues")
	})
	t.Run("batch 3", func(t *testing.T) {
		m, plain := build(t, c, 3, false), build(t, c, 3, true)
		o := GenOptions{Prompt: PromptTokens(c.Seed, 3, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true}
		sameRun(t, generate(t, rt, plain, o), generate(t, rt, m, o), "steps of three tokens take no prologue")
	})
	t.Run("int8", func(t *testing.T) {
		c := c
		c.Int8 = true
		m := build(t, c, 1, false)
		assert.False(t, m.proNorm || m.proSwiGLU, "int8 projections run matmul.Quant, which has no prologue")
	})
}

// TestRopeAppend: with rope scaling (the rotation on rope_neox_freqs_T)
// the mock's KV append rotates q and K on the way in (ABI 1.10): one
// launch fewer a layer in every forward pass (prefill and decode, any
// batch), the same bits as NoRopeAppend, graph replay identical to eager.
// Plain rotary frequencies keep their own kernel.
func TestRopeAppend(t *testing.T) {
	rt, dev := openMock(t)
	const ctx, P, steps = 6, 3, 5
	for _, batch := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			c := tinyConfig()
			c.Scaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8, AttentionFactor: 1}
			build := func(no bool) *Model {
				m, err := NewModelWith(dev, c, Options{Batch: batch, MaxLen: ctx + P + steps + 1, MaxPrompt: P, NoRopeAppend: no})
				require.NoError(t, err)
				t.Cleanup(m.Close)
				return m
			}
			m, plain := build(false), build(true)
			require.True(t, m.ropeAppend, "the mock rotates in the append")
			require.False(t, plain.ropeAppend, "NoRopeAppend")
			o := GenOptions{Prompt: PromptTokens(c.Seed, batch, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true}
			count := func(m *Model) (*Run, uint64) {
				before := inspect.Metrics(rt).Launches
				r := generate(t, rt, m, o)
				return r, inspect.Metrics(rt).Launches - before
			}
			fused, nf := count(m)
			unfused, nu := count(plain)
			sameRun(t, unfused, fused, "the append's rotation has the built-in's bits")
			assert.Equal(t, uint64(c.Layers*steps), nu-nf, "a launch fewer a layer in each of the %d forward passes", steps)
			o.Graph = true
			sameRun(t, fused, generate(t, rt, m, o), "graph replay")
		})
	}
	t.Run("plain frequencies", func(t *testing.T) {
		m := testModel(t, dev, tinyConfig(), 1, ctx+P+steps+1, P)
		assert.False(t, m.ropeAppend, "rope_neox_T's arithmetic is not the append's")
	})
}

// TestQKVSplit: an int8 decoder's decode step of batch > 1 tokens
// projects q, k and v with one GEMV over the fused weights and moves its
// rows into q, k and v with one embed_bf16 launch (qkvSplit). On the mock
// (each output rounded once from double) the tokens and logits are those
// of the three separate GEMVs, in eager mode and in graph replays; a batch
// of one token keeps the one-token path, and Q/K/V biases keep the three
// GEMVs.
func TestQKVSplit(t *testing.T) {
	rt, dev := openMock(t)
	const ctx, P, steps = 6, 3, 5
	c := tinyConfig()
	c.Int8 = true
	build := func(t *testing.T, c Config, batch int) *Model {
		m, err := NewModelWith(dev, c, Options{Batch: batch, MaxLen: ctx + P + steps + 1, MaxPrompt: P})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	}
	m, plain := build(t, c, 3), build(t, c, 3)
	require.NotNil(t, m.qkvIdx, "int8, batch 3, no biases: the split path")
	hd := c.HeadDim()
	require.Equal(t, gcd(c.Heads*hd, c.KVHeads*hd), m.qkvUnit)
	plain.qkvIdx = nil // the three GEMVs
	o := GenOptions{Prompt: PromptTokens(c.Seed, 3, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true}
	launches := func(m *Model, o GenOptions) (*Run, uint64) {
		before := inspect.Metrics(rt).Launches
		r := generate(t, rt, m, o)
		return r, inspect.Metrics(rt).Launches - before
	}
	split, ns := launches(m, o)
	three, n3 := launches(plain, o)
	sameRun(t, three, split, "one GEMV and a row move give the three GEMVs' bits")
	assert.Equal(t, uint64(c.Layers*(steps-1)), ns-n3, "one embed_bf16 launch a layer and decode step")
	o.Graph = true
	sameRun(t, split, generate(t, rt, m, o), "graph replay")
	assert.Nil(t, build(t, c, 1).qkvIdx, "batch 1: the one-token path")
	cb := c
	cb.QKVBias = true
	assert.Nil(t, build(t, cb, 3).qkvIdx, "Q/K/V biases: three GEMVs")
}
