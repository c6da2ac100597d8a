// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			m, err := NewModel(dev, c, 1, ctx+P+steps+1, P)
			require.NoError(t, err)
			defer m.Close()
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
			fused, err := m.Generate(rt, o)
			require.NoError(t, err)
			o.Graph = true
			graph, err := m.Generate(rt, o)
			require.NoError(t, err)
			assert.Equal(t, fused.Tokens, graph.Tokens)
			assert.Equal(t, fused.Logits, graph.Logits)
			// The same model with the one-token GEMMs taken away.
			for i := range m.layers {
				m.layers[i].wqkv, m.layers[i].wgu1 = linear{}, linear{}
			}
			o.Graph = false
			plain, err := m.Generate(rt, o)
			require.NoError(t, err)
			assert.Equal(t, plain.Tokens, fused.Tokens)
			assert.Equal(t, plain.Logits, fused.Logits)
			assert.NotEmpty(t, plain.Logits)
		})
	}
}

// TestAddNormFusion: with int8 weights the residual adds of the output and
// down projections run fused into the next RMSNorm (add_rmsnorm_bf16; the
// down projection's into the next layer's attention norm, the last layer's
// unfused before the final norm); on the mock the tokens and logits are
// those of matmul.Quant + add_T + rmsnorm_T, eager and in graphs, at batch
// 1 (fused QKV) and 3. bf16 weights keep the residual in the GEMM epilogue.
func TestAddNormFusion(t *testing.T) {
	rt, dev := openMock(t)
	for _, tc := range []struct {
		name  string
		batch int
		int8  bool
		obias bool
	}{
		{"int8 batch 1", 1, true, false},
		{"int8 batch 3", 3, true, false},
		{"int8 o bias batch 2", 2, true, true},
		{"bf16 batch 2", 2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			c.Int8, c.OBias = tc.int8, tc.obias
			c.Layers = 3
			const ctx, P, steps = 5, 3, 4
			m, err := NewModel(dev, c, tc.batch, ctx+P+steps+1, P)
			require.NoError(t, err)
			defer m.Close()
			require.NotNil(t, m.kAddNorm, "the mock has add_rmsnorm_bf16")
			for l, L := range m.layers {
				assert.Equal(t, tc.int8 && !tc.obias, m.addNormed(L.wo), "layer %d: output projection fused", l)
				assert.Equal(t, tc.int8, m.addNormed(L.wd), "layer %d: down projection fused", l)
			}
			o := GenOptions{Prompt: PromptTokens(c.Seed, tc.batch, P, c.Vocab), P: P, Ctx: ctx, Steps: steps, Collect: true}
			fused, err := m.Generate(rt, o)
			require.NoError(t, err)
			o.Graph = true
			graph, err := m.Generate(rt, o)
			require.NoError(t, err)
			assert.Equal(t, fused.Tokens, graph.Tokens)
			assert.Equal(t, fused.Logits, graph.Logits)
			m.kAddNorm = nil // add_T and rmsnorm_T
			o.Graph = false
			plain, err := m.Generate(rt, o)
			require.NoError(t, err)
			assert.NotEmpty(t, plain.Logits)
			assert.Equal(t, plain.Tokens, fused.Tokens)
			assert.Equal(t, plain.Logits, fused.Logits)
		})
	}
}
