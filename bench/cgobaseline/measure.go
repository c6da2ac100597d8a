// SPDX-License-Identifier: Apache-2.0

package cgobaseline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/stats"
)

// backendOf reads the backend from a plugin's file name
// (libgpurt_<backend>.so or .dylib).
func backendOf(path string) string {
	b := strings.TrimPrefix(filepath.Base(path), "libgpurt_")
	return strings.TrimSuffix(strings.TrimSuffix(b, ".so"), ".dylib")
}

// side is one way of doing an operation: gpurt's core, one cgo call per
// operation, or a loop in C. run(n) performs n operations.
type side struct {
	name string
	run  func(n int) error
}

// repeat is a side's run that calls op n times, stopping at its first
// error: the gpurt and cgo sides of launch and GEMM, one call an
// operation.
func repeat(op func() error) func(n int) error {
	return func(n int) error {
		for i := 0; i < n; i++ {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	}
}

// measurer holds where Measure writes its notes.
type measurer struct{ notes io.Writer }

// Measure loads plugin (an absolute path) through gpurt's core and through
// C in this process and returns the dispatch, launch and GEMM host-cost
// figures, each way (see the command gpurt-cgobench). A figure that
// cannot be measured here is left out, with one line saying why written
// to notes (nil: none). Without cgo it returns ErrNoCgo.
func Measure(plugin, options string, quick bool, notes io.Writer) ([]bench.Result, error) {
	return (&measurer{notes: notes}).measure(plugin, options, quick)
}

func (ms *measurer) measure(plugin, options string, quick bool) ([]bench.Result, error) {
	rt, err := core.Open(core.Config{PluginPaths: []string{plugin}, Backend: backendOf(plugin), PluginOptions: options})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	if inspect.PluginPath(rt) != plugin {
		return nil, fmt.Errorf("the core loaded %s, not %s", inspect.PluginPath(rt), plugin)
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
	pl, err := OpenOptions(plugin, options)
	if err != nil {
		return nil, err
	}
	defer pl.Close()
	var raw *Raw
	if b := rt.Backend(); b != "cuda" {
		ms.skipNote("launch_host_raw_us and gemm_host_raw_us skipped: the backend is %s (the raw baselines call the CUDA driver and cuBLASLt)", b)
	} else if raw, err = OpenRaw(); err != nil {
		ms.skipNote("launch_host_raw_us and gemm_host_raw_us skipped: %v", err)
		raw = nil
	} else {
		defer raw.Close()
	}
	res, err := ms.dispatch(s, pl, quick)
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	r, err := ms.launch(d, s, pl, raw, quick)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	res = append(res, r...)
	r, err = ms.gemm(rt, d, s, pl, raw, quick)
	if err != nil {
		return nil, fmt.Errorf("gemm: %w", err)
	}
	return append(res, r...), nil
}

// dispatch measures stream_query on an idle stream three ways.
func (ms *measurer) dispatch(s *core.Stream, pl *Plugin, quick bool) ([]bench.Result, error) {
	target, trials := 100*time.Millisecond, 9
	if quick {
		target, trials = 10*time.Millisecond, 3
	}
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
			Note: fmt.Sprintf("Stream.Query (stream_query) through gpurt, baseline the cgo call, one process; best of %d interleaved runs (medians %.1f and %.1f)", trials, stats.Median(g), stats.Median(c))},
		{Metric: "dispatch_allocs", Value: allocs, Unit: "allocs/op", Note: "gpurt, goal 0"},
		{Metric: "dispatch_cgo_ns", Value: cm, Unit: "ns/op", Note: "one cgo call into C that calls the stream_query slot"},
		{Metric: "dispatch_c_ns", Value: lm, Unit: "ns/op", Note: "stream_query called from C in a loop"},
	}, nil
}

// skipNote writes why a figure is left out, one line to the notes writer
// (gpurt-cgobench prints them on stderr; gpurt bench turns them into
// notes).
func (ms *measurer) skipNote(format string, args ...any) {
	if ms.notes != nil {
		fmt.Fprintf(ms.notes, format+"\n", args...)
	}
}

