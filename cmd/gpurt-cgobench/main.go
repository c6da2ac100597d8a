// SPDX-License-Identifier: Apache-2.0

//go:build cgobench

// Command gpurt-cgobench is the cgo side of `gpurt bench`'s host-cost
// figures. It loads a plugin twice in one process — through gpurt's core
// (the zero-allocation call path) and through C (bench/cgobaseline:
// dlopen, the same negotiation, runtime_create with the same options) —
// and measures three operations, each called three ways, interleaved:
// through the core, as one cgo call into C that calls the table slot, and
// from C in a loop (the floor):
//
//   - dispatch: stream_query on an idle stream (dispatch_ns, its baseline
//     dispatch_cgo_ns, dispatch_c_ns), best of runs of about 100 ms;
//   - launch: fill_f32 of the built-in module on one element, runs of
//     960 launches timed without the synchronize after them
//     (launch_host_us, launch_host_cgo_us, launch_host_c_us); on a plugin
//     with the 1.2 launch_batch slot, two more sides in the same rounds,
//     per launch: gpurt's LaunchBatch (64 Adds and one Submit) and the
//     slot called once per 64 from one cgo call (launch_batch_host_us,
//     with the latter as baseline, and launch_batch_c_us);
//   - gemm: one bf16 GEMM call with a warm plan (core Stream.Gemm with its
//     op cache; gemm_run on a plan made once from C with the same
//     descriptor), m=4096 n=1 k=4096 (64x64x64 on the mock), batches of 20
//     calls timed without the synchronize after them (gemm_host_us,
//     gemm_host_cgo_us, gemm_host_c_us).
//
// The first metric of each has the cgo figure as baseline and the ratio;
// each figure is the best of the interleaved rounds, with the medians in
// the note. gpurt bench runs it when it finds it beside its own
// executable.
//
// With the cuda plugin, launch and gemm have a fourth side, interleaved in
// the same batches: the raw driver and cuBLASLt called from C with no
// plugin in between (bench/cgobaseline's Raw: device 0's primary
// context, a stream of its own, cuLaunchKernel of a hand-written PTX
// kernel with fill_f32's parameters, cublasLtMatmul on the plan the
// plugin makes for the same descriptor). Their figures:
//
//   - launch_host_raw_us, gemm_host_raw_us: the raw call, from C in a loop;
//   - launch_host_vs_raw, gemm_host_vs_raw: gpurt's figure, with the raw
//     one as baseline and the ratio (issue 4: launch <= 1.05x; issue 5:
//     gemm <= raw + 1 us);
//   - launch_host_c_vs_raw, gemm_host_c_vs_raw: the plugin slot called
//     from C in a loop, with the raw one as baseline and the ratio.
//   - launch_batch_vs_raw: gpurt's batch of 64 per launch, with the raw
//     cuLaunchKernel loop as baseline and the ratio.
//
// Any other backend, or a failure to open libcuda.so.1 or cuBLASLt (or
// any raw step), prints a note on stderr and leaves these out.
//
//	gpurt-cgobench --plugin-path /path/libgpurt_mock.so [--quick] [--json] [--options k=v;...]
//
// It is the one command built with cgo, and only with the cgobench build
// tag (so that the cgo-free checks of ./cmd/... never see it):
//
//	CGO_ENABLED=1 go build -tags cgobench -o build/gpurt-cgobench ./cmd/gpurt-cgobench
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/metrale/gpurt/bench/cgobaseline"
	"github.com/metrale/gpurt/internal/cli"
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-cgobench", "--plugin-path PLUGIN_FILE [--quick] [--json] [--options OPTS]",
		"The cgo side of `gpurt bench`'s host-cost figures: loads the plugin file through\ngpurt's core and through C in one process and times dispatch, launch and GEMM\nhost costs each way. gpurt bench runs it when it finds it beside itself.", stdout, stderr)
	paths := fs.PluginPath()
	options := fs.String("options", "", "plugin runtime options (key=value;...)")
	quick := fs.Bool("quick", false, "shorter measurements")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if len(*paths) != 1 {
		return fs.Usage("-plugin-path: want exactly one plugin file (libgpurt_NAME.so), got %d paths", len(*paths))
	}
	if err := paths.Check(); err != nil {
		return fs.Fail(err)
	}
	plugin, err := filepath.Abs((*paths)[0])
	if err != nil {
		return fs.Fail(err)
	}
	if st, err := os.Stat(plugin); err == nil && st.IsDir() {
		return fs.Usage("-plugin-path %s: a folder; want the plugin file itself (the C side loads exactly that file)", plugin)
	}
	res, err := cgobaseline.Measure(plugin, *options, *quick, notePrefix{stderr})
	if err != nil {
		return fs.Fail(err)
	}
	for _, x := range res {
		if *asJSON {
			b, _ := json.Marshal(x)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		line := fmt.Sprintf("%-20s %10.4g %-9s", x.Metric, x.Value, x.Unit)
		if x.Ratio != nil {
			line += fmt.Sprintf(" baseline %.4g ratio %.2fx", *x.Baseline, *x.Ratio)
		}
		fmt.Fprintln(stdout, line+"  "+x.Note)
	}
	return 0
}

// notePrefix writes Measure's notes as "gpurt-cgobench: <note>" lines.
type notePrefix struct{ w io.Writer }

func (n notePrefix) Write(p []byte) (int, error) {
	if _, err := fmt.Fprintf(n.w, "gpurt-cgobench: %s", p); err != nil {
		return 0, err
	}
	return len(p), nil
}
