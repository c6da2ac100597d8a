// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"path/filepath"
)

// RopeScaling is a Hugging Face rope_scaling (rope_parameters in
// transformers 5): how the rotary frequencies of a long-context model are
// stretched. Type "default" (or a nil *RopeScaling) is plain theta^(-2i/d).
type RopeScaling struct {
	Type            string  // "default", "linear", "dynamic" or "llama3"
	Factor          float64 // linear, dynamic, llama3
	LowFreqFactor   float64 // llama3
	HighFreqFactor  float64 // llama3
	OriginalMaxPos  int     // llama3: original_max_position_embeddings; dynamic: max_position_embeddings
	AttentionFactor float64 // a scale on cos and sin (1 for these types)
}

// hfConfig is the part of a Hugging Face config.json that the supported
// families use. Pointer fields tell a missing key from a zero.
type hfConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"`
}

type hfRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"` // the older spelling
	RopeTheta                     *float64 `json:"rope_theta"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
	AttentionFactor               *float64 `json:"attention_factor"`
}

// families: model_type -> (q/k/v biases always, default tie_word_embeddings).
var families = map[string]struct {
	qkvBias, tied bool
}{
	"llama":   {false, false},
	"mistral": {false, false},
	"qwen2":   {true, false},
}

// ReadConfig parses dir/config.json (a Llama, Mistral or Qwen2 model) into
// a Config with Rope "neox" (the half-split rotation of these families).
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := readRegular(path, maxJSON)
	if err != nil {
		return Config{}, fmt.Errorf("llm: model config: %w", err)
	}
	return parseConfig(path, raw)
}

func parseConfig(path string, raw []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return Config{}, fmt.Errorf("llm: %s: bad JSON: %w", path, err)
	}
	fam, ok := families[h.ModelType]
	if !ok {
		return Config{}, fmt.Errorf("llm: %s: unsupported architecture: model_type %q %v (supported: llama, mistral, qwen2)",
			path, h.ModelType, h.Architectures)
	}
	need := func(name string, v *int) (int, error) {
		if v == nil {
			return 0, fmt.Errorf("llm: %s: %s is missing", path, name)
		}
		if *v <= 0 {
			return 0, fmt.Errorf("llm: %s: %s is %d, not positive", path, name, *v)
		}
		return *v, nil
	}
	c := Config{Rope: "neox", Eps: 1e-6, Theta: 10000, QKVBias: fam.qkvBias, Family: h.ModelType}
	var errs []error
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"hidden_size", h.HiddenSize, &c.Hidden}, {"intermediate_size", h.IntermediateSize, &c.Inter},
		{"num_hidden_layers", h.NumHiddenLayers, &c.Layers}, {"num_attention_heads", h.NumAttentionHeads, &c.Heads},
		{"vocab_size", h.VocabSize, &c.Vocab}} {
		v, err := need(f.name, f.v)
		errs = append(errs, err)
		*f.dst = v
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	c.KVHeads = c.Heads
	if h.NumKeyValueHeads != nil {
		v, err := need("num_key_value_heads", h.NumKeyValueHeads)
		if err != nil {
			return Config{}, err
		}
		c.KVHeads = v
	}
	if h.HeadDim != nil {
		if _, err := need("head_dim", h.HeadDim); err != nil {
			return Config{}, err
		}
		c.HeadSize = *h.HeadDim
	}
	// the sizes that are tensor dimensions (at most math.MaxInt32, as
	// Checkpoint.Tensor reads them; the model multiplies them): hidden,
	// intermediate, and the q and k/v projections' heads x head_dim rows
	for _, d := range []struct {
		name string
		a, b int
	}{{"hidden_size", c.Hidden, 1}, {"intermediate_size", c.Inter, 1},
		{"num_attention_heads x head_dim", c.Heads, c.HeadDim()}, {"num_key_value_heads x head_dim", c.KVHeads, c.HeadDim()}} {
		if hi, lo := bits.Mul64(uint64(d.a), uint64(d.b)); hi != 0 || lo > math.MaxInt32 {
			what := fmt.Sprint(d.a)
			if d.b != 1 {
				what = fmt.Sprintf("%d x %d", d.a, d.b)
			}
			return Config{}, fmt.Errorf("llm: %s: %s is %s, beyond a tensor dimension (at most %d)", path, d.name, what, math.MaxInt32)
		}
	}
	if h.RMSNormEps != nil {
		if *h.RMSNormEps <= 0 || *h.RMSNormEps > 1 {
			return Config{}, fmt.Errorf("llm: %s: rms_norm_eps %g is outside (0, 1]", path, *h.RMSNormEps)
		}
		c.Eps = float32(*h.RMSNormEps)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("llm: %s: hidden_act %q is unsupported (silu only)", path, h.HiddenAct)
	}
	if h.MLPBias {
		return Config{}, fmt.Errorf("llm: %s: mlp_bias is unsupported", path)
	}
	if h.AttentionBias {
		c.QKVBias, c.OBias = true, true
	}
	c.Tied = fam.tied
	if h.TieWordEmbeddings != nil {
		c.Tied = *h.TieWordEmbeddings
	}
	if h.MaxPositionEmbeddings < 0 {
		return Config{}, fmt.Errorf("llm: %s: max_position_embeddings %d is negative", path, h.MaxPositionEmbeddings)
	}
	c.MaxPositions = h.MaxPositionEmbeddings
	if h.SlidingWindow != nil && *h.SlidingWindow > 0 && (h.UseSlidingWindow == nil || *h.UseSlidingWindow) {
		c.SlidingWindow = *h.SlidingWindow
	}
	// transformers 5 writes rope_parameters (with rope_theta inside);
	// earlier versions rope_theta and rope_scaling
	var rp hfRope
	ropeRaw := h.RopeParameters
	if len(ropeRaw) == 0 || string(ropeRaw) == "null" {
		ropeRaw = h.RopeScaling
	}
	if len(ropeRaw) > 0 && string(ropeRaw) != "null" {
		if err := json.Unmarshal(ropeRaw, &rp); err != nil {
			return Config{}, fmt.Errorf("llm: %s: bad rope parameters: %w", path, err)
		}
	}
	switch {
	case rp.RopeTheta != nil:
		c.Theta = *rp.RopeTheta
	case h.RopeTheta != nil:
		c.Theta = *h.RopeTheta
	}
	// the rotary frequencies are computed from float32(theta) (invFreq)
	if t := float32(c.Theta); !(t > 0) || math.IsInf(float64(t), 0) {
		return Config{}, fmt.Errorf("llm: %s: rope_theta %g is not positive and finite as a float32", path, c.Theta)
	}
	rt := rp.RopeType
	if rt == "" {
		rt = rp.Type
	}
	factor := func() (float64, error) {
		if rp.Factor == nil || !(*rp.Factor >= 1) {
			return 0, fmt.Errorf("llm: %s: rope type %q needs a factor of at least 1", path, rt)
		}
		return *rp.Factor, nil
	}
	switch rt {
	case "", "default":
	case "linear", "dynamic":
		f, err := factor()
		if err != nil {
			return Config{}, err
		}
		c.Scaling = &RopeScaling{Type: rt, Factor: f, OriginalMaxPos: h.MaxPositionEmbeddings, AttentionFactor: 1}
		if rt == "dynamic" && h.MaxPositionEmbeddings <= 0 {
			return Config{}, fmt.Errorf("llm: %s: rope type dynamic needs max_position_embeddings", path)
		}
	case "llama3":
		f, err := factor()
		if err != nil {
			return Config{}, err
		}
		if rp.LowFreqFactor == nil || rp.HighFreqFactor == nil || rp.OriginalMaxPositionEmbeddings <= 0 ||
			!(*rp.HighFreqFactor > *rp.LowFreqFactor) || !(*rp.LowFreqFactor > 0) {
			return Config{}, fmt.Errorf("llm: %s: rope type llama3 needs low_freq_factor < high_freq_factor (positive) and original_max_position_embeddings", path)
		}
		c.Scaling = &RopeScaling{Type: rt, Factor: f, LowFreqFactor: *rp.LowFreqFactor, HighFreqFactor: *rp.HighFreqFactor,
			OriginalMaxPos: rp.OriginalMaxPositionEmbeddings, AttentionFactor: 1}
	default:
		return Config{}, fmt.Errorf("llm: %s: unsupported rope type %q (default, linear, dynamic, llama3)", path, rt)
	}
	if c.Scaling != nil && rp.AttentionFactor != nil && *rp.AttentionFactor != 1 {
		return Config{}, fmt.Errorf("llm: %s: rope attention_factor %g is unsupported (1 only)", path, *rp.AttentionFactor)
	}
	if err := c.check(); err != nil {
		return Config{}, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}

// invFreq is the rotary inverse frequencies (head_dim/2 of them) of a
// sequence of seqLen tokens (dynamic scaling depends on it), in float32
// as transformers computes them.
func (c *Config) invFreq(seqLen int) []float32 {
	hd := c.HeadDim()
	theta := c.Theta
	sc := c.Scaling
	if sc != nil && sc.Type == "dynamic" && seqLen > sc.OriginalMaxPos {
		// transformers' dynamic NTK: a larger base past the trained length
		theta *= math.Pow(sc.Factor*float64(seqLen)/float64(sc.OriginalMaxPos)-(sc.Factor-1), float64(hd)/float64(hd-2))
	}
	out := make([]float32, hd/2)
	for i := range out {
		ex := float32(2*i) / float32(hd)
		out[i] = float32(1 / float32(math.Pow(float64(float32(theta)), float64(ex))))
	}
	if sc == nil {
		return out
	}
	switch sc.Type {
	case "linear":
		for i := range out {
			out[i] /= float32(sc.Factor)
		}
	case "llama3":
		lowWave := float64(sc.OriginalMaxPos) / sc.LowFreqFactor
		highWave := float64(sc.OriginalMaxPos) / sc.HighFreqFactor
		for i, f := range out {
			wave := 2 * math.Pi / float64(f)
			switch {
			case wave > lowWave:
				out[i] = f / float32(sc.Factor)
			case wave < highWave:
			default:
				smooth := (float64(sc.OriginalMaxPos)/wave - sc.LowFreqFactor) / (sc.HighFreqFactor - sc.LowFreqFactor)
				out[i] = float32((1-smooth)*float64(f)/sc.Factor + smooth*float64(f))
			}
		}
	}
	return out
}
