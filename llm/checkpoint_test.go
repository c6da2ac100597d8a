// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/tinyckpt"
)

func editJSON(t *testing.T, path string, f func(m map[string]any)) {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	f(m)
	raw, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
}

// rewriteHeader replaces a safetensors file's header with edit's result
// (the data left as it is).
func rewriteHeader(t *testing.T, path string, edit func(h map[string]any)) {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(raw[:8])
	var h map[string]any
	require.NoError(t, json.Unmarshal(raw[8:8+n], &h))
	edit(h)
	hdr, err := json.Marshal(h)
	require.NoError(t, err)
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(append(out, hdr...), raw[8+n:]...)
	require.NoError(t, os.WriteFile(path, out, 0o644))
}

// Malformed checkpoints: each a clear error naming the tensor or the file
// and the cause, before anything is uploaded.
func TestLoadErrors(t *testing.T) {
	_, dev := openMock(t)
	spec := tinySpecs()["llama gqa untied"]
	sharded := spec
	sharded.Shards = 2
	shard1 := "model-00001-of-00002.safetensors"
	tied := spec
	tied.Tied = true
	for _, tc := range []struct {
		name    string
		spec    tinyckpt.Spec
		corrupt func(t *testing.T, dir string)
		want    []string
	}{
		{"missing tensor", tied, func(t *testing.T, dir string) {
			// written tied (no lm_head.weight), read untied
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["tie_word_embeddings"] = false })
		}, []string{"tensor lm_head.weight is missing from the checkpoint in ", dirOf}},
		{"header with a hole in the data", spec, func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]any) { delete(h, "lm_head.weight") })
		}, []string{"model.safetensors: not a safetensors file: invalid metadata offset"}},
		{"tensor absent from a consistent file", spec, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "config.json")
			editJSON(t, p, func(m map[string]any) { m["num_hidden_layers"] = 3 })
		}, []string{"tensor model.layers.2.input_layernorm.weight is missing", dirOf}},
		{"shape mismatch", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["intermediate_size"] = 256 })
		}, []string{"tensor model.layers.0.mlp.gate_proj.weight in ", "model.safetensors: shape [192 128], the config needs [256 128]"}},
		{"wrong dtype", spec, func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]any) {
				e := h["model.norm.weight"].(map[string]any)
				e["dtype"] = "I16"
			})
		}, []string{"tensor model.norm.weight in ", "model.safetensors: dtype I16 is unsupported (bf16, f16, f32)"}},
		{"truncated file", spec, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, fi.Size()-100))
		}, []string{"model.safetensors: truncated"}},
		{"truncated inside the header", spec, func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "model.safetensors"), 50))
		}, []string{"model.safetensors: truncated: a ", "-byte header in a 50-byte file"}},
		{"empty file", spec, func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "model.safetensors"), 3))
		}, []string{"model.safetensors: truncated: 3 bytes"}},
		{"not safetensors", spec, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			copy(raw[8:], "{{{{")
			require.NoError(t, os.WriteFile(p, raw, 0o644))
		}, []string{"model.safetensors: not a safetensors file"}},
		{"missing shard", sharded, func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, shard1)))
		}, []string{"missing shard ", shard1, "model.safetensors.index.json"}},
		{"index names the wrong shard", sharded, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "model.safetensors.index.json"), func(m map[string]any) {
				m["weight_map"].(map[string]any)["model.norm.weight"] = shard1
			})
		}, []string{"tensor model.norm.weight: ", "names shard " + shard1}},
		{"index outside the folder", sharded, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "model.safetensors.index.json"), func(m map[string]any) {
				m["weight_map"].(map[string]any)["model.norm.weight"] = "../x.safetensors"
			})
		}, []string{"shard \"../x.safetensors\" is not a .safetensors file in the model directory"}},
		{"bad index JSON", sharded, func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": [`), 0o644))
		}, []string{"model.safetensors.index.json: bad JSON"}},
		{"bad config JSON", spec, func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama",`), 0o644))
		}, []string{"config.json: bad JSON"}},
		{"no config", spec, func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "config.json")))
		}, []string{"model config: ", "config.json"}},
		{"no weights", spec, func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
		}, []string{"no *.safetensors file and no model.safetensors.index.json"}},
		{"unsupported architecture", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) {
				m["model_type"], m["architectures"] = "gemma2", []string{"Gemma2ForCausalLM"}
			})
		}, []string{"unsupported architecture: model_type \"gemma2\" [Gemma2ForCausalLM]"}},
		{"unsupported rope type", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) {
				m["rope_parameters"] = map[string]any{"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
			})
		}, []string{"unsupported rope type \"yarn\""}},
		{"llama3 rope without its factors", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) {
				m["rope_parameters"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0}
			})
		}, []string{"rope type llama3 needs low_freq_factor"}},
		{"missing field", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { delete(m, "vocab_size") })
		}, []string{"vocab_size is missing"}},
		{"heads not a multiple of kv heads", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["num_key_value_heads"] = 3 })
		}, []string{"heads 4 is not a multiple of kv heads 3"}},
		{"more layers than tensors", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["num_hidden_layers"] = 2000000000 })
		}, []string{"num_hidden_layers 2000000000 is more than the checkpoint's ", dirOf}},
		{"unsupported activation", spec, func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["hidden_act"] = "gelu" })
		}, []string{"hidden_act \"gelu\" is unsupported"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := tinyckpt.Write(dir, tc.spec)
			require.NoError(t, err)
			tc.corrupt(t, dir)
			m, err := Load(dev, dir, Options{Batch: 1, MaxLen: 16, MaxPrompt: 4})
			if !assert.Error(t, err) {
				m.Close()
				return
			}
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "llm: "), "%q", msg)
			for _, w := range tc.want {
				if w == dirOf {
					w = dir
				}
				assert.Contains(t, msg, w)
			}
		})
	}
}

