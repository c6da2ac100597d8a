// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/llm"
)

// decoderBench is `gpurt bench --decoder PRESET`: the Llama-style decoder
// of examples/llama (weights from seed 1, bf16), decode steps eager and
// replayed as graphs, tokens per second; the same model scripts/gpu_llama.sh
// compares with PyTorch.
type decoderBench struct {
	preset      string
	batch, ctx  int
	steps, warm int
}

func (d decoderBench) run(cfg core.Config, asJSON bool, stdout, stderr io.Writer) error {
	mc, ok := llm.Presets[d.preset]
	if !ok {
		return fmt.Errorf("--decoder %q: not a preset (tiny, 1b, 8b)", d.preset)
	}
	if d.batch < 1 || d.ctx < 0 || d.steps < 1 || d.warm < 0 {
		return fmt.Errorf("--decoder-batch %d and --decoder-steps %d must be at least 1, --decoder-ctx %d not negative",
			d.batch, d.steps, d.ctx)
	}
	mc.Eps, mc.Seed, mc.Rope = 1e-5, 1, "neox"
	rt, err := core.Open(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	dev, err := rt.Device(0)
	if err != nil {
		return err
	}
	m, err := llm.NewModel(dev, mc, d.batch, d.ctx+d.steps+d.warm+2, 1)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.SetBatch(d.batch); err != nil {
		return err
	}
	prompt := llm.PromptTokens(mc.Seed, d.batch, 1, mc.Vocab)
	enc := json.NewEncoder(stdout)
	if !asJSON {
		fmt.Fprintf(stdout, "decoder %s on %s: batch %d, context %d, %d decode steps\n", d.preset, rt.Backend(), d.batch, d.ctx, d.steps)
	}
	for _, graph := range []bool{false, true} {
		mode := map[bool]string{false: "eager", true: "graph"}[graph]
		o := llm.GenOptions{Prompt: prompt, P: 1, Ctx: d.ctx, Graph: graph}
		if d.warm > 0 {
			o.Steps = d.warm
			if _, err := m.Generate(rt, o); err != nil {
				return fmt.Errorf("decoder %s warm-up: %w", mode, err)
			}
		}
		o.Steps = d.steps
		r, err := m.Generate(rt, o)
		if err != nil {
			return fmt.Errorf("decoder %s: %w", mode, err)
		}
		if r.Decoded == 0 || r.DecodeTime <= 0 {
			return fmt.Errorf("decoder %s: no decode step was timed", mode)
		}
		perStep := r.DecodeTime.Seconds() / float64(r.Decoded)
		tps := float64(d.batch) / perStep
		if asJSON {
			_ = enc.Encode(map[string]any{"metric": "decoder_" + mode + "_tokens_per_s", "value": tps, "unit": "tokens/s",
				"note": fmt.Sprintf("%s, batch %d, context %d, %d steps, %.1f us a step", d.preset, d.batch, d.ctx, r.Decoded, perStep*1e6)})
		} else {
			fmt.Fprintf(stdout, "  %-6s %10.1f tokens/s  %9.1f us a step\n", mode, tps, perStep*1e6)
		}
	}
	return nil
}
