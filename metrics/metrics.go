// SPDX-License-Identifier: Apache-2.0

// Package metrics exports a gpurt runtime's counters to monitoring: a
// Prometheus collector (NewCollector) and an expvar variable (Publish).
// It is a separate package so that core itself depends on neither.
//
// What is exported, all labelled with the backend (every label value is
// snake_case):
//
//	gpurt_device_memory_allocated_bytes   device bytes the runtime holds (plugin counter; device="all")
//	gpurt_device_buffer_bytes             live Device.Alloc bytes per device (label device)
//	gpurt_device_memory_total_bytes       per device (label device), as read at Open
//	gpurt_device_memory_free_bytes        per device, read at each scrape (inspect.DeviceInfo)
//	gpurt_pinned_host_bytes               pinned host bytes the runtime holds
//	gpurt_live_objects                    live plugin objects (label kind)
//	gpurt_host_heap_bytes                 pinned host heap (label state: in_use, reserved, peak)
//	gpurt_host_heap_slices                live host-heap slices
//	gpurt_host_heap_allocs_total          host-heap slices handed out
//	gpurt_opcache_hits_total / _misses_total / _evictions_total
//	gpurt_opcache_plans                   plans cached (gpurt_opcache_capacity: the bound)
//	gpurt_kernel_launches_total           Stream.Launch
//	gpurt_launch_batches_total            LaunchBatch.Submit (gpurt_batch_launches_total: their kernels)
//	gpurt_gemms_total                     Stream.Gemm
//	gpurt_attention_runs_total            Stream.RunAttention
//	gpurt_quant_matmuls_total             matmul.Quant
//	gpurt_grouped_gemms_total             matmul.Grouped
//	gpurt_collectives_total               Comm.Run
//	gpurt_bytes_copied_total              bytes of copies (label direction: host_to_device, device_to_host, device_to_device)
//	gpurt_op_latency_seconds              histogram of each op's host time (label op: stream_synchronize,
//	                                      copy_from_host, gemm, attention_run, ...; see diag.Metrics.Latency)
//	gpurt_plugin_errors_total             errors returned by the plugin (label code: invalid_argument, ...)
//	gpurt_device_lost                     1 once a device was lost
//	gpurt_pool_bytes                      a device's memory pool (pool.Of) by state: budget, reserved,
//	                                      in_use, cached, peak_reserved, peak_in_use (labels device, state)
//	gpurt_pool_fragmentation_ratio        (reserved - in use) / reserved (label device)
//	gpurt_pool_blocks                     pool blocks (labels device, state: live, cached)
//	gpurt_pool_hits_total / _misses_total / _stream_waits_total / _released_total / _out_of_memory_total
//	                                      the pool's counters (label device); pools never used are left out
//
// NewCollector turns the runtime's op timing on (inspect.SetOpTiming),
// which the latency histograms need: two clock reads per timed call.
//
// A scrape never fails: what cannot be read (a closed runtime's plugin
// counters) is left out, and gpurt_up says whether the plugin answered.
package metrics

import (
	"expvar"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
)

