// SPDX-License-Identifier: Apache-2.0

// Package diag holds what a gpurt runtime says about itself, for
// monitoring and for diagnosing a failed Open: the counters of
// inspect.Metrics (which package github.com/metrale/gpurt/metrics
// exports to Prometheus and expvar), the plugin's live objects
// (inspect.Stats), the GEMM plan cache's and the host heap's counters, a
// kernel's parameters (inspect.Kernel),
// and the loader's Report of its search for a plugin (inspect.Probe,
// inspect.Report, core.Error.Report; `gpurt probe --json` prints it).
// It is plain data: core fills it, nothing here calls a plugin.
package diag

import "time"

// Report is the loader's account of one search for a plugin: where it
// looked, every plugin file it found and what became of it, and the one
// it selected. inspect.Probe returns it, inspect.Report keeps the one of Open,
// and the *core.Error of a failed Open or Probe carries it. Its JSON form is what
// `gpurt probe --json` prints.
type Report struct {
	// Requested is the backend asked for: "auto", a backend name, or the
	// unknown value that was refused.
	Requested string `json:"requested"`
	// Searched are the folders (and explicit plugin files) looked at, in
	// search order.
	Searched []string `json:"searched"`
	// Candidates are the plugin files found, in search order.
	Candidates []Candidate `json:"candidates"`
	// Selected is the path of the chosen plugin, "" when none was chosen.
	Selected string `json:"selected"`
	// Backend is the chosen plugin's backend, "" when none was chosen.
	Backend string `json:"backend"`
}

// CandidateState is where the loader left a candidate.
type CandidateState string

// The four states: every candidate ends in exactly one.
const (
	StateSelected  CandidateState = "selected"  // the plugin the runtime uses
	StateAvailable CandidateState = "available" // could run here, not chosen (Reason says why)
	StateSkipped   CandidateState = "skipped"   // not tried, or not applicable here (Reason says which)
	StateFailed    CandidateState = "failed"    // broken or refused (Reason, and Detail where there is one)
)

// Candidate is one plugin file the loader looked at.
type Candidate struct {
	// Path is the file's absolute path as found (before symbolic links
	// are resolved).
	Path string `json:"path"`
	// Backend is the backend the file name says (libgpurt_<backend>),
	// then the one its plugin_info reports once loaded.
	Backend string `json:"backend"`
	// Version is the plugin's own version string ("" if not loaded).
	Version string `json:"version"`
	// ABI is the "major.minor" ABI version the plugin speaks ("" if it
	// was not negotiated).
	ABI string `json:"abi"`
	// Priority orders backends in auto mode, higher first; each plugin
	// announces its own (cuda 300, metal 200, mock 100); 0 if not loaded.
	Priority int32 `json:"priority"`
	// Score orders plugins of one priority, higher first; the plugin's
	// probe returns it (0 if not probed).
	Score int32 `json:"score"`
	// State is where the candidate ended.
	State CandidateState `json:"state"`
	// Reason says, in one line, why the candidate is in its state.
	Reason string `json:"reason"`
	// Detail says more where there is more: the dynamic loader's text,
	// the probe's own message, the missing dependencies.
	Detail string `json:"detail"`
	// Devices are the devices the plugin's probe reported (empty when it
	// was not probed).
	Devices []ProbedDevice `json:"devices"`
}

// ProbedDevice is one device as a plugin's probe describes it, before any
// runtime exists (core.Device.Info describes an opened runtime's devices).
type ProbedDevice struct {
	Index               int    `json:"index"`                // the device's number in the plugin
	Name                string `json:"name"`                 // "NVIDIA H200", "Apple M3 Max"
	Vendor              string `json:"vendor"`               // "NVIDIA", "Apple"
	Arch                string `json:"arch"`                 // "sm_90a", "apple9", "cpu"
	PCIBusID            string `json:"pci_bus_id"`           // "" where there is none
	DriverVersion       string `json:"driver_version"`       // the vendor driver's version
	MemoryTotal         uint64 `json:"memory_total"`         // bytes
	MemoryFree          uint64 `json:"memory_free"`          // bytes, when probed
	ComputeMajor        int    `json:"compute_major"`        // compute capability (CUDA), family (Metal)
	ComputeMinor        int    `json:"compute_minor"`        //
	MultiprocessorCount int    `json:"multiprocessor_count"` // SMs, GPU cores
	Flags               uint32 `json:"flags"`                // GPURT_DEVICE_* bits
}

// LatencyBounds are the upper bounds of the latency histograms' buckets
// (1us, 2us, 4us, ... 8.4s; the last bucket, above them all, is
// unbounded). It returns a new slice.
func LatencyBounds() []time.Duration {
	b := make([]time.Duration, 24)
	for i := range b {
		b[i] = time.Microsecond << i
	}
	return b
}

