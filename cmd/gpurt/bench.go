// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/internal/cli"
)

func init() {
	register("bench", "measure dispatch, copies, launches, GEMM and startup (--quick, --json, --benchfmt FILE)",
		func(args []string) int { return runBench(args, os.Stdout, os.Stderr) })
}

// cgoBenchHint says how to get the cgo baseline binary.
const cgoBenchHint = "build it with `make cgobench`, or: CGO_ENABLED=1 go build -tags cgobench -o build/gpurt-cgobench ./cmd/gpurt-cgobench"

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt bench", "[--quick] [--json | --benchfmt FILE] [--backend NAME] [--plugin-path PATH]...",
		"Measures dispatch, copies, launches, GEMM and startup on a backend. --benchfmt writes\nthe figures in the Go benchmark format as well, for benchstat. (The decoder's\ntokens per second: examples/decoderbench.)", stdout, stderr)
	quick := fs.Bool("quick", false, "fewer, smaller measurements (a few seconds on the mock)")
	asJSON := fs.Bool("json", false, `one JSON object per line: {"metric", "value", "unit", "baseline", "ratio"}`)
	benchfmt := fs.String("benchfmt", "", "also write the figures in the Go benchmark format (for benchstat) to this file; \"-\": to stdout instead of the table or JSON")
	rf := fs.Runtime("", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	sizes := fs.String("sizes", "", "copy sizes, comma-separated, e.g. 64K,1M,16M,256M,1G (default: by backend and --quick)")
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	cgoBin := fs.String("cgobench", "", "path of the gpurt-cgobench binary (default: beside this executable)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if *asJSON && *benchfmt == "-" {
		return fs.Usage("--json and --benchfmt - both want stdout: give --benchfmt a file")
	}
	var sz []int
	if *sizes != "" {
		var err error
		if sz, err = bench.ParseSizes(*sizes); err != nil {
			return fs.Usage("--sizes: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
	}
	if err := rf.Paths.Check(); err != nil {
		return fs.Fail(err)
	}
	opts := bench.Options{Quick: *quick, Backend: *rf.Backend, PluginPaths: *rf.Paths, PluginOptions: *options,
		Progress: stderr, CgoBench: *cgoBin, CgoBenchHint: cgoBenchHint, Sizes: sz}
	if opts.CgoBench == "" {
		opts.CgoBench = findCgoBench()
	}
	rep, err := bench.Run(opts)
	if rep != nil {
		if e := rep.Print(stdout, stderr, bench.PrintOptions{JSON: *asJSON, Benchfmt: *benchfmt, Table: true, Flag: "--benchfmt"}); e != nil {
			return fs.Fail(e)
		}
	}
	if rf.UnknownBackend(err) {
		return fs.Usage("--backend: %s", text(strings.TrimPrefix(err.Error(), "gpurt: ")))
	}
	if err != nil {
		return fs.Fail(err)
	}
	return cli.ExitOK
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