// Collector is a prometheus.Collector for one runtime. Register it with a
// prometheus.Registerer; it reads the runtime at every scrape.
type Collector struct {
	rt    *core.Runtime
	descs map[string]*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

type metricDef struct {
	name, help string
	labels     []string
}

var defs = []metricDef{
	{"up", "1 when the runtime's plugin answered this scrape, 0 when it is closed or failed.", nil},
	{"device_memory_allocated_bytes", "Device bytes allocated by the runtime (buffers, staging, workspaces); device=\"all\": the plugin counts them for all devices together.", []string{"device"}},
	{"device_buffer_bytes", "Bytes of the live buffers allocated with Device.Alloc, per device.", []string{"device"}},
	{"device_memory_total_bytes", "Device memory size, as read at Open.", []string{"device"}},
	{"device_memory_free_bytes", "Device memory free, read at this scrape.", []string{"device"}},
	{"pinned_host_bytes", "Pinned host bytes allocated by the runtime.", nil},
	{"live_objects", "Live plugin objects of the runtime.", []string{"kind"}},
	{"host_heap_bytes", "The pinned host heap's bytes by state.", []string{"state"}},
	{"host_heap_slices", "Live host-heap slices.", nil},
	{"host_heap_allocs_total", "Host-heap slices handed out since Open.", nil},
	{"opcache_hits_total", "GEMM plan cache hits.", nil},
	{"opcache_misses_total", "GEMM plan cache misses (plans built).", nil},
	{"opcache_evictions_total", "GEMM plans evicted from the cache.", nil},
	{"opcache_plans", "GEMM plans cached now.", nil},
	{"opcache_capacity", "The GEMM plan cache's bound.", nil},
	{"kernel_launches_total", "Kernels enqueued by Stream.Launch.", nil},
	{"launch_batches_total", "Launch batches submitted whole.", nil},
	{"batch_launches_total", "Kernels enqueued through launch batches.", nil},
	{"gemms_total", "GEMMs enqueued by Stream.Gemm.", nil},
	{"attention_runs_total", "Attention runs enqueued by Stream.RunAttention.", nil},
	{"quant_matmuls_total", "Quantized matmuls enqueued by matmul.Quant.", nil},
	{"grouped_gemms_total", "Grouped GEMMs enqueued by matmul.Grouped.", nil},
	{"collectives_total", "Collectives enqueued by Comm.Run.", nil},
	{"bytes_copied_total", "Bytes of successful copies, by direction.", []string{"direction"}},
	{"op_latency_seconds", "Host time of successful calls, by operation: for synchronize and synchronous copies the wait, for stream operations the enqueue.", []string{"op"}},
	{"plugin_errors_total", "Errors returned by the plugin, by code.", []string{"code"}},
	{"device_lost", "1 once a call returned a device-lost error.", nil},
	{"pool_bytes", "A device memory pool's bytes by state (budget, reserved, in_use, cached, peak_reserved, peak_in_use).", []string{"device", "state"}},
	{"pool_fragmentation_ratio", "A device memory pool's (reserved - in use) / reserved.", []string{"device"}},
	{"pool_blocks", "A device memory pool's blocks by state (live, cached).", []string{"device", "state"}},
	{"pool_hits_total", "Pool allocations served from a cached block.", []string{"device"}},
	{"pool_misses_total", "Pool allocations that took a new block from the plugin.", []string{"device"}},
	{"pool_stream_waits_total", "Pool hits on another stream, ordered by a stream wait on the last owner's event.", []string{"device"}},
	{"pool_released_total", "Cached pool blocks returned to the plugin (trims).", []string{"device"}},
	{"pool_out_of_memory_total", "Pool allocations refused (budget or device full).", []string{"device"}},
}

// NewCollector returns a collector for rt and turns rt's op timing on
// (the latency histograms). The runtime's backend is a constant label on
// every metric.
func NewCollector(rt *core.Runtime) *Collector {
	inspect.SetOpTiming(rt, true)
	c := &Collector{rt: rt, descs: make(map[string]*prometheus.Desc, len(defs))}
	constLabels := prometheus.Labels{"backend": rt.Backend()}
	for _, d := range defs {
		c.descs[d.name] = prometheus.NewDesc("gpurt_"+d.name, d.help, d.labels, constLabels)
	}
	return c
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range defs {
		ch <- c.descs[d.name]
	}
}

// Collect reads the runtime and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := Read(c.rt)
	emit := func(name string, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], t, v, labels...)
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	emit("up", gauge, b2f(s.Up))
	if s.Up {
		emit("device_memory_allocated_bytes", gauge, float64(s.Stats.DeviceBytes), "all")
		emit("pinned_host_bytes", gauge, float64(s.Stats.HostBytes))
		for kind, n := range map[string]uint64{
			"buffers": s.Stats.LiveBuffers, "host_buffers": s.Stats.LiveHostBuffers,
			"streams": s.Stats.LiveStreams, "events": s.Stats.LiveEvents,
			"modules": s.Stats.LiveModules, "plans": s.Stats.LivePlans,
		} {
			emit("live_objects", gauge, float64(n), kind)
		}
	}
	for _, d := range s.Devices {
		idx := strconv.Itoa(d.Index)
		emit("device_buffer_bytes", gauge, float64(s.Ops.BufferBytes[d.Index]), idx)
		emit("device_memory_total_bytes", gauge, float64(d.MemoryTotal), idx)
		if d.FreeKnown {
			emit("device_memory_free_bytes", gauge, float64(d.MemoryFree), idx)
		}
	}
	emit("host_heap_bytes", gauge, float64(s.Heap.InUse), "in_use")
	emit("host_heap_bytes", gauge, float64(s.Heap.Reserved), "reserved")
	emit("host_heap_bytes", gauge, float64(s.Heap.Peak), "peak")
	emit("host_heap_slices", gauge, float64(s.Heap.Live))
	emit("host_heap_allocs_total", counter, float64(s.Heap.Allocs))
	emit("opcache_hits_total", counter, float64(s.OpCache.Hits))
	emit("opcache_misses_total", counter, float64(s.OpCache.Misses))
	emit("opcache_evictions_total", counter, float64(s.OpCache.Evictions))
	emit("opcache_plans", gauge, float64(s.OpCache.Size))
	emit("opcache_capacity", gauge, float64(s.OpCache.Capacity))
	emit("kernel_launches_total", counter, float64(s.Ops.Launches))
	emit("launch_batches_total", counter, float64(s.Ops.LaunchBatches))
	emit("batch_launches_total", counter, float64(s.Ops.BatchLaunches))
	emit("gemms_total", counter, float64(s.Ops.GEMMs))
	emit("attention_runs_total", counter, float64(s.Ops.AttentionRuns))
	emit("quant_matmuls_total", counter, float64(s.Ops.QuantMatmuls))
	emit("grouped_gemms_total", counter, float64(s.Ops.GroupedGEMMs))
	emit("collectives_total", counter, float64(s.Ops.Collectives))
	for dir, n := range s.Ops.BytesCopied {
		emit("bytes_copied_total", counter, float64(n), dir)
	}
	bounds := diag.LatencyBounds()
	for op, h := range s.Ops.Latency {
		buckets := make(map[float64]uint64, len(bounds))
		for i, b := range bounds {
			buckets[b.Seconds()] = h.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.descs["op_latency_seconds"], h.Count, h.Sum.Seconds(), buckets, op)
	}
	for code, n := range s.Ops.Errors {
		emit("plugin_errors_total", counter, float64(n), snake(code))
	}
	emit("device_lost", gauge, b2f(s.Ops.DeviceLost))
	for _, p := range s.Pools {
		idx := strconv.Itoa(p.Device)
		st := p.Stats
		for state, v := range map[string]uint64{"budget": st.Budget, "reserved": st.Reserved, "in_use": st.InUse,
			"cached": st.Cached, "peak_reserved": st.PeakReserved, "peak_in_use": st.PeakInUse} {
			emit("pool_bytes", gauge, float64(v), idx, state)
		}
		emit("pool_fragmentation_ratio", gauge, st.Fragmentation(), idx)
		emit("pool_blocks", gauge, float64(st.LiveBlocks), idx, "live")
		emit("pool_blocks", gauge, float64(st.CachedBlocks), idx, "cached")
		emit("pool_hits_total", counter, float64(st.Hits), idx)
		emit("pool_misses_total", counter, float64(st.Misses), idx)
		emit("pool_stream_waits_total", counter, float64(st.StreamWaits), idx)
		emit("pool_released_total", counter, float64(st.Released), idx)
		emit("pool_out_of_memory_total", counter, float64(st.OutOfMemory), idx)
	}
}

