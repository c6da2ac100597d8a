// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/tinyckpt"
)

// hfRef is a Hugging Face decoder in float64 plain loops, written from the
// transformers definitions (LlamaForCausalLM, Qwen2ForCausalLM) and not
// from this package's runtime path: the weights of a tinyckpt checkpoint
// (rounded to bf16, as gpurt stores them), no other rounding, a KV cache
// per request (K rotated with the frequencies of the forward pass that
// computed it, as transformers' cache does).
type hfRef struct {
	s      tinyckpt.Spec
	w      map[string][]float64
	k, v   [][][][]float64 // [request][layer][pos] -> kvHeads*hd
	theta  float64
	scaled map[string]any
}

func newHFRef(w *tinyckpt.Weights, batch int) *hfRef {
	r := &hfRef{s: w.Spec, w: map[string][]float64{}, theta: w.Spec.Theta, scaled: w.Spec.RopeScaling}
	for n, v := range w.Values {
		b := make([]float64, len(v))
		for i, x := range v {
			b[i] = float64(floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(float32(x))))
		}
		r.w[n] = b
	}
	r.k = make([][][][]float64, batch)
	r.v = make([][][][]float64, batch)
	for b := range r.k {
		r.k[b] = make([][][]float64, w.Spec.Layers)
		r.v[b] = make([][][]float64, w.Spec.Layers)
	}
	return r
}

func (r *hfRef) hd() int {
	if r.s.HeadDim > 0 {
		return r.s.HeadDim
	}
	return r.s.Hidden / r.s.Heads
}

func num(m map[string]any, k string) float64 {
	switch v := m[k].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	}
	return 0
}

// invFreq: transformers' rope init functions (default, linear, dynamic,
// llama3) for a forward pass over positions up to seqLen-1.
func (r *hfRef) invFreq(seqLen int) []float64 {
	d := r.hd()
	base := r.theta
	typ, _ := r.scaled["rope_type"].(string)
	if typ == "" {
		typ, _ = r.scaled["type"].(string)
	}
	factor := num(r.scaled, "factor")
	if typ == "dynamic" && seqLen > r.s.MaxPositions {
		base *= math.Pow(factor*float64(seqLen)/float64(r.s.MaxPositions)-(factor-1), float64(d)/float64(d-2))
	}
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(base, float64(2*i)/float64(d))
	}
	switch typ {
	case "linear":
		for i := range inv {
			inv[i] /= factor
		}
	case "llama3":
		old := num(r.scaled, "original_max_position_embeddings")
		lo, hi := num(r.scaled, "low_freq_factor"), num(r.scaled, "high_freq_factor")
		for i, f := range inv {
			wl := 2 * math.Pi / f
			if wl > old/lo {
				inv[i] = f / factor
			} else if wl >= old/hi {
				sm := (old/wl - lo) / (hi - lo)
				inv[i] = (1-sm)*f/factor + sm*f
			}
		}
	}
	return inv
}

func (r *hfRef) rmsnorm(x []float64, name string) []float64 {
	w := r.w[name]
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+r.s.Eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = w[i] * v * s
	}
	return y
}

