// SPDX-License-Identifier: Apache-2.0

// Command gpurt-decodestep runs the decode-step benchmark of issue 11
// (package bench/decodestep): per config and batch, the MLP decode step
// eagerly and replayed as a graph, after a comparison of small configs
// with the Go reference. Every output line is one JSON object
// (decodestep.Result); scripts/gpu_decodestep.sh runs it on the H200
// beside scripts/decodestep_torch.py and prints the table. Built with
// CGO_ENABLED=0.
//
//	gpurt-decodestep -plugin-path build              # cuda, the three configs, batch 1 and 16
//	gpurt-decodestep -backend mock -configs 64/160/3 -steps 3 -check-configs 64/160/2
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/metrale/gpurt/bench/decodestep"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-decodestep", "[flags]",
		"The decode-step benchmark (package bench/decodestep): per config and batch, the MLP\ndecode step eagerly and replayed as a graph, after a comparison of small configs\nwith the Go reference. One JSON object per output line.", stdout, stderr)
	rf := fs.Runtime("cuda", "backend: cuda, mock, ...")
	configs := fs.String("configs", "4096/14336/32,2048/8192/16,1024/4096/24", "hidden/intermediate/layers, comma-separated; \"none\": only the reference checks")
	batches := fs.String("batches", "1,16", "batch sizes, comma-separated")
	checks := fs.String("check-configs", "256/512/2,100/260/2", "configs compared with the Go reference first (at every batch size); \"none\" for none")
	steps := fs.Int("steps", 100, "timed steps per mode")
	warmup := fs.Int("warmup", 5, "untimed steps before timing")
	norm := fs.String("norm", "auto", "rmsnorm: auto (ptx on cuda, else the built-in rmsnorm_bf16 where the plugin has it, else composed), ptx, builtin, composed")
	variants := fs.String("variants", "plain,fused", "plain (6 operations a layer) and/or fused (gate+up one batched GEMM, residual in the down GEMM: 4)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	var cs []decodestep.Config
	var err error
	if *configs != "none" {
		if cs, err = decodestep.ParseConfigs(*configs); err != nil {
			return fs.Usage("-configs: %v", err)
		}
	}
	bs, err := decodestep.ParseBatches(*batches)
	if err != nil {
		return fs.Usage("-batches: %v", err)
	}
	var ccs []decodestep.Config
	if *checks != "none" && *checks != "" {
		if ccs, err = decodestep.ParseConfigs(*checks); err != nil {
			return fs.Usage("-check-configs: %v", err)
		}
	}
	var vs []string
	for _, v := range strings.Split(*variants, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if v != "plain" && v != "fused" {
			return fs.Usage("-variants: %q is not plain or fused", v)
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return fs.Usage("-variants: none given")
	}
	if *steps <= 0 {
		return fs.Usage("-steps %d: must be positive", *steps)
	}
	rt, dev, err := rf.Open(core.Config{})
	if err != nil {
		return fs.Fail(err)
	}
	defer rt.Close()
	ver, _, minor := inspect.PluginVersion(rt)
	fmt.Fprintf(stderr, "gpurt-decodestep: %s plugin %s (ABI 1.%d) on %s\n", rt.Backend(), ver, minor, dev.Info().Name)
	enc := json.NewEncoder(stdout)
	emit := func(r decodestep.Result) error {
		fmt.Fprintf(stderr, "gpurt-decodestep: %-16s batch %-3d %-5s %-15s step %9.1f us  host %8.1f us %s%s\n",
			r.Config, r.Batch, r.Variant, r.Impl, r.StepUs, r.HostUs, r.Match, r.Note)
		return enc.Encode(r)
	}
	rc := 0
	for _, c := range ccs {
		for _, b := range bs {
			for _, v := range vs {
				r, err := decodestep.Check(dev, c, b, v, *norm, 0)
				if r.Impl == "" { // the setup failed before a result
					r = decodestep.Result{Config: c.String(), Hidden: c.Hidden, Inter: c.Inter, Layers: c.Layers, Batch: b, Variant: v, Impl: "gpurt check"}
					if err != nil {
						r.Note = err.Error()
					}
				}
				if e := emit(r); e != nil {
					return fs.Fail(e)
				}
				if err != nil {
					fmt.Fprintf(stderr, "gpurt-decodestep: check %v batch %d %s: %v\n", c, b, v, err)
					rc = 1
				}
			}
		}
	}
	if len(cs) == 0 {
		return rc
	}
	err = decodestep.Run(dev, decodestep.Options{Configs: cs, Batches: bs, Steps: *steps, Warmup: *warmup, Norm: *norm,
		Variants: vs, Emit: emit})
	if err != nil {
		rc = fs.Fail(err)
	}
	return rc
}