// Snapshot is everything this package exports, read at once.
type Snapshot struct {
	Backend string
	Up      bool       // the plugin answered Stats
	Stats   diag.Stats // zero when !Up
	Devices []DeviceMemory
	Heap    diag.Heap
	OpCache diag.OpCache
	Ops     diag.Metrics
	Pools   []Pool // the device memory pools in use, by device
}

// Pool is one device's memory pool.
type Pool struct {
	Device int
	Stats  diag.Pool
}

// DeviceMemory is one device's memory.
type DeviceMemory struct {
	Index       int
	MemoryTotal uint64
	MemoryFree  uint64
	FreeKnown   bool // MemoryFree was read now
}

// Read takes a snapshot of rt. It never fails: what the plugin cannot
// answer (a closed runtime) is left zero and Up is false.
func Read(rt *core.Runtime) Snapshot {
	s := Snapshot{Backend: rt.Backend(), Heap: inspect.HostHeap(rt),
		OpCache: inspect.OpCache(rt), Ops: inspect.Metrics(rt)}
	st, err := inspect.Stats(rt)
	if err == nil {
		s.Up, s.Stats = true, st
	}
	for _, d := range rt.Devices() {
		dm := DeviceMemory{Index: d.Index(), MemoryTotal: d.Info().MemoryTotal}
		if s.Up {
			if in, err := inspect.DeviceInfo(d); err == nil {
				dm.MemoryFree, dm.FreeKnown = in.MemoryFree, true
			}
		}
		s.Devices = append(s.Devices, dm)
		if ps, ok := inspect.DevicePool(d); ok {
			s.Pools = append(s.Pools, Pool{Device: d.Index(), Stats: ps})
		}
	}
	return s
}