// rawSide is the name of the raw driver / cuBLASLt side.
const rawSide = "raw"

// batchedRaw is batched over sides, the last of which may be the raw
// side: when that one fails (and only it), it prints a note naming the
// metric it skips and measures the others again without it.
func (ms *measurer) batchedRaw(sides []side, syncs []func() error, batch, trials int, metric string) ([][]float64, bool, error) {
	us, failed, err := batched(sides, syncs, batch, trials)
	if err == nil || sides[failed].name != rawSide {
		return us, err == nil && sides[len(sides)-1].name == rawSide, err
	}
	ms.skipNote("%s skipped: %v", metric, err)
	us, _, err = batched(sides[:len(sides)-1], syncs[:len(syncs)-1], batch, trials)
	return us, false, err
}

// batched times each side's host cost per operation: trials rounds, each
// running every side once (in an order that rotates, so that none always
// runs first) as a timed batch of batch operations followed by an untimed
// synchronize of that side's stream. It returns each side's per-operation
// times in microseconds, one per round; on an error, the index of the
// side that failed.
func batched(sides []side, syncs []func() error, batch, trials int) ([][]float64, int, error) {
	us := make([][]float64, len(sides))
	for t := 0; t < trials; t++ {
		for j := range sides {
			i := (j + t) % len(sides)
			t0 := time.Now()
			err := sides[i].run(batch)
			d := time.Since(t0)
			if e := syncs[i](); err == nil {
				err = e
			}
			if err != nil {
				return nil, i, fmt.Errorf("%s: %w", sides[i].name, err)
			}
			us[i] = append(us[i], float64(d.Nanoseconds())/1e3/float64(batch))
		}
	}
	return us, 0, nil
}

// pairResults are the figures of a batched measurement of gpurt, cgo and
// a C loop, each the best of the rounds (the medians are in the notes):
// metric (gpurt, with the cgo figure as baseline and the ratio),
// metric_cgo (the cgo call alone) and metric_c (the C loop), where metric
// ends in _us and the suffixes go before it.
func pairResults(metric, what, base string, us [][]float64, batch int) []bench.Result {
	g, c, l := slices.Min(us[0]), slices.Min(us[1]), slices.Min(us[2])
	gm, cm, lm := stats.Median(us[0]), stats.Median(us[1]), stats.Median(us[2])
	ratio := g / c
	stem := strings.TrimSuffix(metric, "_us")
	return []bench.Result{
		{Metric: metric, Value: g, Unit: "us", Baseline: &c, Ratio: &ratio,
			Note: fmt.Sprintf("%s through gpurt, baseline %s, one process; best of %d interleaved batches of %d (medians %.3f and %.3f: ratio %.2fx, difference %+.3f us)",
				what, base, len(us[0]), batch, gm, cm, gm/cm, gm-cm)},
		{Metric: stem + "_cgo_us", Value: c, Unit: "us",
			Note: fmt.Sprintf("%s (median %.3f)", base, cm)},
		{Metric: stem + "_c_us", Value: l, Unit: "us",
			Note: fmt.Sprintf("the same slot called from C in a loop, same batches (median %.3f)", lm)},
	}
}