const dirOf = "<the model directory>"

// A sliding window shorter than the buffers is refused (no sliding-window
// attention); a null or unused one is fine.
func TestConfigSlidingWindowAndDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"window shorter than the model's length", map[string]any{"sliding_window": 8}, "exceeds the model's sliding window 8"},
		{"window null", map[string]any{"sliding_window": nil}, ""},
		{"window unused (qwen2 style)", map[string]any{"sliding_window": 8, "use_sliding_window": false}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dev := openMock(t)
			dir := t.TempDir()
			sp := tinySpecs()["llama gqa untied"]
			sp.Family, sp.ExtraConfig = "mistral", tc.set
			_, err := tinyckpt.Write(dir, sp)
			require.NoError(t, err)
			m, err := Load(dev, dir, Options{Batch: 1, MaxLen: 16, MaxPrompt: 4})
			if tc.want != "" {
				assert.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			defer m.Close()
			c := m.Config()
			assert.Equal(t, "mistral", c.Family)
			assert.Equal(t, 64, c.HeadDim())
			assert.Greater(t, m.LoadStats.Bytes, int64(0))
			assert.Greater(t, m.LoadStats.FileBytes, m.LoadStats.Bytes/2)
		})
	}
}

// transformers' llama3 frequencies for Llama-3.1 (theta 500000, factor
// 8, low 1, high 4, original 8192, head_dim 128): the values transformers 5.25
// computed (float32) at four indices, in the three regions.
func TestLlama3InvFreq(t *testing.T) {
	c := Config{Hidden: 4096, Heads: 32, Theta: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1,
		HighFreqFactor: 4, OriginalMaxPos: 8192, AttentionFactor: 1}}
	inv := c.invFreq(1)
	require.Len(t, inv, 64)
	for _, x := range []struct {
		i    int
		want float64
	}{{0, 1}, {20, 0.016560440883040428}, {30, 0.0013718936825171113}, {63, 3.068925877869333e-07}} {
		// high frequency (kept), high, medium (smoothed), low (divided by 8)
		assert.InEpsilon(t, x.want, float64(inv[x.i]), 2e-7, "inv_freq[%d]", x.i)
	}
}
