// SPDX-License-Identifier: Apache-2.0

// Command gpurt-attnbench times attention over a paged KV cache on one GPU:
// package bench/attnbench, whose doc says what and how
// (scripts/gpu_attention.sh runs it on the H200; it needs no cgo and is
// built with CGO_ENABLED=0). Every line of output is one JSON object.
package main

import (
	"io"
	"os"

	gbench "github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/attnbench"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-attnbench", "[flags]",
		"Times attention over a paged KV cache (PlanAttention, RunAttention) on one GPU; one JSON\nobject per output line (scripts/gpu_attention.sh makes the table). -backend mock\n-shrink N checks the program on the mock.", stdout, stderr)
	paths := fs.PluginPath()
	o := attnbench.Options{Out: stdout}
	fs.IntVar(&o.Iters, "iters", 50, "timed runs per figure")
	fs.StringVar(&o.Only, "only", "", "run only decode or prefill")
	backend := fs.String("backend", "cuda", "backend to open (the mock, with -shrink, checks this program)")
	fs.IntVar(&o.Shrink, "shrink", 1, "divide every length by this, 1 to 8192 (a quick run on the mock)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if err := o.Check(); err != nil {
		return fs.Usage("-%v", err)
	}
	if err := paths.Check(); err != nil {
		return fs.Fail(err)
	}
	t, err := gbench.OpenGPUTimer(*paths, *backend)
	if err != nil {
		return fs.Fail(err)
	}
	defer t.Close()
	o.Timer = t
	if err := attnbench.Run(o); err != nil {
		return fs.Fail(err)
	}
	return cli.ExitOK
}
