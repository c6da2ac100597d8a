// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/metrale/gpurt/conform"
	"github.com/metrale/gpurt/core"
)

func init() {
	register("conform", "run the conformance suite on a backend ([--backend NAME | --plugin PATH] [--json] [--quick])",
		func(args []string) int { return runConform(args, os.Stdout, os.Stderr) })
}

// runConform runs the suite; the last line printed is exactly
// "N passed, M failed" (on stderr with --json, so stdout stays JSON), and
// the status is non-zero on any failure.
func runConform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurt conform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	quick := fs.Bool("quick", false, "shrink the large checks")
	long := fs.Bool("long", false, "also run the long-context attention checks (for GPUs; slow on the mock)")
	backend := fs.String("backend", "", "backend: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	plugin := fs.String("plugin", "", "plugin file to test (its backend is taken from the name libgpurt_NAME)")
	options := fs.String("options", "", "plugin runtime options, key=value;key=value (the mock: devices=2)")
	run := fs.String("run", "", "run only the checks whose name matches this regular expression")
	seed := fs.Uint64("seed", 0, "seed of the random data (0: from the clock)")
	var paths pathList
	fs.Var(&paths, "plugin-path", "folder or plugin file to search first (repeatable; ':' separates several)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpurt conform: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg := core.Config{PluginPaths: paths, Backend: *backend, PluginOptions: *options}
	if *plugin != "" {
		if *backend != "" {
			fmt.Fprintln(stderr, "gpurt conform: give --backend or --plugin, not both")
			return 2
		}
		abs, err := filepath.Abs(*plugin)
		if err != nil {
			fmt.Fprintf(stderr, "gpurt conform: %v\n", err)
			return 2
		}
		cfg.PluginPaths = append([]string{abs}, cfg.PluginPaths...)
		name := strings.TrimPrefix(filepath.Base(abs), "libgpurt_")
		cfg.Backend = strings.TrimSuffix(strings.TrimSuffix(name, ".so"), ".dylib")
	}
	opts := conform.Options{Quick: *quick, Long: *long, Seed: *seed,
		OpenRuntime: func() (*core.Runtime, error) { return core.Open(cfg) }}
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintf(stderr, "gpurt conform: --run: %v\n", err)
			return 2
		}
		opts.Filter = re
	}
	rt, err := core.Open(cfg)
	if err != nil && *backend != "" && errors.Is(err, core.ErrUnknownBackend) {
		fmt.Fprintf(stderr, "gpurt conform: --backend: %s\n", text(err.Error()))
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpurt conform: %s\n", text(err.Error()))
		fmt.Fprintln(stderr, "0 passed, 1 failed")
		return 1
	}
	defer rt.Close()
	if !*asJSON {
		v, maj, min := rt.PluginVersion()
		fmt.Fprintf(stdout, "backend %s (%s, version %s, ABI %d.%d), %d devices\n", rt.Backend(), rt.PluginPath(), v, maj, min, rt.NumDevices())
		opts.Progress = func(c conform.Check) {
			status := "PASS"
			switch {
			case c.Skipped:
				status = "SKIP"
			case !c.Passed:
				status = "FAIL"
			}
			fmt.Fprintf(stdout, "%s  %-40s %8.1f ms", status, c.Name, float64(c.Duration.Microseconds())/1000)
			if c.Message != "" {
				fmt.Fprintf(stdout, "  %s", c.Message)
			}
			fmt.Fprintln(stdout)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res := conform.Run(ctx, rt, opts)
	last := stdout
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "gpurt conform: %v\n", err)
		}
		last = stderr
	} else {
		st := rt.OpCacheStats()
		fmt.Fprintf(stdout, "seed %d; op cache: %d hits, %d misses, %d evictions\n", res.Seed, st.Hits, st.Misses, st.Evictions)
	}
	fmt.Fprintln(last, res.Summary())
	if !res.OK() {
		return 1
	}
	return 0
}
