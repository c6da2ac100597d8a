// SPDX-License-Identifier: Apache-2.0

// Package bench measures gpurt on whatever backend core.Open picks: the
// startup time, the dispatch overhead of one plugin call (beside a cgo
// call of the same C function, from cmd/gpurt-cgobench, which also
// compares launch and GEMM host costs with cgo calls in one process),
// copy bandwidth
// for pageable and pinned memory and device to device, the kernel launch
// rate, and GEMM throughput and host cost with the op cache's counters.
// `gpurt bench` prints what Run returns; the tests run it on the mock.
//
// Timings are medians of repeated runs and are never asserted anywhere.
package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// Options say what to run and on which backend.
type Options struct {
	// Quick runs fewer, smaller measurements (a few seconds on the mock).
	Quick bool
	// Backend and PluginPaths choose the plugin as core.Config does.
	Backend     string
	PluginPaths []string
	// PluginOptions is passed to the plugin's runtime_create.
	PluginOptions string
	// Sizes are the copy sizes in bytes; nil: the defaults (64 KiB,
	// 1 MiB, 16 MiB, 256 MiB, and 1 GiB on a GPU; 64 KiB to 16 MiB with
	// Quick).
	Sizes []int
	// CgoBench is the path of the gpurt-cgobench binary, "" when there is
	// none; CgoBenchHint says how to build it (printed when it is missing).
	CgoBench     string
	CgoBenchHint string
	// Progress receives a line for any phase that runs over a second
	// (nil: none).
	Progress io.Writer
	// Logger is the runtime's logger (nil: core's default).
	Logger hclog.Logger
}