// rawResults are the figures of the raw side (us[3]) beside gpurt (us[0])
// and the C loop of the slot (us[2]), best of the rounds (medians in the
// notes): stem_raw_us, stem_vs_raw (gpurt, baseline raw) and
// stem_c_vs_raw (the C loop, baseline raw), where metric is stem_us.
func rawResults(metric, raw string, us [][]float64, batch int) []bench.Result {
	stem := strings.TrimSuffix(metric, "_us")
	g, l, w := slices.Min(us[0]), slices.Min(us[2]), slices.Min(us[3])
	gm, lm, wm := stats.Median(us[0]), stats.Median(us[2]), stats.Median(us[3])
	rg, rl := g/w, l/w
	return []bench.Result{
		{Metric: stem + "_raw_us", Value: w, Unit: "us",
			Note: fmt.Sprintf("%s from C in a loop, no plugin, same process and batches (median %.3f)", raw, wm)},
		{Metric: stem + "_vs_raw", Value: g, Unit: "us", Baseline: &w, Ratio: &rg,
			Note: fmt.Sprintf("gpurt (%s) vs %s from C, one process; best of %d interleaved batches of %d, difference %+.3f us (medians %.3f and %.3f: ratio %.2fx, difference %+.3f us)",
				metric, raw, len(us[0]), batch, g-w, gm, wm, gm/wm, gm-wm)},
		{Metric: stem + "_c_vs_raw", Value: l, Unit: "us", Baseline: &w, Ratio: &rl,
			Note: fmt.Sprintf("the plugin slot from C in a loop (%s_c_us) vs %s from C, one process; difference %+.3f us (medians %.3f and %.3f: ratio %.2fx, difference %+.3f us)",
				stem, raw, l-w, lm, wm, lm/wm, lm-wm)},
	}
}

// launch measures the host cost of enqueueing fill_f32 on one element:
// core Stream.Launch, one cgo call into C that packs the same arguments
// and calls the launch slot on the C runtime's stream, and a C loop.
// With raw (the cuda backend), a fourth side calls cuLaunchKernel from C.
func (ms *measurer) launch(d *core.Device, s *core.Stream, pl *Plugin, raw *Raw, quick bool) ([]bench.Result, error) {
	mod, err := d.BuiltinModule()
	if err != nil {
		return nil, err
	}
	fill, err := mod.Kernel("fill_f32")
	if err != nil {
		return nil, err
	}
	buf, err := d.Alloc(256)
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	if err := pl.PrepareLaunch(); err != nil {
		return nil, err
	}
	cfg := core.Grid1D(1, 1)
	sides := []side{
		{"gpurt", repeat(func() error {
			return s.Launch(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		})},
		{"cgo", repeat(pl.LaunchFill)},
		{"c-loop", pl.LaunchFillLoop},
	}
	syncs := []func() error{s.Synchronize, pl.Synchronize, pl.Synchronize}
	// The batch sides: gpurt's LaunchBatch.Submit and one cgo call of the
	// launch_batch slot, each per batchOf launches (the last of a run
	// shorter when n is not a multiple).
	withBatch := pl.HasLaunchBatch()
	if withBatch {
		lb := s.NewLaunchBatch()
		sides = append(sides,
			side{"gpurt-batch", func(n int) error {
				for n > 0 {
					c := min(n, batchOf)
					for i := 0; i < c; i++ {
						if err := lb.Add(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1)); err != nil {
							return err
						}
					}
					if _, err := lb.Submit(); err != nil {
						return err
					}
					n -= c
				}
				return nil
			}},
			side{"c-batch", func(n int) error {
				for n > 0 {
					c := min(n, batchOf)
					if err := pl.LaunchFillBatch(c); err != nil {
						return err
					}
					n -= c
				}
				return nil
			}})
		syncs = append(syncs, s.Synchronize, pl.Synchronize)
	} else {
		ms.skipNote("launch_batch_host_us, launch_batch_c_us and launch_batch_vs_raw skipped: the plugin has no launch_batch slot (ABI 1.2)")
	}
	if raw != nil {
		if err := raw.PrepareLaunch(); err != nil {
			ms.skipNote("launch_host_raw_us skipped: %v", err)
		} else {
			sides = append(sides, side{rawSide, raw.LaunchLoop})
			syncs = append(syncs, raw.Synchronize)
		}
	}
	// batches of 960 = 15 batches of 64 (about the 1000 bench/raw times
	// cuLaunchKernel in), below the depth at which a driver's launch
	// queue blocks
	batch, trials := 15*batchOf, 50
	if quick {
		trials = 10
	}
	const metric = "launch_host_us"
	us, withRaw, err := ms.batchedRaw(sides, syncs, 10, 1, "launch_host_raw_us") // warm-up
	if err != nil {
		return nil, err
	}
	if !withRaw && sides[len(sides)-1].name == rawSide {
		sides, syncs = sides[:len(sides)-1], syncs[:len(syncs)-1]
	}
	if us, withRaw, err = ms.batchedRaw(sides, syncs, batch, trials, "launch_host_raw_us"); err != nil {
		return nil, err
	}
	res := pairResults(metric, "Stream.Launch of fill_f32 on 1 element (enqueue)",
		"one cgo call into C that packs the same arguments and calls the launch slot", us, batch)
	const rawWhat = "cuLaunchKernel of a fill kernel with fill_f32's parameters (grid 1, block 1)"
	if withRaw {
		res = append(res, rawResults(metric, rawWhat, [][]float64{us[0], us[1], us[2], us[len(us)-1]}, batch)...)
	}
	if withBatch {
		res = append(res, batchResults(us[3], us[4], us[len(us)-1], withRaw, batch)...)
	}
	return res, nil
}

