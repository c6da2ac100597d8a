// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/metrale/gpurt/conform"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/cli"
)

func init() {
	register("conform", "run the conformance suite on a backend ([--backend NAME] [--plugin-path PATH] [--json] [--quick])",
		func(args []string) int { return runConform(args, os.Stdout, os.Stderr) })
}

// runConform runs the suite; the last line printed is exactly
// "N passed, M failed" (on stderr with --json, so stdout stays JSON), and
// the status is non-zero on any failure.
func runConform(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt conform", "[--backend NAME] [--plugin-path PATH]... [--json] [--quick] [--run REGEXP]",
		"Runs the conformance suite on a backend. With --plugin-path naming plugin files only\n(libgpurt_NAME.so) and no --backend, the backend is the files' NAME: the suite tests\nthat file. The last line is \"N passed, M failed\"; the status is 1 on any failure,\nand on a setup error (no such plugin, not a plugin, a runtime that cannot be made).", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	quick := fs.Bool("quick", false, "shrink the large checks")
	long := fs.Bool("long", false, "also run the long-context attention checks (for GPUs; slow on the mock)")
	rf := fs.Runtime("", "backend: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	options := fs.String("options", "", "plugin runtime options, key=value;key=value (the mock: devices=2)")
	run := fs.String("run", "", "run only the checks whose name matches this regular expression")
	seed := fs.Uint64("seed", 0, "seed of the random data (0: from the clock)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	var filter *regexp.Regexp
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			return fs.Usage("--run: %v", err)
		}
		filter = re
	}
	if err := rf.Paths.Check(); err != nil {
		return fs.Fail(err)
	}
	cfg := core.Config{PluginPaths: *rf.Paths, Backend: *rf.Backend, PluginOptions: *options}
	if cfg.Backend == "" {
		cfg.Backend = filesBackend(*rf.Paths)
	}
	opts := conform.Options{Quick: *quick, Long: *long, Seed: *seed,
		OpenRuntime: func() (*core.Runtime, error) { return core.Open(cfg) }}
	opts.Filter = filter
	rt, err := core.Open(cfg)
	if rf.UnknownBackend(err) {
		return fs.Usage("--backend: %s", text(strings.TrimPrefix(err.Error(), "gpurt: ")))
	}
	if err != nil {
		// A setup error, not a failed check: nothing was tested.
		return fs.Fail(errors.New(text(strings.TrimPrefix(err.Error(), "gpurt: "))))
	}
	defer rt.Close()
	if !*asJSON {
		v, maj, min := inspect.PluginVersion(rt)
		fmt.Fprintf(stdout, "backend %s (%s, version %s, ABI %d.%d), %d devices\n", rt.Backend(), inspect.PluginPath(rt), v, maj, min, len(rt.Devices()))
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
		st := inspect.OpCache(rt)
		fmt.Fprintf(stdout, "seed %d; op cache: %d hits, %d misses, %d evictions\n", res.Seed, st.Hits, st.Misses, st.Evictions)
	}
	fmt.Fprintln(last, res.Summary())
	if !res.OK() {
		return 1
	}
	return 0
}

// filesBackend is the backend that every entry of paths names when each is
// a plugin file (libgpurt_NAME.so or .dylib) of the same NAME, else "":
// `gpurt conform --plugin-path build/libgpurt_mock.so` tests that file,
// not a better backend found beside the executable.
func filesBackend(paths []string) string {
	name := ""
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return ""
		}
		b := filepath.Base(p)
		if !strings.HasPrefix(b, "libgpurt_") || !(strings.HasSuffix(b, ".so") || strings.HasSuffix(b, ".dylib")) {
			return ""
		}
		n := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(b, "libgpurt_"), ".so"), ".dylib")
		if n == "" || (name != "" && n != name) {
			return ""
		}
		name = n
	}
	return name
}
