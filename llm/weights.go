// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/metrale/gpurt/floatbits"
)

// The weights are a function of the seed that Go and scripts/llama_torch.py
// compute identically (no library RNG): tensor number tid gets the key
//
//	key = lowbias32(lowbias32(tid) + lo32(seed)*0x9E3779B1 + hi32(seed)*0x85EBCA77)  (mod 2^32)
//
// and its element i (row-major, i < 2^32) the hash
//
//	h = lowbias32(lowbias32(i + key) ^ key)
//
// with lowbias32(x): x ^= x>>16; x *= 0x7feb352d; x ^= x>>15;
// x *= 0x846ca68b; x ^= x>>16 (uint32). t = (h>>8) * 2^-24 * 2 - 1 is
// exact in float32 (in [-1, 1)); a matrix element is float32(t) *
// float32(amp), amp = sqrt(3/fan_in) (the embedding: 1); a norm weight
// is float32(t)*float32(0.1) + 1 (two float32 roundings); then rounded
// to bf16 (nearest even).

func lowbias32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

func tensorKey(seed uint64, tid uint32) uint32 {
	return lowbias32(lowbias32(tid) + uint32(seed)*0x9E3779B1 + uint32(seed>>32)*0x85EBCA77)
}

// weightValue is element i of a tensor with key and amplitude amp (norm:
// a norm weight) in float32, before the bf16 rounding.
func weightValue(key uint32, i uint32, amp float32, norm bool) float32 {
	h := lowbias32(lowbias32(i+key) ^ key)
	t := float32(h>>8)*(1.0/16777216.0)*2 - 1
	if norm {
		return t*float32(0.1) + 1
	}
	return t * amp
}

// tensorSpec is one weight tensor: rows x cols, row-major (a vector:
// rows 1), with its Hugging Face name (hf) and, for the seeded weights,
// its number and amplitude.
type tensorSpec struct {
	name       string
	tid        uint32
	rows, cols int
	norm       bool
	amp        float32
	hf         string
}

func (t tensorSpec) elems() int { return t.rows * t.cols }

// Per-layer tensor numbers: layer l's tensors are 1 + l*16 + k.
const (
	tAttnNorm = iota
	tWQ
	tWK
	tWV
	tWO
	tMLPNorm
	tWG
	tWU
	tWD
	tBQ
	tBK
	tBV
	tBO
)

// layerTensor is tensor k of layer l.
func (c *Config) layerTensor(l, k int) tensorSpec {
	h, q, kv, in := c.Hidden, c.Heads*c.HeadDim(), c.KVHeads*c.HeadDim(), c.Inter
	amp := func(fan int) float32 { return float32(math.Sqrt(3 / float64(fan))) }
	tid := uint32(1 + l*16 + k)
	name := fmt.Sprintf("layers.%d.", l)
	hf := fmt.Sprintf("model.layers.%d.", l)
	switch k {
	case tAttnNorm:
		return tensorSpec{name + "attn_norm", tid, 1, h, true, 0, hf + "input_layernorm.weight"}
	case tWQ:
		return tensorSpec{name + "wq", tid, q, h, false, amp(h), hf + "self_attn.q_proj.weight"}
	case tWK:
		return tensorSpec{name + "wk", tid, kv, h, false, amp(h), hf + "self_attn.k_proj.weight"}
	case tWV:
		return tensorSpec{name + "wv", tid, kv, h, false, amp(h), hf + "self_attn.v_proj.weight"}
	case tWO:
		return tensorSpec{name + "wo", tid, h, q, false, amp(q), hf + "self_attn.o_proj.weight"}
	case tMLPNorm:
		return tensorSpec{name + "mlp_norm", tid, 1, h, true, 0, hf + "post_attention_layernorm.weight"}
	case tWG:
		return tensorSpec{name + "wg", tid, in, h, false, amp(h), hf + "mlp.gate_proj.weight"}
	case tWU:
		return tensorSpec{name + "wu", tid, in, h, false, amp(h), hf + "mlp.up_proj.weight"}
	case tWD:
		return tensorSpec{name + "wd", tid, h, in, false, amp(in), hf + "mlp.down_proj.weight"}
	case tBQ:
		return tensorSpec{name + "bq", tid, 1, q, false, amp(h), hf + "self_attn.q_proj.bias"}
	case tBK:
		return tensorSpec{name + "bk", tid, 1, kv, false, amp(h), hf + "self_attn.k_proj.bias"}
	case tBV:
		return tensorSpec{name + "bv", tid, 1, kv, false, amp(h), hf + "self_attn.v_proj.bias"}
	case tBO:
		return tensorSpec{name + "bo", tid, 1, h, false, amp(q), hf + "self_attn.o_proj.bias"}
	}
	panic("llm: no layer tensor " + fmt.Sprint(k))
}

