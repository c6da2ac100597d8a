// SPDX-License-Identifier: Apache-2.0

// Command llama runs a Llama-style decoder through gpurt: weights
// generated from a seed (the same as scripts/llama_torch.py's), prefill of
// a prompt, then greedy decode steps over a paged KV cache, eagerly and
// replayed as graphs (each step's launches and GEMMs between two
// attentions are one graph; the KV appends and attentions stay eager, as
// graphs do not record them). Output: JSON lines, one per step (tokens of
// every request, with -logits the f32 logits of request 0) and one summary
// per run (tokens per second).
//
//	llama -preset 1b -batch 1,32 -ctx 1024,8192 -steps 32 -modes eager,graph
//	llama -preset tiny -backend mock -prompt 8 -steps 8 -logits
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/llm"
)

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a list of non-negative integers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "llama:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("llama", flag.ContinueOnError)
	preset := fs.String("preset", "tiny", "tiny, 1b or 8b (the other flags override its fields)")
	layers := fs.Int("layers", 0, "decoder layers")
	hidden := fs.Int("hidden", 0, "hidden size")
	heads := fs.Int("heads", 0, "query heads")
	kvHeads := fs.Int("kv-heads", 0, "KV heads")
	inter := fs.Int("inter", 0, "MLP intermediate size")
	vocab := fs.Int("vocab", 0, "vocabulary")
	theta := fs.Float64("theta", 0, "rotary base")
	rope := fs.String("rope", "neox", "rotary style: neox (half-split) or llama (interleaved)")
	seed := fs.Uint64("seed", 1, "weights seed")
	weights := fs.String("weights", "bf16", "bf16, or int8 (MLX affine, group 64) for the blocks' linears")
	batches := fs.String("batch", "1", "batch sizes, comma-separated")
	ctxs := fs.String("ctx", "0", "context lengths (zero K/V already in the cache), comma-separated")
	prompt := fs.Int("prompt", 1, "prompt tokens per request (1: decode at once; more: prefill)")
	steps := fs.Int("steps", 8, "tokens generated per request (a prefill's counts as the first)")
	warm := fs.Int("warmup", 2, "untimed decode steps before each timed run")
	modes := fs.String("modes", "eager,graph", "eager, graph or both")
	logits := fs.Bool("logits", false, "emit request 0's logits every step (synchronizes every step)")
	logitsN := fs.Int("logits-n", 512, "with -logits: how many of request 0's logits (the first ones; 0: all)")
	backend := fs.String("backend", "", "gpurt backend (auto, cuda, metal, mock)")
	dir := fs.String("plugin-dir", "", "folder or file of the plugin (default: next to the executable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, ok := llm.Presets[*preset]
	if !ok {
		return fmt.Errorf("unknown preset %q (tiny, 1b, 8b)", *preset)
	}
	cfg.Eps, cfg.Seed, cfg.Rope = 1e-5, *seed, *rope
	for _, o := range []struct {
		v   int
		dst *int
	}{{*layers, &cfg.Layers}, {*hidden, &cfg.Hidden}, {*heads, &cfg.Heads}, {*kvHeads, &cfg.KVHeads}, {*inter, &cfg.Inter}, {*vocab, &cfg.Vocab}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	if *theta != 0 {
		cfg.Theta = *theta
	}
	switch *weights {
	case "bf16":
	case "int8":
		cfg.Int8 = true
	default:
		return fmt.Errorf("-weights %q is neither bf16 nor int8", *weights)
	}
	bs, err := ints(*batches)
	if err != nil {
		return fmt.Errorf("-batch: %w", err)
	}
	cs, err := ints(*ctxs)
	if err != nil {
		return fmt.Errorf("-ctx: %w", err)
	}
	var ms []string
	for _, m := range strings.Split(*modes, ",") {
		if m != "eager" && m != "graph" {
			return fmt.Errorf("-modes: %q is neither eager nor graph", m)
		}
		ms = append(ms, m)
	}
	if *prompt < 1 || *steps < 1 || *warm < 0 {
		return fmt.Errorf("-prompt %d and -steps %d must be at least 1, -warmup %d not negative", *prompt, *steps, *warm)
	}
	maxB, maxC := 0, 0
	for _, b := range bs {
		maxB = max(maxB, b)
	}
	for _, c := range cs {
		maxC = max(maxC, c)
	}
	if maxB == 0 {
		return fmt.Errorf("-batch: batch sizes must be positive")
	}
	var paths []string
	if *dir != "" {
		paths = []string{*dir}
	}
	rt, err := core.Open(core.Config{PluginPaths: paths, Backend: *backend})
	if err != nil {
		return err
	}
	defer rt.Close()
	dev, err := rt.Device(0)
	if err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)
	m, err := llm.NewModel(dev, cfg, maxB, maxC+*prompt+*steps+*warm+1, *prompt)
	if err != nil {
		return err
	}
	defer m.Close()
	_ = out.Encode(map[string]any{"kind": "config", "impl": "gpurt", "backend": rt.Backend(), "preset": *preset,
		"layers": cfg.Layers, "hidden": cfg.Hidden, "heads": cfg.Heads, "kv_heads": cfg.KVHeads, "inter": cfg.Inter,
		"vocab": cfg.Vocab, "theta": cfg.Theta, "rope": cfg.Rope, "seed": cfg.Seed, "weights": *weights})
	var failed error
	for _, b := range bs {
		if err := m.SetBatch(b); err != nil {
			return err
		}
		for _, c := range cs {
			p := llm.PromptTokens(cfg.Seed, b, *prompt, cfg.Vocab)
			for _, mode := range ms {
				if mode == "graph" && cfg.Int8 {
					_ = out.Encode(map[string]any{"kind": "skip", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c,
						"why": "graphs do not record quant_matmul (ABI 1.3 records launches, GEMMs, copies, memsets, events)"})
					continue
				}
				o := llm.GenOptions{Prompt: p, P: *prompt, Ctx: c, Graph: mode == "graph"}
				var r *llm.Run
				var err error
				if *warm > 0 {
					o.Steps = *warm
					_, err = m.Generate(rt, o)
				}
				if err == nil {
					o.Steps, o.Collect = *steps, *logits
					r, err = m.Generate(rt, o)
				}
				if err != nil { // reported; the other runs go on
					failed = fmt.Errorf("batch %d ctx %d %s: %w", b, c, mode, err)
					fmt.Fprintln(os.Stderr, "llama:", failed)
					_ = out.Encode(map[string]any{"kind": "error", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "error": failed.Error()})
					continue
				}
				for i, tk := range r.Tokens {
					line := map[string]any{"kind": "step", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "step": i, "tokens": tk}
					if *logits {
						n := cfg.Vocab
						if *logitsN > 0 {
							n = min(n, *logitsN)
						}
						line["logits"] = r.Logits[i][:n]
					}
					_ = out.Encode(line)
				}
				sum := map[string]any{"kind": "summary", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "weights": *weights,
					"decode_steps": r.Decoded, "preset": *preset}
				if r.Decoded > 0 {
					per := r.DecodeTime.Seconds() / float64(r.Decoded)
					sum["ms_per_step"] = per * 1e3
					sum["tokens_per_s"] = float64(b) / per
				}
				_ = out.Encode(sum)
			}
		}
	}
	return failed
}
