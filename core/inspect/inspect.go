// SPDX-License-Identifier: Apache-2.0

// Package inspect reads what a gpurt runtime says about itself, for
// monitoring, tests and diagnosing a failed Open: its counters (Metrics,
// OpCache, Pool, DevicePool, HostHeap, GraphUpdate), the plugin's live
// objects (Stats), its description of a device now (DeviceInfo: the free
// memory) and of a kernel (Kernel), which plugin was loaded and why
// (PluginPath, PluginVersion, Report, Probe, Backends), and the plugin's
// named controls (Control: fault injection, tuning). The data types are
// package core/diag's; package metrics exports Metrics to Prometheus and
// expvar.
//
// It is apart from core so that core's API is what a program needs to run
// work (runtime, memory, streams, events, modules, launches, GEMM,
// graphs). Every function is safe for concurrent use, and takes a nil
// runtime (a zero answer, or an error naming the call).
package inspect

import (
	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/core/pool"
)

// Metrics returns a snapshot of rt's counters. It is cheap and works on a
// closed runtime (the counters stay).
func Metrics(rt *core.Runtime) diag.Metrics { return bridge.Diag.Metrics(rt) }

// SetOpTiming turns the latency histograms of Metrics on or off (off at
// Open). While on, each timed call reads the clock twice (tens of
// nanoseconds; BenchmarkOpTiming in core measures it); off, a call costs
// one atomic load.
func SetOpTiming(rt *core.Runtime, on bool) { bridge.Diag.SetOpTiming(rt, on) }

// OpCache returns the counters of rt's op cache (the GEMM plans it keeps).
func OpCache(rt *core.Runtime) diag.OpCache { return bridge.Diag.OpCache(rt) }

// Stats reads the plugin's live counters of rt. They include the
// runtime's own objects: host-heap blocks, staging streams and buffers,
// cached GEMM plans (Runtime.Trim releases the idle ones).
func Stats(rt *core.Runtime) (diag.Stats, error) { return bridge.Diag.Stats(rt) }

// Report is the loader's report from rt's Open (nil when the runtime was
// made without the loader).
func Report(rt *core.Runtime) *diag.Report { return bridge.Diag.Report(rt) }

// Logger is rt's logger (Config.Logger, or the one Open made).
func Logger(rt *core.Runtime) hclog.Logger { return bridge.Diag.Logger(rt) }

// PluginPath is the absolute path of rt's plugin ("" for a nil runtime).
func PluginPath(rt *core.Runtime) string { return bridge.Diag.PluginPath(rt) }

// PluginVersion is rt's plugin's own version string and its ABI version.
func PluginVersion(rt *core.Runtime) (version string, abiMajor, abiMinor uint32) {
	return bridge.Diag.PluginVersion(rt)
}

// Control sets a named integer control of rt's plugin (fault injection,
// tuning). The mock knows "fail_alloc_nth", "fail_launch_nth",
// "lose_device" and "delay_us"; an unknown key is an error wrapping
// core.ErrUnsupported.
func Control(rt *core.Runtime, key string, value int64) error {
	return bridge.Diag.Control(rt, key, value)
}

// Probe runs the loader's search and choice without creating a runtime,
// and returns its report (also on error, when there is one). What only
// runtime creation finds (a malformed plugin setting such as
// GPURT_MOCK_DEVICES=x, a device held by another process) shows in
// core.Open, not here; `gpurt probe` runs both to report what Open would
// do. The error is a *core.Error matching core.ErrNoBackend,
// core.ErrBackendUnavailable or core.ErrUnknownBackend, or a Config error.
func Probe(cfg core.Config) (*diag.Report, error) { return bridge.Diag.Probe(cfg) }

// Backends lists the backends of the plugin files found where core.Open
// with cfg would search (libgpurt_<backend>.so, .dylib on macOS), each
// once, in search order. It loads and checks nothing: a backend listed may
// still be unusable here (Probe says whether it is). Every name listed can
// be asked for in Config.Backend, including ones gpurt does not ship (a
// libgpurt_rocm.so found gives "rocm").
func Backends(cfg core.Config) ([]string, error) { return bridge.Diag.Backends(cfg) }

// Pool returns the counters of a device's memory pool (package core/pool).
func Pool(p *pool.Pool) diag.Pool { return bridge.Diag.Pool(p) }

// DevicePool returns the counters of d's memory pool without making the
// pool; false when d's pool was never used (or d is nil).
func DevicePool(d *core.Device) (diag.Pool, bool) { return bridge.Diag.DevicePool(d) }

// HostHeap returns the counters of rt's pinned host heap (the memory of
// core.Runtime.AllocHostFromHeap; zero for a nil runtime).
func HostHeap(rt *core.Runtime) diag.Heap { return bridge.Diag.HostHeap(rt) }

// DeviceInfo reads d's description from the plugin now: what
// core.Device.Info says, with the memory free at this moment (Info's is
// from Open). The error wraps core.ErrInvalidArgument for a nil device,
// core.ErrClosed once the runtime is closed.
func DeviceInfo(d *core.Device) (core.DeviceInfo, error) {
	in, err := bridge.Diag.DeviceInfo(d)
	info, _ := in.(core.DeviceInfo)
	return info, err
}

// Kernel describes k as its plugin reports it: the most threads a block
// may have, its static shared memory and its parameters (each kind as the
// core.Arg constructors name it, and size), which core.Stream.Launch
// checks arguments against. The result is a copy (zero for a nil
// kernel).
func Kernel(k *core.Kernel) diag.Kernel { return bridge.Diag.Kernel(k) }

// GraphUpdate says how the plugin applied the last changes SetArg made
// to g (at the Launch after them): "none", "patched" (nodes changed in
// place), "exec-update" (re-captured, executable updated) or
// "reinstantiated".
func GraphUpdate(g *core.Graph) string { return bridge.Diag.GraphUpdate(g) }