func (c *Config) embedTensor() tensorSpec {
	return tensorSpec{"embed", 0, c.Vocab, c.Hidden, false, 1, "model.embed_tokens.weight"}
}

func (c *Config) finalNormTensor() tensorSpec {
	return tensorSpec{"final_norm", uint32(1 + c.Layers*16), 1, c.Hidden, true, 0, "model.norm.weight"}
}

func (c *Config) lmHeadTensor() tensorSpec {
	return tensorSpec{"lm_head", uint32(2 + c.Layers*16), c.Vocab, c.Hidden, false, float32(math.Sqrt(3 / float64(c.Hidden))), "lm_head.weight"}
}

// specs lists every tensor the model reads (the LM head unless tied,
// the biases the config has), in upload order.
func (c *Config) specs() []tensorSpec {
	out := []tensorSpec{c.embedTensor(), c.finalNormTensor()}
	if !c.Tied {
		out = append(out, c.lmHeadTensor())
	}
	for l := 0; l < c.Layers; l++ {
		for k := tAttnNorm; k <= tWD; k++ {
			out = append(out, c.layerTensor(l, k))
		}
		if c.QKVBias {
			out = append(out, c.layerTensor(l, tBQ), c.layerTensor(l, tBK), c.layerTensor(l, tBV))
		}
		if c.OBias {
			out = append(out, c.layerTensor(l, tBO))
		}
	}
	return out
}

// genBF16 fills dst (t.elems() values) with t's bf16 bits, on every CPU.
func genBF16(seed uint64, t tensorSpec, dst []uint16) {
	key := tensorKey(seed, t.tid)
	n := t.elems()
	workers := runtime.GOMAXPROCS(0)
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				dst[i] = floatbits.BF16FromFloat32(weightValue(key, uint32(i), t.amp, t.norm))
			}
		}(lo, hi)
	}
	wg.Wait()
}

// seedSource is the weights hashed from a seed.
type seedSource struct{ seed uint64 }

func (s seedSource) fill(t tensorSpec, lo int, dst []byte) error {
	key := tensorKey(s.seed, t.tid)
	for i := 0; i < len(dst)/2; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], floatbits.BF16FromFloat32(weightValue(key, uint32(lo+i), t.amp, t.norm)))
	}
	return nil
}

func (s seedSource) floats(t tensorSpec) ([]float32, error) { return genFloat(s.seed, t), nil }

// genFloat returns t's values (bf16-rounded) widened to float32.
func genFloat(seed uint64, t tensorSpec) []float32 {
	b := make([]uint16, t.elems())
	genBF16(seed, t, b)
	out := make([]float32, len(b))
	for i, v := range b {
		out[i] = floatbits.BF16ToFloat32(v)
	}
	return out
}

// PromptTokens are the prompt's ids: request b's token j is
// lowbias32(key + b*prompt + j) mod vocab, key = tensorKey(seed, 0xFFFFFFFF).
func PromptTokens(seed uint64, batch, prompt, vocab int) []int32 {
	key := tensorKey(seed, 0xFFFFFFFF)
	out := make([]int32, batch*prompt)
	for i := range out {
		out[i] = int32(lowbias32(key+uint32(i)) % uint32(vocab))
	}
	return out
}
