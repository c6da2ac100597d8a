// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"runtime"
	"weak"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/loader"
	"github.com/metrale/gpurt/internal/abi"
)

// Runtime is one plugin runtime: its devices and everything allocated
// from them. Create it with Open and end it with Close. All methods are
// safe for concurrent use by any number of goroutines.
type Runtime struct {
	p      *bind.Plugin // every plugin call goes through its methods
	h      abi.Runtime
	l      life
	report *diag.Report
	log    hclog.Logger
	stage  stageSettings // Config.StageChunk, StageSlots, CopyWorkers
	pool   *copyPool     // the memmove pool of staged copies (CopyWorkers)

	devices []*Device
	heap    *hostHeap
	plans   *opCache
	self    weak.Pointer[Runtime] // for cleanups, which must not keep rt reachable
	metrics metrics

	poolBudget poolBudget // Config.PoolBudget resolved (pool.go)
}

// Open loads a plugin as cfg says (see Config), creates its runtime and
// reads its devices. The caller must Close the runtime.
//
// Isolated probe: before loading a plugin, Open (and Probe) asks it
// whether it can run here in a child process, so that a GPU driver that
// crashes or hangs while probing costs a reason in the report, not this
// process. The child is this program's own executable (the running
// image, /proc/self/exe, on Linux; os.Executable on macOS), run again with a hidden first argument ("__gpurt_probe") and
// GPURT_PROBE_CHILD=1 in an allow-listed environment (PATH, HOME, TMPDIR,
// LD_LIBRARY_PATH, locale, CUDA_*, NVIDIA_*, GPURT_*, METAL_*, MTL_*);
// an init function of this module recognises that, before main runs, in
// any program importing gpurt, probes the plugin file it inherits (the
// one the parent checked and hashed, as descriptor 3), prints one JSON
// report and exits. Config.ProbeTimeout (30 s) is its watchdog. A program
// whose main must not be re-run, or that cannot spawn processes, sets
// Config.ProbeInProcess (probing in this process, no cache).
//
// Probe cache: the child's reports are kept in memory for the life of
// the process and on disk, one small JSON file per plugin file identity
// (path, device, inode, size, times), executable, NVIDIA driver version
// and probe-relevant environment, in Config.ProbeCacheDir
// (GPURT_PROBE_CACHE; default os.UserCacheDir()/gpurt/probe, that is
// $XDG_CACHE_HOME/gpurt/probe or ~/.cache/gpurt/probe on Linux,
// ~/Library/Caches/gpurt/probe on macOS). "off" keeps them in memory only.
// Entries are used only from a folder and files the loader trusts (owned
// by the user or root, writable by no one else, regular files, bounded
// in size); anything else is a miss. The folder is pruned whenever an
// entry is written: at most 64 entries, none older than 7 days; a result
// saying a plugin cannot run is used for 10 minutes only. A cached
// report's free memory is the one measured when it was probed.
func Open(cfg Config) (*Runtime, error) {
	set, err := cfg.resolve("open")
	if err != nil {
		return nil, err
	}
	rep, p, err := loader.Choose(cfg.loaderOptions(set.log))
	if err != nil {
		return nil, chooseError("open", err)
	}
	return openPlugin(cfg, set, reportOf(rep), p)
}

// openPlugin creates a runtime on an already bound plugin.
func openPlugin(cfg Config, set settings, rep *diag.Report, p *bind.Plugin) (*Runtime, error) {
	log := set.log
	rt := &Runtime{report: rep, log: log, stage: set.stage, pool: copyPoolOf(set.stage.Workers), poolBudget: set.poolBudget}
	// The runtime's own copy of the plugin, whose error hook counts the
	// plugin's errors in this runtime's metrics.
	pc := *p
	pc.OnError = func(c bind.Code) { rt.metrics.pluginError(ErrorCode(c)) }
	p = &pc
	rt.p = p
	rt.self = weak.Make(rt)
	opts := cfg.PluginOptions
	args := abi.RuntimeCreateArgs{StructSize: abi.SizeofRuntimeCreateArgs}
	var h abi.Runtime
	args.OptionsLen = uint64(len(opts))
	args.Options = bind.StringData(opts)
	err := p.RuntimeCreate("runtime_create", &args, &h)
	runtime.KeepAlive(opts)
	if err != nil {
		return nil, err
	}
	rt.h = h
	var n uint32
	if err := p.DeviceCount("device_count", h, &n); err != nil {
		rt.destroy()
		return nil, err
	}
	for i := uint32(0); i < n; i++ {
		d := &Device{rt: rt, index: i}
		info, err := d.queryInfo()
		if err != nil {
			rt.destroy()
			return nil, err
		}
		d.info = info
		d.stagers = make(chan *stager, maxStagers)
		d.stageTokens = make(chan struct{}, maxStagers)
		rt.devices = append(rt.devices, d)
	}
	rt.heap = newHostHeap(rt)
	rt.plans = newOpCache(rt, set.opCacheSize)
	log.Debug("runtime created", "backend", p.Backend, "plugin", p.Path, "devices", n, "staging", set.stage.String(), "opcache", set.opCacheSize)
	return rt, nil
}

func (rt *Runtime) destroy() {
	_ = rt.p.RuntimeDestroy("runtime_destroy", rt.h)
}

