// SPDX-License-Identifier: Apache-2.0

// Command gpurt-quantbench times the 1.4 ops (quantized and grouped
// matmul) against cuBLASLt on one GPU: package bench/quantbench, whose doc
// says what and how (scripts/gpu_quant_bench.sh runs it on the H200; it
// needs no cgo and is built with CGO_ENABLED=0). Every line of output is
// one JSON object.
package main

import (
	"fmt"
	"io"

	gbench "github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/quantbench"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-quantbench", "[flags]",
		"Times the quantized and grouped matmuls against cuBLASLt on one GPU; one JSON object\nper output line (scripts/gpu_quant_bench.sh makes the table). -backend mock -shrink N\nchecks the program on the mock.", stdout, stderr)
	o := quantbench.Options{Timed: gbench.Timed{Out: stdout}}
	tf := gbench.AddTimedFlags(fs, &o.Timed, "run only gemv, gemm, grouped or decode16 (the bf16 GEMM slot alone at decode shapes)",
		fmt.Sprintf("divide every size by this, 1 to %d (a quick run on the mock; K stays a multiple of 128)", quantbench.MaxShrink))
	fs.IntVar(&o.RotateMiB, "rotate", 0, "int8 and bf16 matmul: rotate the calls through copies of the weights spanning this many MiB (0: one copy, read by every call; rows get the suffix \" rot\")")
	return tf.TimedMain(fs, args, func() error { return o.Check() }, func(t *gbench.GPUTimer) error {
		o.Timer = t
		return quantbench.Run(o)
	})
}
