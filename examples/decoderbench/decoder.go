// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/llm"
)

// decoderBench is one measurement: the Llama-style decoder of
// examples/llama (weights from seed 1, bf16), decode steps eager and
// replayed as graphs, tokens per second; the same model scripts/gpu_llama.sh
// compares with PyTorch.
type decoderBench struct {
	preset      string
	batch, ctx  int
	steps, warm int
}

// The bounds of the flags: a context of a million tokens is
// beyond any preset's use and keeps every page count far from overflowing.
const (
	maxDecoderBatch  = 4096
	maxDecoderTokens = 1 << 20 // context + warm-up + steps, per request
)

// check is the usage check of the flags; its error names the
// flag and the cause.
func (d decoderBench) check() error {
	if _, ok := llm.Presets[d.preset]; !ok {
		return fmt.Errorf("-preset %q: not a preset (tiny, 1b, 8b)", d.preset)
	}
	switch {
	case d.batch < 1 || d.batch > maxDecoderBatch:
		return fmt.Errorf("-batch %d: want 1 to %d", d.batch, maxDecoderBatch)
	case d.steps < 1 || d.steps > maxDecoderTokens:
		return fmt.Errorf("-steps %d: want 1 to %d", d.steps, maxDecoderTokens)
	case d.warm < 0 || d.warm > maxDecoderTokens:
		return fmt.Errorf("-warmup %d: want 0 to %d", d.warm, maxDecoderTokens)
	case d.ctx < 0 || d.ctx > maxDecoderTokens:
		return fmt.Errorf("-ctx %d: want 0 to %d", d.ctx, maxDecoderTokens)
	case d.ctx+d.steps+d.warm > maxDecoderTokens:
		return fmt.Errorf("-ctx %d, -warmup %d and -steps %d: together at most %d tokens",
			d.ctx, d.warm, d.steps, maxDecoderTokens)
	}
	return nil
}

// run measures the decoder on dev, device 0 of rt, and returns the
// figures; when table is not nil it also prints them there as they come.
func (d decoderBench) run(rt *core.Runtime, dev *core.Device, table io.Writer) (*bench.Report, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	mc := llm.Presets[d.preset]
	mc.Eps, mc.Seed, mc.Rope = 1e-5, 1, "neox"
	_, maj, min := inspect.PluginVersion(rt)
	rep := &bench.Report{Backend: rt.Backend(), Plugin: inspect.PluginPath(rt), ABI: fmt.Sprintf("%d.%d", maj, min),
		Device: "device 0: " + dev.Info().Name}
	m, err := llm.NewModel(dev, mc, d.batch, d.ctx+d.steps+d.warm+2, 1)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := m.SetBatch(d.batch); err != nil {
		return nil, err
	}
	prompt := llm.PromptTokens(mc.Seed, d.batch, 1, mc.Vocab)
	if table != nil {
		fmt.Fprintf(table, "decoder %s on %s: batch %d, context %d, %d decode steps\n", d.preset, rt.Backend(), d.batch, d.ctx, d.steps)
	}
	for _, graph := range []bool{false, true} {
		mode := map[bool]string{false: "eager", true: "graph"}[graph]
		o := llm.GenOptions{Prompt: prompt, P: 1, Ctx: d.ctx, Graph: graph}
		if d.warm > 0 {
			o.Steps = d.warm
			if _, err := m.Generate(rt, o); err != nil {
				return nil, fmt.Errorf("decoder %s warm-up: %w", mode, err)
			}
		}
		o.Steps = d.steps
		r, err := m.Generate(rt, o)
		if err != nil {
			return nil, fmt.Errorf("decoder %s: %w", mode, err)
		}
		if r.Decoded == 0 || r.DecodeTime <= 0 {
			return nil, errors.New("decoder " + mode + ": no decode step was timed")
		}
		perStep := r.DecodeTime.Seconds() / float64(r.Decoded)
		tps := float64(d.batch) / perStep
		rep.Results = append(rep.Results,
			bench.Result{Metric: "decoder_" + mode + "_tokens_per_s", Value: tps, Unit: "tokens/s",
				Note: fmt.Sprintf("%s, batch %d, context %d, %d steps, %.1f us a step", d.preset, d.batch, d.ctx, r.Decoded, perStep*1e6)},
			bench.Result{Metric: "decoder_" + mode + "_step_us", Value: perStep * 1e6, Unit: "us",
				Note: fmt.Sprintf("%s, batch %d, context %d, one decode step", d.preset, d.batch, d.ctx)})
		if table != nil {
			fmt.Fprintf(table, "  %-6s %10.1f tokens/s  %9.1f us a step\n", mode, tps, perStep*1e6)
		}
	}
	return rep, nil
}
