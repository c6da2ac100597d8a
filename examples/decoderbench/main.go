// SPDX-License-Identifier: Apache-2.0

// Command decoderbench measures the Llama-style decoder of examples/llama
// (package github.com/metrale/gpurt/llm, weights from a seed) on a
// backend: decode steps eager and replayed as graphs, tokens per second
// and microseconds a step, as a table, as JSON lines (the metric lines
// of gpurt bench --json) or in the Go benchmark format (for benchstat).
// It was gpurt bench --decoder; it lives in the examples module so that
// gpurt's own module does not require llm's safetensors parser.
//
//	decoderbench -preset tiny -backend mock
//	decoderbench -preset 8b -batch 32 -ctx 8192 -steps 32 -json
package main

import (
	"io"
	"strings"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { cli.Main(run) }

const about = `Measures the Llama-style decoder of examples/llama (weights from seed 1,
bf16) on a backend: decode steps eager and replayed as graphs, tokens per
second. -benchfmt writes the figures in the Go benchmark format as well,
for benchstat.`

// run is the command; it returns the exit status (cli's convention).
func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("decoderbench", "[-preset tiny|1b|8b] [-batch N] [-ctx N] [-steps N] [-warmup N] [-json | -benchfmt FILE] [-backend NAME] [-plugin-path PATH]...",
		about, stdout, stderr)
	var d decoderBench
	fs.StringVar(&d.preset, "preset", "tiny", "model preset: tiny, 1b or 8b")
	fs.IntVar(&d.batch, "batch", 1, "requests decoded together (1 to 4096)")
	fs.IntVar(&d.ctx, "ctx", 0, "context already in the cache (tokens; context, warm-up and steps together at most 1048576)")
	fs.IntVar(&d.steps, "steps", 16, "timed decode steps")
	fs.IntVar(&d.warm, "warmup", 2, "untimed decode steps first")
	asJSON := fs.Bool("json", false, `one JSON object per line: {"metric", "value", "unit", "note"}`)
	benchfmt := fs.String("benchfmt", "", "also write the figures in the Go benchmark format (for benchstat) to this file; \"-\": to stdout instead of the table or JSON")
	rf := fs.Runtime("", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if *asJSON && *benchfmt == "-" {
		return fs.Usage("-json and -benchfmt - both want stdout: give -benchfmt a file")
	}
	if err := d.check(); err != nil {
		return fs.Usage("%v", err)
	}
	rt, dev, err := rf.Open(core.Config{PluginOptions: *options})
	if rf.UnknownBackend(err) {
		return fs.Usage("-backend: %s", strings.TrimPrefix(err.Error(), "gpurt: "))
	}
	if err != nil {
		return fs.Fail(err)
	}
	defer rt.Close()
	var tbl io.Writer = stdout
	if *asJSON || *benchfmt == "-" {
		tbl = nil
	}
	rep, err := d.run(rt, dev, tbl)
	if err != nil {
		return fs.Fail(err)
	}
	if err := rep.Print(stdout, stderr, bench.PrintOptions{JSON: *asJSON, Benchfmt: *benchfmt, Flag: "-benchfmt"}); err != nil {
		return fs.Fail(err)
	}
	return cli.ExitOK
}