// batchOf is the number of launches per batch of the batch sides.
const batchOf = 64

// batchResults are the figures of the batch sides, per launch, best of
// the rounds (medians in the notes): launch_batch_host_us (gpurt's
// LaunchBatch.Submit, baseline the slot from one cgo call per batch),
// launch_batch_c_us (that cgo call), and with raw launch_batch_vs_raw
// (gpurt's batch, baseline raw cuLaunchKernel from C in a loop).
func batchResults(gb, cb, raw []float64, withRaw bool, batch int) []bench.Result {
	g, c := slices.Min(gb), slices.Min(cb)
	gm, cm := stats.Median(gb), stats.Median(cb)
	rc := g / c
	res := []bench.Result{
		{Metric: "launch_batch_host_us", Value: g, Unit: "us", Baseline: &c, Ratio: &rc,
			Note: fmt.Sprintf("per launch: %d Adds and one LaunchBatch.Submit of fill_f32 on 1 element through gpurt, baseline the launch_batch slot called once per %d from one cgo call, one process; best of %d interleaved runs of %d launches (medians %.3f and %.3f)",
				batchOf, batchOf, len(gb), batch, gm, cm)},
		{Metric: "launch_batch_c_us", Value: c, Unit: "us",
			Note: fmt.Sprintf("per launch: the plugin's launch_batch slot called from C, one cgo call per %d launches (median %.3f)", batchOf, cm)},
	}
	if withRaw {
		w, wm := slices.Min(raw), stats.Median(raw)
		rw := g / w
		res = append(res, bench.Result{Metric: "launch_batch_vs_raw", Value: g, Unit: "us", Baseline: &w, Ratio: &rw,
			Note: fmt.Sprintf("per launch: gpurt LaunchBatch.Submit of %d vs cuLaunchKernel from C in a loop (launch_host_raw_us), one process; best of %d interleaved runs of %d, difference %+.3f us (medians %.3f and %.3f: ratio %.2fx)",
				batchOf, len(gb), batch, g-w, gm, wm, gm/wm)})
	}
	return res
}