// enter begins a use of the runtime; every method that calls the plugin
// brackets the call with enter/exit, so Close never destroys the runtime
// under a call in flight.
func (rt *Runtime) enter(op string) error {
	if !rt.ok() {
		return errInvalid(op, "runtime")
	}
	if !rt.l.acquire() {
		return errClosed(op, "runtime")
	}
	return nil
}

func (rt *Runtime) exit() { rt.l.release() }

// Close waits for calls in flight, then frees everything the runtime owns
// in the plugin (buffers, host memory, streams, events, modules, plans).
// Afterwards every method of the runtime and of anything made from it
// returns an error wrapping ErrClosed; slices from HostBuffer.Bytes
// must not be used any more. A second Close returns an
// error wrapping ErrClosed.
func (rt *Runtime) Close() error {
	if !rt.ok() {
		return errInvalid("close", "runtime")
	}
	if rt.l.kill() != killed {
		return errClosed("close", "runtime")
	}
	err := rt.p.RuntimeDestroy("runtime_destroy", rt.h)
	rt.heap.closed()
	return err
}

// Backend names the plugin's backend ("cuda", "metal", "mock").
func (rt *Runtime) Backend() string {
	if !rt.ok() {
		return ""
	}
	return rt.p.Backend
}

// PluginPath is the absolute path of the loaded plugin.
func (rt *Runtime) pluginPath() string {
	if !rt.ok() {
		return ""
	}
	return rt.p.Path
}

// PluginVersion is the plugin's own version string and its ABI version.
func (rt *Runtime) pluginVersion() (version string, abiMajor, abiMinor uint32) {
	if !rt.ok() {
		return "", 0, 0
	}
	return rt.p.Version, rt.p.Major, rt.p.Minor
}

// Report is the loader's report from Open (nil when the runtime was made
// without the loader).
func (rt *Runtime) loadReport() *diag.Report {
	if rt == nil {
		return nil
	}
	return rt.report
}

// Logger is the runtime's logger.
func (rt *Runtime) logger() hclog.Logger {
	if rt == nil || rt.log == nil {
		return hclog.NewNullLogger()
	}
	return rt.log
}

// Devices lists the runtime's devices: len(rt.Devices()) is their number
// (a new slice each call; the devices are the same each call).
func (rt *Runtime) Devices() []*Device {
	if rt == nil {
		return nil
	}
	return append([]*Device(nil), rt.devices...)
}

// Device returns device i.
func (rt *Runtime) Device(i int) (*Device, error) {
	if !rt.ok() {
		return nil, errInvalid("device", "runtime")
	}
	if i < 0 || i >= len(rt.devices) {
		return nil, errf(codeInvalidArgument, "device", "no device %d (the runtime has %d)", i, len(rt.devices))
	}
	return rt.devices[i], nil
}

// Stats reads the plugin's live counters. They include the runtime's own
// objects: host-heap blocks, staging streams and buffers, cached GEMM
// plans (Trim releases the idle ones).
func (rt *Runtime) liveStats() (diag.Stats, error) {
	if err := rt.enter("runtime_stats"); err != nil {
		return diag.Stats{}, err
	}
	defer rt.exit()
	var s abi.RuntimeStats
	s.StructSize = abi.SizeofRuntimeStats
	if err := rt.p.RuntimeStats("runtime_stats", rt.h, &s); err != nil {
		return diag.Stats{}, err
	}
	return diag.Stats{LiveBuffers: s.LiveBuffers, LiveHostBuffers: s.LiveHostBuffers, LiveStreams: s.LiveStreams,
		LiveEvents: s.LiveEvents, LiveModules: s.LiveModules, LivePlans: s.LivePlans, DeviceBytes: s.DeviceBytes,
		HostBytes: s.HostBytes}, nil
}

// Control sets a named integer control of the plugin (fault injection,
// tuning). The mock knows "fail_alloc_nth", "fail_launch_nth" and
// "lose_device"; an unknown key is an error wrapping ErrUnsupported.
func (rt *Runtime) control(key string, value int64) error {
	if err := rt.enter("runtime_control"); err != nil {
		return err
	}
	defer rt.exit()
	a := abi.ControlArgs{StructSize: abi.SizeofControlArgs, KeyLen: uint64(len(key)), Value: value}
	a.Key = bind.StringData(key)
	err := rt.p.RuntimeControl("runtime_control", rt.h, &a)
	runtime.KeepAlive(key)
	return err
}

// heapStats is the counters of the runtime's host heap (inspect.HostHeap;
// zero for a nil runtime).
func (rt *Runtime) heapStats() diag.Heap {
	if rt == nil {
		return diag.Heap{}
	}
	return rt.heap.snapshot()
}

// Trim returns cached resources to the plugin: idle staging streams and
// buffers, the device memory pools' cached blocks, cached GEMM plans (after synchronizing the devices) and
// host-heap blocks with nothing allocated in them. Afterwards Stats counts
// only what the caller holds.
func (rt *Runtime) Trim() error {
	if err := rt.enter("trim"); err != nil {
		return err
	}
	defer rt.exit()
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	for _, d := range rt.devices {
		keep(d.trimStagers())
		d.trimPool()
	}
	keep(rt.plans.clear())
	keep(rt.heap.trim())
	return first
}

func (rt *Runtime) String() string {
	if !rt.ok() {
		return "gpurt runtime (nil or zero-value)"
	}
	return fmt.Sprintf("gpurt runtime (%s, %d devices)", rt.p.Backend, len(rt.devices))
}
