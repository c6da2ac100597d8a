// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"math"
	"math/bits"
	"strings"
	"testing"
)

// fitsDim reports whether a*b is a tensor dimension Checkpoint.Tensor can
// return (at most math.MaxInt32), without overflowing on the way.
func fitsDim(a, b int) bool {
	if a < 0 || b < 0 {
		return false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return hi == 0 && lo <= math.MaxInt32
}

// positiveF32 reports whether v is positive and finite in float32, as the
// model computes with it.
func positiveF32(v float64) bool {
	f := float32(v)
	return f > 0 && !math.IsInf(float64(f), 0)
}

// FuzzParseConfig: config.json of arbitrary bytes. parseConfig never
// panics; a config it accepts passes Config.check and has what Load and
// the model rely on: sizes positive and each a tensor dimension a
// checkpoint can hold (heads x head_dim too), head_dim even, heads a
// multiple of kv heads, theta and eps positive and finite in float32,
// max_position_embeddings not negative, a rope scaling of a supported
// type with its parameters; an error starts "llm: " and names the file.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		// Llama 3.1 8B (transformers 4), Mistral 7B, Qwen2.5 0.5B, transformers 5's rope_parameters
		`{"architectures":["LlamaForCausalLM"],"attention_bias":false,"bos_token_id":128000,"hidden_act":"silu","hidden_size":4096,` +
			`"intermediate_size":14336,"max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama","num_attention_heads":32,` +
			`"num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,` +
			`"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"rope_theta":500000.0,` +
			`"tie_word_embeddings":false,"torch_dtype":"bfloat16","vocab_size":128256}`,
		`{"model_type":"mistral","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,` +
			`"num_key_value_heads":8,"head_dim":128,"vocab_size":32768,"rope_theta":1000000.0,"sliding_window":null,"max_position_embeddings":32768}`,
		`{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,"num_attention_heads":14,` +
			`"num_key_value_heads":2,"vocab_size":151936,"rope_scaling":null,"sliding_window":32768,"use_sliding_window":false,"tie_word_embeddings":true}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"rope_parameters":{"rope_type":"default","rope_theta":10000.0}}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"rope_scaling":{"type":"linear","factor":2.0}}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"max_position_embeddings":2048,"rope_scaling":{"rope_type":"dynamic","factor":2.0}}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"rope_parameters":{"rope_type":"yarn","factor":4.0,"attention_factor":1.2}}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"rope_scaling":{"rope_type":"linear","factor":2.0,"attention_factor":2}}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":8192}}`,
		// missing, zero, negative, not numbers, mismatched heads
		`{"model_type":"llama"}`, `{"model_type":"gemma2","architectures":["Gemma2ForCausalLM"]}`,
		`{"model_type":"llama","hidden_size":0,"intermediate_size":-1,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":1}`,
		`{"model_type":"llama","hidden_size":64.5,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":"64","intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":66,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"head_dim":7,"vocab_size":100}`,
		// sizes beyond a tensor dimension, and products of them that wrap
		`{"model_type":"llama","hidden_size":1099511627776,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4294967296,` +
			`"num_key_value_heads":4294967296,"head_dim":4294967296,"vocab_size":100}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":4294967296}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"num_key_value_heads":9223372036854775807}`,
		// floats at the edges
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rms_norm_eps":1e-50}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rms_norm_eps":2}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rope_theta":1e39}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rope_theta":1e-50}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rope_theta":1e999}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rope_theta":0}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":-1}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,` +
			`"hidden_act":"gelu","mlp_bias":true,"attention_bias":true}`,
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"rope_scaling":[1]}`,
		``, `null`, `[]`, `{`, `{"model_type":null}`, `"llama"`,
	} {
		f.Add([]byte(s))
	}
	const path = "/models/m/config.json"
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := parseConfig(path, raw)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "llm: ") || !strings.Contains(msg, path) {
				t.Fatalf("error %q does not start with \"llm: \" and name %s", msg, path)
			}
			return
		}
		if err := c.check(); err != nil {
			t.Fatalf("accepted a config that Config.check refuses: %v", err)
		}
		if _, ok := families[c.Family]; !ok || c.Rope != "neox" {
			t.Fatalf("family %q, rope %q", c.Family, c.Rope)
		}
		hd := c.HeadDim()
		for _, d := range []struct {
			name string
			a, b int
		}{{"hidden", c.Hidden, 1}, {"intermediate", c.Inter, 1}, {"vocab", c.Vocab, 1}, {"head dim", hd, 1},
			{"heads x head dim", c.Heads, hd}, {"kv heads x head dim", c.KVHeads, hd}} {
			if d.a <= 0 || !fitsDim(d.a, d.b) {
				t.Fatalf("%s %d x %d: not a positive tensor dimension (config %+v)", d.name, d.a, d.b, c)
			}
		}
		if c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 || hd%2 != 0 || c.Vocab < 2 ||
			(c.HeadSize == 0 && c.Hidden%c.Heads != 0) {
			t.Fatalf("sizes: %+v", c)
		}
		if !positiveF32(c.Theta) || !(c.Eps > 0 && c.Eps <= 1) {
			t.Fatalf("theta %g, eps %g: not positive and finite in float32", c.Theta, c.Eps)
		}
		if c.MaxPositions < 0 || c.SlidingWindow < 0 {
			t.Fatalf("max positions %d, sliding window %d", c.MaxPositions, c.SlidingWindow)
		}
		if sc := c.Scaling; sc != nil {
			ok := sc.Factor >= 1 && !math.IsInf(sc.Factor, 0) && sc.AttentionFactor == 1
			switch sc.Type {
			case "linear":
			case "dynamic":
				ok = ok && sc.OriginalMaxPos > 0
			case "llama3":
				ok = ok && sc.OriginalMaxPos > 0 && sc.LowFreqFactor > 0 && sc.HighFreqFactor > sc.LowFreqFactor &&
					!math.IsInf(sc.HighFreqFactor, 0)
			default:
				ok = false
			}
			if !ok {
				t.Fatalf("rope scaling %+v", *sc)
			}
		}
	})
}
