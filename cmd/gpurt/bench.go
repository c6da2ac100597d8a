// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
)

func init() {
	register("bench", "measure dispatch, copies, launches, GEMM and startup (--quick, --json)",
		func(args []string) int { return runBench(args, os.Stdout, os.Stderr) })
}

// cgoBenchHint says how to get the cgo baseline binary.
const cgoBenchHint = "build it with `make cgobench`, or: CGO_ENABLED=1 go build -tags cgobench -o build/gpurt-cgobench ./cmd/gpurt-cgobench"

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurt bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "fewer, smaller measurements (a few seconds on the mock)")
	asJSON := fs.Bool("json", false, `one JSON object per line: {"metric", "value", "unit", "baseline", "ratio"}`)
	backend := fs.String("backend", "", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	var paths pathList
	fs.Var(&paths, "plugin", "plugin file or folder to search first (repeatable; ':' separates several)")
	sizes := fs.String("sizes", "", "copy sizes, comma-separated, e.g. 64K,1M,16M,256M,1G (default: by backend and --quick)")
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	cgoBin := fs.String("cgobench", "", "path of the gpurt-cgobench binary (default: beside this executable)")
	var dec decoderBench
	fs.StringVar(&dec.preset, "decoder", "", "instead: the Llama-style decoder of examples/llama (preset tiny, 1b or 8b), eager and graph tokens/s")
	fs.IntVar(&dec.batch, "decoder-batch", 1, "with --decoder: requests decoded together")
	fs.IntVar(&dec.ctx, "decoder-ctx", 0, "with --decoder: context already in the cache")
	fs.IntVar(&dec.steps, "decoder-steps", 16, "with --decoder: timed decode steps")
	fs.IntVar(&dec.warm, "decoder-warmup", 2, "with --decoder: untimed decode steps first")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpurt bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if dec.preset != "" {
		if err := dec.run(core.Config{Backend: *backend, PluginPaths: paths}, *asJSON, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "gpurt bench: %v\n", err)
			return 1
		}
		return 0
	}
	opts := bench.Options{Quick: *quick, Backend: *backend, PluginPaths: paths, PluginOptions: *options,
		Progress: stderr, CgoBench: *cgoBin, CgoBenchHint: cgoBenchHint}
	if *sizes != "" {
		var err error
		if opts.Sizes, err = bench.ParseSizes(*sizes); err != nil {
			fmt.Fprintf(stderr, "gpurt bench: %v\n", err)
			return 2
		}
	}
	if opts.CgoBench == "" {
		opts.CgoBench = findCgoBench()
	}
	rep, err := bench.Run(opts)
	if rep != nil {
		if *asJSON {
			if e := rep.WriteJSON(stdout); e != nil {
				fmt.Fprintf(stderr, "gpurt bench: %v\n", e)
				return 1
			}
			for _, n := range rep.Notes {
				fmt.Fprintln(stderr, n)
			}
		} else if e := rep.WriteTable(stdout); e != nil {
			fmt.Fprintf(stderr, "gpurt bench: %v\n", e)
			return 1
		}
	}
	if err != nil && *backend != "" && errors.Is(err, core.ErrUnknownBackend) {
		fmt.Fprintf(stderr, "gpurt bench: --backend: %s\n", text(err.Error()))
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpurt bench: %v\n", err)
		return 1
	}
	return 0
}

// findCgoBench returns the gpurt-cgobench beside this executable
// (symlinks resolved), or "".
func findCgoBench() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	p := filepath.Join(filepath.Dir(exe), bench.CgoBenchName)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return ""
}