// Publish publishes rt's snapshot as the expvar variable name (served as
// JSON on /debug/vars by expvar's handler). Like expvar.Publish it panics
// when name is already published: call it once per name.
func Publish(name string, rt *core.Runtime) {
	expvar.Publish(name, expvar.Func(func() any { return expvarView(Read(rt)) }))
}

// expvarView renders a snapshot with stable lowercase keys (error codes
// by name).
func expvarView(s Snapshot) map[string]any {
	errs := make(map[string]uint64, len(s.Ops.Errors))
	for c, n := range s.Ops.Errors {
		errs[snake(c)] = n
	}
	lat := make(map[string]map[string]any, len(s.Ops.Latency))
	for op, h := range s.Ops.Latency {
		lat[op] = map[string]any{"count": h.Count, "sum_seconds": h.Sum.Seconds()}
	}
	devs := make([]map[string]any, 0, len(s.Devices))
	for _, d := range s.Devices {
		m := map[string]any{"index": d.Index, "memory_total": d.MemoryTotal, "buffer_bytes": s.Ops.BufferBytes[d.Index]}
		if d.FreeKnown {
			m["memory_free"] = d.MemoryFree
		}
		devs = append(devs, m)
	}
	pools := make([]map[string]any, 0, len(s.Pools))
	for _, p := range s.Pools {
		st := p.Stats
		pools = append(pools, map[string]any{"device": p.Device, "budget": st.Budget, "reserved": st.Reserved,
			"in_use": st.InUse, "cached": st.Cached, "peak_reserved": st.PeakReserved, "peak_in_use": st.PeakInUse,
			"fragmentation": st.Fragmentation(), "live_blocks": st.LiveBlocks, "cached_blocks": st.CachedBlocks,
			"hits": st.Hits, "misses": st.Misses, "stream_waits": st.StreamWaits, "released": st.Released,
			"out_of_memory": st.OutOfMemory})
	}
	return map[string]any{
		"backend":      s.Backend,
		"up":           s.Up,
		"device_bytes": s.Stats.DeviceBytes, "pinned_host_bytes": s.Stats.HostBytes,
		"live": map[string]uint64{
			"buffers": s.Stats.LiveBuffers, "host_buffers": s.Stats.LiveHostBuffers,
			"streams": s.Stats.LiveStreams, "events": s.Stats.LiveEvents,
			"modules": s.Stats.LiveModules, "plans": s.Stats.LivePlans,
		},
		"devices": devs,
		"host_heap": map[string]uint64{
			"in_use": s.Heap.InUse, "reserved": s.Heap.Reserved, "peak": s.Heap.Peak,
			"blocks": s.Heap.Blocks, "slices": s.Heap.Live, "allocs": s.Heap.Allocs,
		},
		"opcache": map[string]any{
			"hits": s.OpCache.Hits, "misses": s.OpCache.Misses, "evictions": s.OpCache.Evictions,
			"plans": s.OpCache.Size, "capacity": s.OpCache.Capacity,
		},
		"launches": s.Ops.Launches, "launch_batches": s.Ops.LaunchBatches,
		"batch_launches": s.Ops.BatchLaunches, "gemms": s.Ops.GEMMs,
		"attention_runs": s.Ops.AttentionRuns, "quant_matmuls": s.Ops.QuantMatmuls,
		"grouped_gemms": s.Ops.GroupedGEMMs, "collectives": s.Ops.Collectives,
		"bytes_copied": s.Ops.BytesCopied, "latency": lat,
		"errors": errs, "device_lost": s.Ops.DeviceLost,
		"pools": pools,
	}
}

// snake is a label value in snake_case ("invalid argument" ->
// "invalid_argument", "code 99" -> "code_99").
func snake(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, s)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
