// SPDX-License-Identifier: Apache-2.0

//go:build cgobench

// Command gpurt-cgobench is the cgo side of `gpurt bench`'s dispatch
// figure. It loads a plugin twice in one process — through gpurt's core
// (the zero-allocation call path) and through C (internal/cgobaseline:
// dlopen, the same negotiation, runtime_create) — and measures
// stream_query on an idle stream called three ways: through
// core.Stream.Query, as one cgo call into C that calls the table slot, and
// from C in a loop (the floor). gpurt bench runs it when it finds it
// beside its own executable.
//
//	gpurt-cgobench --plugin /abs/path/libgpurt_mock.so [--quick] [--json] [--options k=v;...]
//
// It is the one command built with cgo, and only with the cgobench build
// tag (so that the cgo-free checks of ./cmd/... never see it):
//
//	CGO_ENABLED=1 go build -tags cgobench -o build/gpurt-cgobench ./cmd/gpurt-cgobench
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cgobaseline"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurt-cgobench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	plugin := fs.String("plugin", "", "absolute path of the plugin to load (required)")
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	quick := fs.Bool("quick", false, "shorter measurements")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *plugin == "" || !filepath.IsAbs(*plugin) || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gpurt-cgobench: --plugin takes the plugin's absolute path; no other arguments")
		return 2
	}
	res, err := measure(*plugin, *options, *quick)
	if err != nil {
		fmt.Fprintf(stderr, "gpurt-cgobench: %v\n", err)
		return 1
	}
	for _, x := range res {
		if *asJSON {
			b, _ := json.Marshal(x)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		line := fmt.Sprintf("%-20s %10.1f %-9s", x.Metric, x.Value, x.Unit)
		if x.Ratio != nil {
			line += fmt.Sprintf(" baseline %.1f ratio %.2fx", *x.Baseline, *x.Ratio)
		}
		fmt.Fprintln(stdout, line+"  "+x.Note)
	}
	return 0
}

// backendOf reads the backend from a plugin's file name
// (libgpurt_<backend>.so or .dylib).
func backendOf(path string) string {
	b := strings.TrimPrefix(filepath.Base(path), "libgpurt_")
	return strings.TrimSuffix(strings.TrimSuffix(b, ".so"), ".dylib")
}

func measure(plugin, options string, quick bool) ([]bench.Result, error) {
	target, trials := 100*time.Millisecond, 9
	if quick {
		target, trials = 10*time.Millisecond, 3
	}
	rt, err := core.Open(core.Config{PluginPaths: []string{plugin}, Backend: backendOf(plugin), PluginOptions: options})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	if rt.PluginPath() != plugin {
		return nil, fmt.Errorf("the core loaded %s, not %s", rt.PluginPath(), plugin)
	}
	d, err := rt.Device(0)
	if err != nil {
		return nil, err
	}
	s, err := d.NewStream()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	pl, err := cgobaseline.Open(plugin)
	if err != nil {
		return nil, err
	}
	defer pl.Close()

	bad := 0
	gpurt := func(n int) {
		for i := 0; i < n; i++ {
			if ok, err := s.Query(); !ok || err != nil {
				bad++
			}
		}
	}
	cgo := func(n int) {
		for i := 0; i < n; i++ {
			if !pl.StreamQuery() {
				bad++
			}
		}
	}
	cloop := func(n int) { bad += pl.StreamQueryLoop(n) }
	// interleave the three so that a change of clock speed hits all
	// alike; report the best run of each (see bench.NsPerOp)
	var g, c, l []float64
	for i := 0; i < trials; i++ {
		g = append(g, first(bench.NsPerOp(gpurt, target, 1)))
		c = append(c, first(bench.NsPerOp(cgo, target, 1)))
		l = append(l, first(bench.NsPerOp(cloop, target, 1)))
	}
	allocs := bench.AllocsPerOp(gpurt, 10000)
	if bad != 0 {
		return nil, fmt.Errorf("%d stream_query calls on an idle stream did not return done", bad)
	}
	gm, cm, lm := slices.Min(g), slices.Min(c), slices.Min(l)
	ratio := gm / cm
	return []bench.Result{
		{Metric: "dispatch_ns", Value: gm, Unit: "ns/op", Baseline: &cm, Ratio: &ratio,
			Note: fmt.Sprintf("Stream.Query (stream_query) through gpurt, baseline the cgo call, one process; best of %d interleaved runs (medians %.1f and %.1f)", trials, med(g), med(c))},
		{Metric: "dispatch_allocs", Value: allocs, Unit: "allocs/op", Note: "gpurt, goal 0"},
		{Metric: "dispatch_cgo_ns", Value: cm, Unit: "ns/op", Note: "one cgo call into C that calls the stream_query slot"},
		{Metric: "dispatch_c_ns", Value: lm, Unit: "ns/op", Note: "stream_query called from C in a loop"},
	}, nil
}

func med(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if len(ys)%2 == 1 {
		return ys[len(ys)/2]
	}
	return (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
}

func first(a, _ float64) float64 { return a }