// gemm measures the host cost of one GEMM call with a warm plan: core
// Stream.Gemm (op cache warm) and the gemm_run slot on a plan made from C
// with the same descriptor, bf16, op(A) = A^T, m=4096 n=1 k=4096 on a GPU
// (64x64x64 on the mock), the same random operands on both runtimes.
//
// With raw (the cuda backend), a fourth side calls cublasLtMatmul from C
// on the plan the plugin makes for the same descriptor.
func (ms *measurer) gemm(rt *core.Runtime, d *core.Device, s *core.Stream, pl *Plugin, raw *Raw, quick bool) ([]bench.Result, error) {
	m, n, k := 4096, 1, 4096
	if rt.Backend() == "mock" {
		m, n, k = 64, 64, 64
	}
	skip := func(err error) ([]bench.Result, error) {
		ms.skipNote("gemm_host_us skipped: %v", err)
		if raw != nil {
			ms.skipNote("gemm_host_raw_us skipped with it")
		}
		return nil, nil
	}
	if _, _, minor := inspect.PluginVersion(rt); minor < 1 {
		return skip(fmt.Errorf("the plugin speaks ABI 1.%d; GEMM needs 1.1", minor))
	}
	rng := rand.New(rand.NewPCG(7, 0x9e3779b97f4a7c15))
	random := func(elems int) []byte {
		b := make([]byte, 2*elems)
		for i := 0; i < elems; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], floatbits.BF16FromFloat32(rng.Float32()*2-1))
		}
		return b
	}
	ha, hb := random(k*m), random(k*n)
	var bufs []*core.Buffer
	defer func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	}()
	upload := func(host []byte, size int) (*core.Buffer, error) {
		b, err := d.Alloc(size)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b)
		if host != nil {
			err = core.CopyFromHost(b, host)
		}
		return b, err
	}
	a, err := upload(ha, len(ha))
	if err != nil {
		return nil, err
	}
	b, err := upload(hb, len(hb))
	if err != nil {
		return nil, err
	}
	dd, err := upload(nil, 2*m*n)
	if err != nil {
		return nil, err
	}
	desc := core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: m, N: n, K: k}
	ops := core.GemmOperands{A: a, B: b, D: dd, Alpha: 1}
	if err := s.Gemm(desc, ops); err != nil { // warm the op cache
		if errors.Is(err, core.ErrUnsupported) {
			return skip(err)
		}
		return nil, err
	}
	if err := pl.PrepareGemm(m, n, k, ha, hb); err != nil {
		if errors.Is(err, ErrUnsupported) {
			return skip(err)
		}
		return nil, err
	}
	sides := []side{
		{"gpurt", repeat(func() error { return s.Gemm(desc, ops) })},
		{"cgo", repeat(pl.GemmRun)},
		{"c-loop", pl.GemmRunLoop},
	}
	syncs := []func() error{s.Synchronize, pl.Synchronize, pl.Synchronize}
	if raw != nil {
		if err := raw.PrepareGemm(m, n, k, ha, hb); err != nil {
			ms.skipNote("gemm_host_raw_us skipped: %v", err)
		} else {
			sides = append(sides, side{rawSide, raw.GemmLoop})
			syncs = append(syncs, raw.Synchronize)
		}
	}
	// batches of 20 calls, each drained before the next (as gpurt bench
	// and bench/raw time cublasLtMatmul's host cost)
	batch, trials := 20, 100
	if quick {
		trials = 20
	}
	us, withRaw, err := ms.batchedRaw(sides, syncs, 10, 1, "gemm_host_raw_us") // warm-up
	if err != nil {
		return nil, err
	}
	if !withRaw && len(sides) == 4 {
		sides, syncs = sides[:3], syncs[:3]
	}
	if us, withRaw, err = ms.batchedRaw(sides, syncs, batch, trials, "gemm_host_raw_us"); err != nil {
		return nil, err
	}
	st := inspect.OpCache(rt)
	if st.Misses != 1 {
		return nil, fmt.Errorf("the op cache missed %d times (want 1: the warm-up)", st.Misses)
	}
	what := fmt.Sprintf("one Stream.Gemm enqueue, warm op cache (bf16, op(A)=A^T, m=%d n=%d k=%d)", m, n, k)
	res := pairResults("gemm_host_us", what, "one cgo call into C that calls gemm_run on a plan made from C with the same descriptor", us, batch)
	if withRaw {
		res = append(res, rawResults("gemm_host_us", "cublasLtMatmul (the plugin's plan, made directly: same layouts, preference and heuristic algorithm; C = D, 32 MiB workspace)", us, batch)...)
	}
	return res, nil
}

func first(a, _ float64) float64 { return a }
