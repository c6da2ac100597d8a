// SPDX-License-Identifier: Apache-2.0

// Package tinyckpt writes small Hugging Face checkpoints (config.json and
// safetensors, one file or shards with model.safetensors.index.json) of
// random weights, for the llm package's tests and the llama command's:
// Llama, Mistral and Qwen2 families, GQA, tied or untied embeddings, q/k/v
// biases, rope scaling, in bf16, f16 or f32.
package tinyckpt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/nlpodyssey/safetensors"

	"github.com/metrale/gpurt/floatbits"
)

// Spec is a model to write.
type Spec struct {
	Family                                string // llama, mistral or qwen2
	Layers, Hidden, Heads, KVHeads, Inter int
	Vocab, HeadDim                        int // HeadDim 0: not written (Hidden / Heads)
	Tied                                  bool
	Bias                                  bool           // q/k/v biases (qwen2 always has them)
	Theta, Eps                            float64        // 0: 10000, 1e-5
	RopeScaling                           map[string]any // nil: none
	LegacyRope                            bool           // rope_theta and rope_scaling (transformers 4) instead of rope_parameters (5)
	DType                                 string         // bf16 (""), f16 or f32
	Shards                                int            // 0 or 1: model.safetensors; more: shards and an index
	Seed                                  uint64
	MaxPositions                          int // 0: 4096
	ExtraConfig                           map[string]any
}

// Weights are the tensors written, as float64 after the rounding to the
// file's dtype (what a reader gets back), with their shapes.
type Weights struct {
	Spec   Spec
	Values map[string][]float64
	Shapes map[string][]int
}

func (s *Spec) headDim() int {
	if s.HeadDim > 0 {
		return s.HeadDim
	}
	return s.Hidden / s.Heads
}

// HasBias is whether q/k/v carry biases.
func (s *Spec) HasBias() bool { return s.Bias || s.Family == "qwen2" }

