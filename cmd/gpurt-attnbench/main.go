// SPDX-License-Identifier: Apache-2.0

// Command gpurt-attnbench times attention over a paged KV cache on one GPU:
// package bench/attnbench, whose doc says what and how
// (scripts/gpu_attention.sh runs it on the H200; it needs no cgo and is
// built with CGO_ENABLED=0). Every line of output is one JSON object.
package main

import (
	"io"

	gbench "github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/attnbench"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-attnbench", "[flags]",
		"Times attention over a paged KV cache (PlanAttention, RunAttention) on one GPU; one JSON\nobject per output line (scripts/gpu_attention.sh makes the table). -backend mock\n-shrink N checks the program on the mock.", stdout, stderr)
	o := attnbench.Options{Timed: gbench.Timed{Out: stdout}}
	tf := gbench.AddTimedFlags(fs, &o.Timed, "run only decode or prefill",
		"divide every length by this, 1 to 8192 (a quick run on the mock)")
	return tf.TimedMain(fs, args, func() error { return o.Check() }, func(t *gbench.GPUTimer) error {
		o.Timer = t
		return attnbench.Run(o)
	})
}