// Run opens a runtime as opts say, measures every figure on device 0 and
// closes the runtime. A figure that cannot be measured on this backend
// (GEMM on a 1.0 plugin, the cgo baseline without its binary) is a note in
// the report, not an error; an error is returned when the runtime cannot
// be opened or a measured operation fails.
func Run(opts Options) (*Report, error) {
	rep := &Report{}
	cfg := core.Config{PluginPaths: opts.PluginPaths, Backend: opts.Backend,
		PluginOptions: opts.PluginOptions, Logger: opts.Logger}
	var rt *core.Runtime
	err := phase(opts.Progress, "startup (core.Open)", func() error {
		t0 := time.Now()
		var err error
		rt, err = core.Open(cfg)
		if err == nil {
			rep.add(Result{Metric: "startup_ms", Value: float64(time.Since(t0).Nanoseconds()) / 1e6, Unit: "ms",
				Note: "core.Open: search, probe, runtime_create"})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if rt.Backend() == "mock" && cfg.PluginOptions == "" && os.Getenv("GPURT_MOCK_DELAY_US") == "" {
		// The mock delays every operation on purpose (50 us by default,
		// so that a missing synchronize shows up in tests); measure it
		// without that delay.
		if err := rt.Close(); err != nil {
			return nil, err
		}
		cfg.PluginOptions = "delay_us=0"
		cfg.PluginPaths = []string{inspect.PluginPath(rt)}
		if rt, err = core.Open(cfg); err != nil {
			return nil, err
		}
		rep.note("mock: measured with delay_us=0 (the mock's deliberate per-operation delay off; --options delay_us=N to keep one)")
	}
	opts.PluginOptions = cfg.PluginOptions
	defer rt.Close()
	d, err := rt.Device(0)
	if err != nil {
		return nil, err
	}
	_, maj, min := inspect.PluginVersion(rt)
	info := d.Info()
	rep.Backend, rep.Plugin, rep.ABI = rt.Backend(), inspect.PluginPath(rt), fmt.Sprintf("%d.%d", maj, min)
	rep.Device = fmt.Sprintf("device 0: %s (%s, %.1f GiB)", info.Name, info.Arch, float64(info.MemoryTotal)/(1<<30))
	r := &runner{opts: opts, rt: rt, dev: d, rep: rep, gpu: rt.Backend() != "mock"}
	r.stream, err = d.NewStream()
	if err != nil {
		return nil, err
	}
	defer r.stream.Close()
	steps := []struct {
		name string
		fn   func() error
	}{
		{"dispatch", r.dispatch},
		{"copies", r.copies},
		{"launch", r.launch},
		{"gemm", r.gemm},
	}
	for _, st := range steps {
		if err := phase(opts.Progress, st.name, st.fn); err != nil {
			return rep, fmt.Errorf("bench: %s: %w", st.name, err)
		}
	}
	return rep, nil
}

// runner holds what the measurements share.
type runner struct {
	opts   Options
	rt     *core.Runtime
	dev    *core.Device
	stream *core.Stream
	rep    *Report
	gpu    bool              // a real device (not the mock)
	cgo    map[string]Result // gpurt-cgobench's figures by metric (nil: none)
}

// target is how long one timed run of a micro-measurement lasts.
func (r *runner) target() time.Duration {
	if r.opts.Quick {
		return 20 * time.Millisecond
	}
	return 200 * time.Millisecond
}

// dispatch measures Stream.Query on an idle stream: the cheapest plugin
// call of the API (stream_query: a handle lookup and a status read), and
// compares it with gpurt-cgobench's cgo call of the same table slot.
func (r *runner) dispatch() error {
	s := r.stream
	if err := s.Synchronize(); err != nil {
		return err
	}
	var qerr error
	loop := func(n int) {
		for i := 0; i < n; i++ {
			if ok, err := s.Query(); !ok || err != nil {
				if qerr == nil {
					qerr = fmt.Errorf("stream_query on an idle stream: done %v, %v", ok, err)
				}
			}
		}
	}
	rounds := 9
	if r.opts.Quick {
		rounds = 3
	}
	ns, med := NsPerOp(loop, r.target()/2, rounds)
	allocs := AllocsPerOp(loop, 10000)
	if qerr != nil {
		return qerr
	}
	res := Result{Metric: "dispatch_ns", Value: ns, Unit: "ns/op",
		Note: fmt.Sprintf("Stream.Query on an idle stream (stream_query), best of %d runs (median %.1f)", rounds, med)}
	var cgo map[string]Result
	if r.opts.CgoBench == "" {
		hint := r.opts.CgoBenchHint
		if hint == "" {
			hint = "build cmd/gpurt-cgobench with CGO_ENABLED=1 -tags cgobench and put it beside gpurt"
		}
		r.rep.note("cgo baseline: not available (%s)", hint)
	} else {
		var err error
		var notes []string
		cgo, notes, err = runCgoBench(r.opts.CgoBench, inspect.PluginPath(r.rt), r.opts.PluginOptions, r.opts.Quick)
		if err != nil {
			r.rep.note("cgo baseline: %v", err)
		}
		for _, n := range notes {
			r.rep.note("cgo baseline: %s", n)
		}
		r.cgo = cgo
	}
	if c, ok := cgo["dispatch_cgo_ns"]; ok {
		res = res.withBaseline(c.Value)
		res.Note += "; baseline: cgo call of the same slot (gpurt-cgobench); goal ratio <= 2"
	}
	r.rep.add(res)
	r.rep.add(Result{Metric: "dispatch_allocs", Value: allocs, Unit: "allocs/op", Note: "goal 0"})
	if c, ok := cgo["dispatch_cgo_ns"]; ok {
		r.rep.add(Result{Metric: "dispatch_cgo_ns", Value: c.Value, Unit: "ns/op", Note: "cgo call of stream_query (gpurt-cgobench)"})
	}
	if c, ok := cgo["dispatch_c_ns"]; ok {
		r.rep.add(Result{Metric: "dispatch_c_ns", Value: c.Value, Unit: "ns/op", Note: "stream_query called from C in a loop: the floor"})
	}
	if c, ok := cgo["dispatch_ns"]; ok && c.Ratio != nil {
		r.rep.add(Result{Metric: "dispatch_cgoproc_ns", Value: c.Value, Unit: "ns/op", Baseline: c.Baseline, Ratio: c.Ratio,
			Note: "gpurt vs cgo, both in gpurt-cgobench's one process"})
	}
	return nil
}

// addCgoPair adds gpurt-cgobench's one-process comparison of a host cost,
// when it printed one: its metric (gpurt, with the cgo call as baseline)
// under the name as (metric itself is this process's own figure), and
// stem_cgo_us and stem_c_us (the cgo call, the C loop) under their own
// names, where metric is stem_us; and, when it measured the raw driver or
// cuBLASLt call in the same process (the cuda backend), stem_raw_us,
// stem_vs_raw (gpurt, baseline raw) and stem_c_vs_raw (the C loop of the
// slot, baseline raw).
func (r *runner) addCgoPair(metric, as string) {
	stem := strings.TrimSuffix(metric, "_us")
	if c, ok := r.cgo[metric]; ok && c.Ratio != nil {
		r.rep.add(Result{Metric: as, Value: c.Value, Unit: c.Unit, Baseline: c.Baseline, Ratio: c.Ratio,
			Note: "gpurt-cgobench, one process: " + c.Note})
	}
	if c, ok := r.cgo[stem+"_cgo_us"]; ok {
		r.rep.add(Result{Metric: stem + "_cgo_us", Value: c.Value, Unit: c.Unit, Note: "gpurt-cgobench: " + c.Note})
	}
	if c, ok := r.cgo[stem+"_c_us"]; ok {
		r.rep.add(Result{Metric: stem + "_c_us", Value: c.Value, Unit: c.Unit, Note: "gpurt-cgobench: " + c.Note})
	}
	if c, ok := r.cgo[stem+"_raw_us"]; ok {
		r.rep.add(Result{Metric: stem + "_raw_us", Value: c.Value, Unit: c.Unit, Note: "gpurt-cgobench: " + c.Note})
	}
	for _, m := range []string{stem + "_vs_raw", stem + "_c_vs_raw"} {
		if c, ok := r.cgo[m]; ok && c.Ratio != nil {
			r.rep.add(Result{Metric: m, Value: c.Value, Unit: c.Unit, Baseline: c.Baseline, Ratio: c.Ratio,
				Note: "gpurt-cgobench, one process: " + c.Note})
		}
	}
}

// progressf writes a progress line (used inside long phases).
func (r *runner) progressf(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "gpurt bench: "+format+"\n", args...)
	}
}
