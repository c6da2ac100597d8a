// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cli"
)

func init() {
	register("bench", "measure dispatch, copies, launches, GEMM and startup (--quick, --json, --benchfmt FILE)",
		func(args []string) int { return runBench(args, os.Stdout, os.Stderr) })
}

// cgoBenchHint says how to get the cgo baseline binary.
const cgoBenchHint = "build it with `make cgobench`, or: CGO_ENABLED=1 go build -tags cgobench -o build/gpurt-cgobench ./cmd/gpurt-cgobench"

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt bench", "[--quick] [--json | --benchfmt FILE] [--backend NAME] [--plugin-path PATH]... [--decoder PRESET ...]",
		"Measures dispatch, copies, launches, GEMM and startup on a backend (with --decoder:\nthe Llama-style decoder's tokens per second instead). --benchfmt writes the figures\nin the Go benchmark format as well, for benchstat.", stdout, stderr)
	quick := fs.Bool("quick", false, "fewer, smaller measurements (a few seconds on the mock)")
	asJSON := fs.Bool("json", false, `one JSON object per line: {"metric", "value", "unit", "baseline", "ratio"}`)
	benchfmt := fs.String("benchfmt", "", "also write the figures in the Go benchmark format (for benchstat) to this file; \"-\": to stdout instead of the table or JSON")
	backend := fs.String("backend", "", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	paths := fs.PluginPath()
	sizes := fs.String("sizes", "", "copy sizes, comma-separated, e.g. 64K,1M,16M,256M,1G (default: by backend and --quick)")
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	cgoBin := fs.String("cgobench", "", "path of the gpurt-cgobench binary (default: beside this executable)")
	var dec decoderBench
	fs.StringVar(&dec.preset, "decoder", "", "instead: the Llama-style decoder of examples/llama (preset tiny, 1b or 8b), eager and graph tokens/s")
	fs.IntVar(&dec.batch, "decoder-batch", 1, "with --decoder: requests decoded together (1 to 4096)")
	fs.IntVar(&dec.ctx, "decoder-ctx", 0, "with --decoder: context already in the cache (tokens; context, warm-up and steps together at most 1048576)")
	fs.IntVar(&dec.steps, "decoder-steps", 16, "with --decoder: timed decode steps")
	fs.IntVar(&dec.warm, "decoder-warmup", 2, "with --decoder: untimed decode steps first")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if *asJSON && *benchfmt == "-" {
		return fs.Usage("--json and --benchfmt - both want stdout: give --benchfmt a file")
	}
	if dec.preset == "" {
		for _, f := range []string{"decoder-batch", "decoder-ctx", "decoder-steps", "decoder-warmup"} {
			if fs.Given(f) {
				return fs.Usage("--%s is ignored without --decoder PRESET", f)
			}
		}
	} else {
		for _, f := range []string{"quick", "sizes", "cgobench"} {
			if fs.Given(f) {
				return fs.Usage("--%s does not apply to --decoder (it measures the decoder only)", f)
			}
		}
		if err := dec.check(); err != nil {
			return fs.Usage("%v", err)
		}
	}
	var sz []int
	if *sizes != "" {
		var err error
		if sz, err = bench.ParseSizes(*sizes); err != nil {
			return fs.Usage("--sizes: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
	}
	if err := paths.Check(); err != nil {
		return fs.Fail(err)
	}
	var rep *bench.Report
	var err error
	if dec.preset != "" {
		cfg := core.Config{Backend: *backend, PluginPaths: *paths, PluginOptions: *options}
		var tbl io.Writer = stdout
		if *asJSON || *benchfmt == "-" {
			tbl = nil
		}
		rep, err = dec.run(cfg, tbl)
	} else {
		opts := bench.Options{Quick: *quick, Backend: *backend, PluginPaths: *paths, PluginOptions: *options,
			Progress: stderr, CgoBench: *cgoBin, CgoBenchHint: cgoBenchHint, Sizes: sz}
		if opts.CgoBench == "" {
			opts.CgoBench = findCgoBench()
		}
		rep, err = bench.Run(opts)
	}
	if rep != nil {
		if e := writeReport(rep, dec.preset != "", *asJSON, *benchfmt, stdout, stderr); e != nil {
			return fs.Fail(e)
		}
	}
	if err != nil && *backend != "" && errors.Is(err, core.ErrUnknownBackend) {
		return fs.Usage("--backend: %s", text(strings.TrimPrefix(err.Error(), "gpurt: ")))
	}
	if err != nil {
		return fs.Fail(err)
	}
	return cli.ExitOK
}

// writeReport prints rep as JSON lines, as the table (decoder: its lines
// were printed as measured) or, with benchfmt "-", in the Go benchmark
// format; benchfmt naming a file writes that format there as well.
func writeReport(rep *bench.Report, decoder, asJSON bool, benchfmt string, stdout, stderr io.Writer) error {
	switch {
	case benchfmt == "-":
		if err := rep.WriteBenchfmt(stdout, runtime.GOMAXPROCS(0)); err != nil {
			return err
		}
		for _, n := range rep.Notes {
			fmt.Fprintln(stderr, n)
		}
	case asJSON:
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
		for _, n := range rep.Notes {
			fmt.Fprintln(stderr, n)
		}
	case !decoder:
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	}
	if benchfmt != "" && benchfmt != "-" {
		f, err := os.Create(benchfmt)
		if err != nil {
			return fmt.Errorf("--benchfmt: %w", err)
		}
		if err := rep.WriteBenchfmt(f, runtime.GOMAXPROCS(0)); err != nil {
			f.Close()
			return fmt.Errorf("--benchfmt: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--benchfmt: %w", err)
		}
	}
	return nil
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