// Metrics are counters of what a runtime did since Open, for monitoring
// (inspect.Metrics; package github.com/metrale/gpurt/metrics exports
// them to Prometheus and expvar). Every counter only grows; DeviceLost and
// BufferBytes are states.
type Metrics struct {
	Launches      uint64 // kernels enqueued by core.Stream.Launch
	LaunchBatches uint64 // core.LaunchBatch.Submit calls that enqueued everything
	BatchLaunches uint64 // kernels enqueued through launch batches
	GEMMs         uint64 // GEMMs enqueued by core.Stream.Gemm
	AttentionRuns uint64 // attention.Attention.Run calls that ran
	QuantMatmuls  uint64 // matmul.Quant calls that ran
	GroupedGEMMs  uint64 // matmul.Grouped calls that ran
	Collectives   uint64 // collective.Comm.Run calls that enqueued a collective
	// BytesCopied are the bytes of successful copies by direction:
	// "host_to_device", "device_to_host", "device_to_device" (all three
	// always present).
	BytesCopied map[string]uint64
	// BufferBytes are the bytes of live core.Device.Alloc buffers, by device
	// index (devices with none are absent).
	BufferBytes map[int]uint64
	// Latency holds, while op timing is on (inspect.SetOpTiming), a histogram of
	// the host time of each successful call by operation (snake_case:
	// "stream_synchronize", "copy_from_host", "gemm", "attention_run",
	// ...): for synchronize and the synchronous copies the wait, for the
	// stream operations the time to enqueue. Only operations timed at
	// least once are present.
	Latency map[string]LatencyHistogram
	// Errors counts the error objects returned by the plugin, by code
	// (core-side argument checks that never reach the plugin are not
	// counted), by the code's name (core.ErrorCode.String: "out of
	// memory"). Only codes seen at least once are present.
	Errors map[string]uint64
	// DeviceLost is true once any call returned a device-lost error.
	DeviceLost bool
}

// LatencyHistogram is one operation's latencies: Count calls took Sum in
// all; Buckets[i] counts the calls under LatencyBounds()[i] (cumulative,
// as Prometheus has it), the calls above every bound are Count minus the
// last bucket.
type LatencyHistogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []uint64
}

// Heap describes a runtime's pinned host heap (inspect.HostHeap).
type Heap struct {
	InUse    uint64 // bytes in live slices (rounded to 256)
	Reserved uint64 // bytes of pinned blocks held
	Peak     uint64 // the highest InUse seen
	Blocks   uint64 // pinned blocks held
	Live     uint64 // live slices
	Allocs   uint64 // slices handed out since the heap was made
}

// Kernel describes a kernel as its plugin reports it (inspect.Kernel):
// the launch limits and the parameters, which launches are checked
// against.
type Kernel struct {
	MaxThreadsPerBlock uint32
	StaticSharedBytes  uint32
	Params             []Param
}

// Param is one kernel parameter: its kind, as core's Arg constructors
// name it ("buffer", "i8" .. "u64", "f16", "bf16", "f32", "f64"; "any"
// when the plugin knows only the size), and its size in bytes.
type Param struct {
	Kind string
	Size uint32
}

// OpCache are the counters of a runtime's GEMM plan cache
// (inspect.OpCache).
type OpCache struct {
	Hits      uint64
	Misses    uint64
	Evictions uint64
	Size      int // plans cached
	Capacity  int
	Pending   int // evicted plans waiting for a device synchronize
}

// Stats are the plugin's live-object counters of one runtime.
type Stats struct {
	LiveBuffers     uint64
	LiveHostBuffers uint64
	LiveStreams     uint64
	LiveEvents      uint64
	LiveModules     uint64
	LivePlans       uint64
	DeviceBytes     uint64 // device bytes allocated
	HostBytes       uint64 // pinned host bytes allocated
}

// Pool are the counters of a device's memory pool (pool.Pool;
// inspect.Pool, inspect.DevicePool). Bytes in use are the bytes asked for;
// the rest of reserved (rounding to the size class, cached blocks) is
// the fragmentation.
type Pool struct {
	Budget        uint64 // the most bytes the pool may reserve
	Reserved      uint64 // bytes of the blocks the pool holds (in use and cached)
	InUse         uint64 // bytes asked for by the live blocks
	Cached        uint64 // bytes of the cached (free) blocks
	PeakReserved  uint64 // the highest Reserved seen
	PeakInUse     uint64 // the highest InUse seen
	LiveBlocks    uint64 // blocks handed out and not freed
	CachedBlocks  uint64 // blocks on the free lists
	Hits          uint64 // allocations served from a cached block
	Misses        uint64 // allocations that took a new block from the plugin
	StreamWaits   uint64 // hits on another stream, ordered after the last owner's event by a stream wait
	Released      uint64 // cached blocks returned to the plugin (trims)
	OutOfMemory   uint64 // allocations refused (budget or device full)
	PluginRetries uint64 // plugin allocations retried after a trim
}

// Fragmentation is (Reserved - InUse) / Reserved: the share of reserved
// memory not holding asked-for bytes (0 when nothing is reserved).
func (s Pool) Fragmentation() float64 {
	if s.Reserved == 0 {
		return 0
	}
	return float64(s.Reserved-min(s.InUse, s.Reserved)) / float64(s.Reserved)
}