// linear: y = W x (+ b), W [out][in] row-major.
func (r *hfRef) linear(name string, x []float64) []float64 {
	w := r.w[name+".weight"]
	out := len(w) / len(x)
	y := make([]float64, out)
	for o := range y {
		s := 0.0
		for i, xv := range x {
			s += w[o*len(x)+i] * xv
		}
		if b, ok := r.w[name+".bias"]; ok {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

// rotate: transformers' apply_rotary_pos_emb (rotate_half) on each head.
func (r *hfRef) rotate(x []float64, pos int, inv []float64) {
	d := r.hd()
	for h := 0; h < len(x)/d; h++ {
		for j := 0; j < d/2; j++ {
			a := float64(pos) * inv[j]
			u, v := x[h*d+j], x[h*d+j+d/2]
			x[h*d+j] = u*math.Cos(a) - v*math.Sin(a)
			x[h*d+j+d/2] = v*math.Cos(a) + u*math.Sin(a)
		}
	}
}

// forward runs tokens of request b at positions pos.. (appending to its
// cache) with the frequencies of a pass of length seqLen, and returns the
// logits of the last token.
func (r *hfRef) forward(b int, tokens []int32, pos, seqLen int) []float64 {
	s := r.s
	d := r.hd()
	inv := r.invFreq(seqLen)
	emb := r.w["model.embed_tokens.weight"]
	var last []float64
	for i, tok := range tokens {
		p := pos + i
		h := slices.Clone(emb[int(tok)*s.Hidden : (int(tok)+1)*s.Hidden])
		for l := 0; l < s.Layers; l++ {
			pre := "model.layers." + itoa(l) + "."
			x := r.rmsnorm(h, pre+"input_layernorm.weight")
			q := r.linear(pre+"self_attn.q_proj", x)
			k := r.linear(pre+"self_attn.k_proj", x)
			v := r.linear(pre+"self_attn.v_proj", x)
			r.rotate(q, p, inv)
			r.rotate(k, p, inv)
			for len(r.k[b][l]) <= p {
				r.k[b][l] = append(r.k[b][l], nil)
				r.v[b][l] = append(r.v[b][l], nil)
			}
			r.k[b][l][p], r.v[b][l][p] = k, v
			o := refAttention(q, r.k[b][l][:p+1], r.v[b][l][:p+1], s.Heads, s.KVHeads, d,
				func(dot float64) float64 { return dot / math.Sqrt(float64(d)) }, func(x float64) float64 { return x })
			for i, y := range r.linear(pre+"self_attn.o_proj", o) {
				h[i] += y
			}
			x = r.rmsnorm(h, pre+"post_attention_layernorm.weight")
			g := r.linear(pre+"mlp.gate_proj", x)
			u := r.linear(pre+"mlp.up_proj", x)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			for i, y := range r.linear(pre+"mlp.down_proj", g) {
				h[i] += y
			}
		}
		if i == len(tokens)-1 {
			x := r.rmsnorm(h, "model.norm.weight")
			head := "lm_head"
			if s.Tied {
				r.w["tied.weight"] = r.w["model.embed_tokens.weight"]
				head = "tied"
			}
			last = r.linear(head, x)
		}
	}
	return last
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// tinySpecs are the CI checkpoints: hidden <= 256, head_dim 64 (the
// mock's attention takes 64, 128, 256), GQA.
func tinySpecs() map[string]tinyckpt.Spec {
	base := tinyckpt.Spec{Family: "llama", Layers: 2, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 64, Inter: 192, Vocab: 300, Seed: 3}
	with := func(f func(s *tinyckpt.Spec)) tinyckpt.Spec {
		s := base
		f(&s)
		return s
	}
	return map[string]tinyckpt.Spec{
		"llama gqa untied":        base,
		"llama tied 3 shards f32": with(func(s *tinyckpt.Spec) { s.Tied, s.Shards, s.DType = true, 3, "f32" }),
		"qwen2 biases tied f16": with(func(s *tinyckpt.Spec) {
			s.Family, s.Heads, s.KVHeads, s.HeadDim, s.Tied, s.DType, s.Theta, s.Eps = "qwen2", 2, 1, 0, true, "f16", 1e6, 1e-6
		}),
		"llama3 rope scaling": with(func(s *tinyckpt.Spec) {
			s.Theta = 500000
			s.RopeScaling = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
				"original_max_position_embeddings": 16}
		}),
		"mistral legacy linear rope": with(func(s *tinyckpt.Spec) {
			s.Family, s.LegacyRope = "mistral", true
			s.RopeScaling = map[string]any{"type": "linear", "factor": 4.0}
		}),
		"llama dynamic rope past max positions": with(func(s *tinyckpt.Spec) {
			s.MaxPositions = 12
			s.RopeScaling = map[string]any{"rope_type": "dynamic", "factor": 2.0}
		}),
		"llama attention_bias, hidden 256": with(func(s *tinyckpt.Spec) {
			s.Hidden, s.Heads, s.KVHeads, s.HeadDim, s.Bias = 256, 4, 1, 0, true
		}),
	}
}

// runAgainstRef loads the checkpoint in dir, runs prompts (ragged) and
// forced tokens, and compares every step's logits with the reference.
func runAgainstRef(t *testing.T, rt *core.Runtime, dev *core.Device, dir string, w *tinyckpt.Weights, o Options,
	prompts [][]int32, force [][]int32, steps int, tol float64, graph bool) {
	m, err := Load(dev, dir, o)
	require.NoError(t, err)
	defer m.Close()
	B := len(prompts)
	run, err := m.Generate(rt, GenOptions{Prompts: prompts, Steps: steps, Force: force, Collect: true, Graph: graph})
	require.NoError(t, err)
	require.Len(t, run.Logits, steps)
	ref := newHFRef(w, B)
	V := w.Spec.Vocab
	worst, checked := 0.0, 0
	for step := 0; step < steps; step++ {
		// one forward pass of the batch, as transformers runs it: the
		// rope's sequence length is the batch's largest position + 1
		seq := 0
		for b, p := range prompts {
			seq = max(seq, len(p)+step)
			_ = b
		}
		for b, p := range prompts {
			var lg []float64
			if step == 0 {
				lg = ref.forward(b, p, 0, seq)
			} else {
				lg = ref.forward(b, []int32{force[step-1][b]}, len(p)+step-1, seq)
			}
			got := run.Logits[step][b*V : (b+1)*V]
			scale := 0.0
			for _, x := range lg {
				scale = math.Max(scale, math.Abs(x))
			}
			diff := 0.0
			for i := range lg {
				diff = math.Max(diff, math.Abs(lg[i]-float64(got[i])))
			}
			worst = math.Max(worst, diff/scale)
			assert.LessOrEqual(t, diff/scale, tol, "request %d step %d: max |gpurt - ref| %.4g of max |ref| %.4g", b, step, diff, scale)
			// the picked token is the argmax of gpurt's logits, and the
			// reference's where its top-2 margin exceeds the tolerance
			best, second := 0, -1
			for i := range lg {
				if lg[i] > lg[best] {
					best, second = i, best
				} else if i != best && (second < 0 || lg[i] > lg[second]) {
					second = i
				}
			}
			tok := int(run.Tokens[step][b])
			assert.Equal(t, float32(slices.Max(got)), got[tok], "request %d step %d: token %d is not gpurt's argmax", b, step, tok)
			if lg[best]-lg[second] > 2*tol*scale {
				checked++
				assert.Equal(t, best, tok, "request %d step %d: the reference's argmax", b, step)
			}
		}
	}
	t.Logf("largest logit difference %.3g of the largest logit; %d argmax checked", worst, checked)
}

func TestHFCheckpointsMatchReference(t *testing.T) {
	rt, dev := openMock(t)
	for name, sp := range tinySpecs() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := tinyckpt.Write(dir, sp)
			require.NoError(t, err)
			// ragged prompts, the K/V of earlier requests' pages shared by
			// none, per-request positions through the decode steps
			prompts := [][]int32{{5, 17, 250, 3, 99, 42, 7, 8, 120, 64, 11}, {1, 2}, {299, 0, 150, 77, 31, 9, 200}}
			force := [][]int32{{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {1, 2, 3}}
			if sp.RopeScaling["rope_type"] == "dynamic" {
				// transformers' dynamic base depends on the batch's longest
				// sequence: equal lengths keep the comparison per request
				prompts = [][]int32{{5, 17, 250, 3, 99, 42, 7, 8, 120, 64, 11}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}
				force = [][]int32{{10, 20}, {40, 50}, {70, 80}, {1, 2}}
			}
			o := Options{Batch: len(prompts), MaxLen: 32, MaxPrompt: 11}
			runAgainstRef(t, rt, dev, dir, w, o, prompts, force, 5, 0.03, false)
		})
	}
}

func TestHFCheckpointGraphAndInt8(t *testing.T) {
	rt, dev := openMock(t)
	sp := tinySpecs()["llama3 rope scaling"]
	dir := t.TempDir()
	w, err := tinyckpt.Write(dir, sp)
	require.NoError(t, err)
	prompts := [][]int32{{5, 17, 250, 3}, {1, 2, 9, 4, 8, 100}}
	force := [][]int32{{10, 20}, {40, 50}, {70, 80}}
	t.Run("graph replay", func(t *testing.T) {
		runAgainstRef(t, rt, dev, dir, w, Options{Batch: 2, MaxLen: 16, MaxPrompt: 6}, prompts, force, 4, 0.03, true)
	})
	t.Run("int8 at load", func(t *testing.T) {
		// group-64 int8 codes of uniform weights: about 1/255 of each
		// group's range per weight
		runAgainstRef(t, rt, dev, dir, w, Options{Batch: 2, MaxLen: 16, MaxPrompt: 6, Int8: true}, prompts, force, 4, 0.06, false)
	})
	t.Run("int8 at load with biases (qwen2)", func(t *testing.T) {
		qdir := t.TempDir()
		qw, err := tinyckpt.Write(qdir, tinySpecs()["qwen2 biases tied f16"])
		require.NoError(t, err)
		runAgainstRef(t, rt, dev, qdir, qw, Options{Batch: 2, MaxLen: 16, MaxPrompt: 6, Int8: true}, prompts, force, 4, 0.06, false)
	})
	t.Run("int8 LM head too, tied (qwen2), graphs", func(t *testing.T) {
		// the head quantized from the tied embedding; bf16 logits
		qdir := t.TempDir()
		qw, err := tinyckpt.Write(qdir, tinySpecs()["qwen2 biases tied f16"])
		require.NoError(t, err)
		var done, total int64
		runAgainstRef(t, rt, dev, qdir, qw, Options{Batch: 2, MaxLen: 16, MaxPrompt: 6, Int8: true, Int8Head: true,
			Progress: func(d, t int64) { done, total = d, t }}, prompts, force, 4, 0.06, true)
		assert.Equal(t, total, done, "the progress ends at its total (the embedding read twice counted)")
	})
}

// Prefill and Decode directly: requests at their own positions, tokens
// kept on the device between steps, sampling.
func TestModelStepsAndSampling(t *testing.T) {
	rt, dev := openMock(t)
	_ = rt
	dir := t.TempDir()
	w, err := tinyckpt.Write(dir, tinySpecs()["llama gqa untied"])
	require.NoError(t, err)
	m, err := Load(dev, dir, Options{Batch: 2, MaxLen: 24, MaxPrompt: 8})
	require.NoError(t, err)
	defer m.Close()
	V := w.Spec.Vocab
	require.NoError(t, m.Prefill([][]int32{{3, 4, 5}, {6, 7, 8, 9, 10, 11, 12}}, nil))
	assert.Equal(t, []int{3, 7}, m.Lens())
	first, err := m.Tokens()
	require.NoError(t, err)
	lg, err := m.Logits()
	require.NoError(t, err)
	for b := range first {
		row := lg[b*V : (b+1)*V]
		assert.Equal(t, slices.Max(row), row[first[b]], "request %d: greedy is the argmax", b)
	}
	require.NoError(t, m.Decode(nil, false, nil, 1)) // the picked tokens, still on the device
	assert.Equal(t, []int{4, 8}, m.Lens())
	// the same through the reference: request b fed its first token
	ref := newHFRef(w, 2)
	ref.forward(0, []int32{3, 4, 5}, 0, 7)
	ref.forward(1, []int32{6, 7, 8, 9, 10, 11, 12}, 0, 7)
	lg, err = m.Logits()
	require.NoError(t, err)
	for b := 0; b < 2; b++ {
		want := ref.forward(b, []int32{first[b]}, []int{3, 7}[b], 8)
		scale, diff := 0.0, 0.0
		for i, x := range want {
			scale = math.Max(scale, math.Abs(x))
			diff = math.Max(diff, math.Abs(x-float64(lg[b*V+i])))
		}
		assert.LessOrEqual(t, diff/scale, 0.03, "request %d after a device-fed step", b)
	}

	// sampling: top-k 3 draws among the 3 largest logits; the same seed
	// gives the same tokens; temperature 0 is greedy
	sp := &Sampling{TopK: 3, TopP: 1, Temperature: 1, Seed: 11}
	var draws [][]int32
	for rep := 0; rep < 2; rep++ {
		run, err := m.Generate(rt, GenOptions{Prompts: [][]int32{{3, 4, 5}, {6, 7}}, Steps: 6, Sample: sp, Collect: true})
		require.NoError(t, err)
		for step, tk := range run.Tokens {
			for b, tok := range tk {
				row := slices.Clone(run.Logits[step][b*V : (b+1)*V])
				slices.Sort(row)
				assert.GreaterOrEqual(t, run.Logits[step][b*V+int(tok)], row[V-3], "step %d request %d: outside the top 3", step, b)
			}
		}
		draws = append(draws, slices.Concat(run.Tokens...))
	}
	assert.Equal(t, draws[0], draws[1], "the same seed draws the same tokens")
	greedy, err := m.Generate(rt, GenOptions{Prompts: [][]int32{{3, 4, 5}, {6, 7}}, Steps: 3, Sample: &Sampling{Temperature: 0, TopP: 1}, Collect: true})
	require.NoError(t, err)
	for step, tk := range greedy.Tokens {
		for b, tok := range tk {
			row := greedy.Logits[step][b*V : (b+1)*V]
			assert.Equal(t, slices.Max(row), row[tok])
		}
	}

	// bad calls
	assert.ErrorContains(t, m.Prefill([][]int32{{1}}, nil), "1 prompts for a batch of 2")
	assert.ErrorContains(t, m.Prefill([][]int32{{1}, {}}, nil), "prompt 1 is empty")
	assert.ErrorContains(t, m.Prefill([][]int32{{1}, {int32(V)}}, nil), "outside the vocab")
	assert.ErrorContains(t, m.Prefill([][]int32{{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 5, 6, 7, 8}}, nil), "exceed the model's 16")
	assert.ErrorContains(t, m.Decode([]int32{1}, false, nil, 0), "1 tokens for a batch of 2")
	require.NoError(t, m.Reset(20))
	assert.ErrorContains(t, m.Prefill([][]int32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {1}}, nil), "exceed the cache's 32 tokens")
}