// Write writes the checkpoint into dir (created).
func Write(dir string, s Spec) (*Weights, error) {
	if s.Theta == 0 {
		s.Theta = 10000
	}
	if s.Eps == 0 {
		s.Eps = 1e-5
	}
	if s.DType == "" {
		s.DType = "bf16"
	}
	if s.MaxPositions == 0 {
		s.MaxPositions = 4096
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	w := &Weights{Spec: s, Values: map[string][]float64{}, Shapes: map[string][]int{}}
	var names []string
	add := func(name string, shape []int, gen func() float64) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = roundTo(s.DType, gen())
		}
		w.Values[name], w.Shapes[name] = v, shape
		names = append(names, name)
	}
	uni := func(a float64) func() float64 { return func() float64 { return a * (2*rng.Float64() - 1) } }
	norm := func() float64 { return 1 + 0.2*(2*rng.Float64()-1) }
	hd := s.headDim()
	q, kv := s.Heads*hd, s.KVHeads*hd
	amp := func(fan int) float64 { return math.Sqrt(3 / float64(fan)) }
	add("model.embed_tokens.weight", []int{s.Vocab, s.Hidden}, uni(1))
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", []int{s.Hidden}, norm)
		add(p+"self_attn.q_proj.weight", []int{q, s.Hidden}, uni(amp(s.Hidden)))
		add(p+"self_attn.k_proj.weight", []int{kv, s.Hidden}, uni(amp(s.Hidden)))
		add(p+"self_attn.v_proj.weight", []int{kv, s.Hidden}, uni(amp(s.Hidden)))
		if s.HasBias() {
			add(p+"self_attn.q_proj.bias", []int{q}, uni(0.5))
			add(p+"self_attn.k_proj.bias", []int{kv}, uni(0.5))
			add(p+"self_attn.v_proj.bias", []int{kv}, uni(0.5))
		}
		add(p+"self_attn.o_proj.weight", []int{s.Hidden, q}, uni(amp(q)))
		if s.Bias && s.Family != "qwen2" { // attention_bias: o_proj's too
			add(p+"self_attn.o_proj.bias", []int{s.Hidden}, uni(0.5))
		}
		add(p+"post_attention_layernorm.weight", []int{s.Hidden}, norm)
		add(p+"mlp.gate_proj.weight", []int{s.Inter, s.Hidden}, uni(amp(s.Hidden)))
		add(p+"mlp.up_proj.weight", []int{s.Inter, s.Hidden}, uni(amp(s.Hidden)))
		add(p+"mlp.down_proj.weight", []int{s.Hidden, s.Inter}, uni(amp(s.Inter)))
	}
	add("model.norm.weight", []int{s.Hidden}, norm)
	if !s.Tied {
		add("lm_head.weight", []int{s.Vocab, s.Hidden}, uni(amp(s.Hidden)))
	}
	if err := writeConfig(dir, &s); err != nil {
		return nil, err
	}
	shards := max(s.Shards, 1)
	per := (len(names) + shards - 1) / shards
	index := map[string]string{}
	for k := 0; k < shards; k++ {
		part := names[min(k*per, len(names)):min((k+1)*per, len(names))]
		file := "model.safetensors"
		if shards > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, shards)
		}
		views := map[string]safetensors.TensorView{}
		for _, n := range part {
			tv, err := view(s.DType, w.Shapes[n], w.Values[n])
			if err != nil {
				return nil, fmt.Errorf("tinyckpt: %s: %w", n, err)
			}
			views[n] = tv
			index[n] = file
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		if err := safetensors.SerializeToWriter(views, map[string]string{"format": "pt"}, f); err != nil {
			_ = f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	if shards > 1 {
		keys := make([]string, 0, len(index))
		for k := range index {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		raw, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": index}, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), raw, 0o644); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func writeConfig(dir string, s *Spec) error {
	arch := map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[s.Family]
	c := map[string]any{
		"architectures": []string{arch}, "model_type": s.Family, "hidden_size": s.Hidden, "intermediate_size": s.Inter,
		"num_hidden_layers": s.Layers, "num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads,
		"vocab_size": s.Vocab, "rms_norm_eps": s.Eps, "tie_word_embeddings": s.Tied, "hidden_act": "silu",
		"max_position_embeddings": s.MaxPositions, "dtype": map[string]string{"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[s.DType],
	}
	if s.HeadDim > 0 {
		c["head_dim"] = s.HeadDim
	}
	if s.Bias && s.Family != "qwen2" {
		c["attention_bias"] = true
	}
	if s.LegacyRope {
		c["rope_theta"] = s.Theta
		if s.RopeScaling != nil {
			c["rope_scaling"] = s.RopeScaling
		}
	} else {
		rp := map[string]any{"rope_type": "default", "rope_theta": s.Theta}
		for k, v := range s.RopeScaling {
			rp[k] = v
		}
		c["rope_parameters"] = rp
	}
	for k, v := range s.ExtraConfig {
		c[k] = v
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
}

func roundTo(dt string, v float64) float64 {
	switch dt {
	case "bf16":
		return float64(floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(float32(v))))
	case "f16":
		return float64(floatbits.F16ToFloat32(floatbits.F16FromFloat32(float32(v))))
	}
	return float64(float32(v))
}

func view(dt string, shape []int, v []float64) (safetensors.TensorView, error) {
	var d safetensors.DType
	var b []byte
	switch dt {
	case "bf16", "f16":
		d = safetensors.BF16
		if dt == "f16" {
			d = safetensors.F16
		}
		b = make([]byte, 2*len(v))
		for i, x := range v {
			h := floatbits.BF16FromFloat32(float32(x))
			if dt == "f16" {
				h = floatbits.F16FromFloat32(float32(x))
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
	case "f32":
		d = safetensors.F32
		b = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		}
	default:
		return safetensors.TensorView{}, fmt.Errorf("dtype %q", dt)
	}
	sh := make([]uint64, len(shape))
	for i, x := range shape {
		sh[i] = uint64(x)
	}
	return safetensors.NewTensorView(d, sh, b)
}
