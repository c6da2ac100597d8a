// SPDX-License-Identifier: Apache-2.0

package core

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/metrale/gpurt/core/diag"
)

// metrics are a runtime's operation counters and latency histograms:
// plain atomics bumped on the call path (no lock, no allocation), read by
// inspect.Metrics (package core/inspect). The histograms are filled only while op timing is on
// (inspect.SetOpTiming; the metrics package's collector turns it on); the
// counters always count.
type metrics struct {
	launches      atomic.Uint64
	batches       atomic.Uint64
	batchLaunches atomic.Uint64
	gemms         atomic.Uint64
	deviceLost    atomic.Bool
	errs          [numErrorCodes]atomic.Uint64

	timing atomic.Bool
	ops    [numOps]opStats
	copied [numCopyDirs]atomic.Uint64
	// buffers are the bytes of live Device.Alloc buffers, per device.
	buffers [maxMetricDevices]atomic.Int64
}

// numErrorCodes bounds the GPURT_ERR_* codes counted one by one; larger
// (unknown) codes are counted under 0.
const numErrorCodes = 32

// maxMetricDevices bounds the devices whose buffer bytes are counted one
// by one (a device index beyond it is not counted).
const maxMetricDevices = 64

// opKind is an operation with a latency histogram and a counter.
type opKind uint8

const (
	opStreamSynchronize opKind = iota
	opDeviceSynchronize
	opEventSynchronize
	opCopyFromHost
	opCopyToHost
	opCopyDevice
	opCopyFromPinned
	opCopyToPinned
	opStreamCopyDevice
	opGemm
	opAttentionRun
	opQuantMatmul
	opGroupedGemm
	opCommRun
	numOps
)

// opNames are the ops' label values (snake_case, the ABI's words).
var opNames = [numOps]string{
	opStreamSynchronize: "stream_synchronize",
	opDeviceSynchronize: "device_synchronize",
	opEventSynchronize:  "event_synchronize",
	opCopyFromHost:      "copy_from_host",
	opCopyToHost:        "copy_to_host",
	opCopyDevice:        "copy_device",
	opCopyFromPinned:    "copy_from_pinned",
	opCopyToPinned:      "copy_to_pinned",
	opStreamCopyDevice:  "stream_copy_device",
	opGemm:              "gemm",
	opAttentionRun:      "attention_run",
	opQuantMatmul:       "quant_matmul",
	opGroupedGemm:       "grouped_gemm",
	opCommRun:           "comm_run",
}

// copyDir is a copy's direction, for the bytes-copied counters.
type copyDir uint8

const (
	copyHostToDevice copyDir = iota
	copyDeviceToHost
	copyDeviceToDevice
	numCopyDirs
)

var copyDirNames = [numCopyDirs]string{"host_to_device", "device_to_host", "device_to_device"}

// numLatencyBuckets is the histograms' bucket count: bucket i < last
// holds calls under 2^i microseconds, the last everything slower.
const numLatencyBuckets = 25

// opStats are one op's counter and histogram.
type opStats struct {
	n       atomic.Uint64 // successful calls (timed or not)
	timed   atomic.Uint64 // calls in the histogram
	sumNs   atomic.Uint64
	buckets [numLatencyBuckets]atomic.Uint64
}

// epoch is the monotonic origin of begin's readings.
var epoch = time.Now()

// begin returns the time an op starts, or 0 when op timing is off (then
// end records no latency).
func (m *metrics) begin() int64 {
	if !m.timing.Load() {
		return 0
	}
	return int64(time.Since(epoch)) + 1 // never 0
}

// end counts a successful op (and its latency when t0 is not 0) and
// returns err unchanged; a failed op is not counted (the plugin's error
// is, by code).
func (m *metrics) end(op opKind, t0 int64, err error) error {
	if err != nil {
		return err
	}
	s := &m.ops[op]
	s.n.Add(1)
	if t0 != 0 {
		d := max(int64(time.Since(epoch))+1-t0, 0)
		s.timed.Add(1)
		s.sumNs.Add(uint64(d))
		s.buckets[latencyBucket(d)].Add(1)
	}
	return nil
}

// latencyBucket is the histogram bucket of a latency of d nanoseconds:
// under 1us bucket 0, [2^(i-1), 2^i) us bucket i, the last bucket beyond
// the last bound.
func latencyBucket(d int64) int {
	return min(bits.Len64(uint64(max(d, 0))/1000), numLatencyBuckets-1)
}

// copy is end for a copy of n bytes in direction dir.
func (m *metrics) copy(op opKind, dir copyDir, n uint64, t0 int64, err error) error {
	if err == nil {
		m.copied[dir].Add(n)
	}
	return m.end(op, t0, err)
}

// buffer counts a Device.Alloc (delta > 0) or Buffer.Free (delta < 0) of
// device dev that succeeded, and returns err unchanged.
func (m *metrics) buffer(dev uint32, delta int64, err error) error {
	if err == nil && dev < maxMetricDevices {
		m.buffers[dev].Add(delta)
	}
	return err
}

// pluginError counts one error object returned by the plugin.
func (m *metrics) pluginError(c ErrorCode) {
	i := int(c)
	if i < 0 || i >= numErrorCodes {
		i = 0
	}
	m.errs[i].Add(1)
	if c == codeDeviceLost {
		m.deviceLost.Store(true)
	}
}

// SetOpTiming turns the latency histograms of Metrics on or off (off at
// Open). While on, each timed call reads the clock twice (tens of
// nanoseconds; BenchmarkOpTiming measures it); off, a call costs one
// atomic load. Safe for concurrent use.
func (rt *Runtime) setOpTiming(on bool) {
	if rt != nil {
		rt.metrics.timing.Store(on)
	}
}

// Metrics returns a snapshot of the runtime's counters. It is cheap, safe
// for concurrent use and works on a closed runtime (the counters stay).
func (rt *Runtime) snapshotMetrics() diag.Metrics {
	if rt == nil {
		return diag.Metrics{Errors: map[string]uint64{}, BytesCopied: map[string]uint64{},
			BufferBytes: map[int]uint64{}, Latency: map[string]diag.LatencyHistogram{}}
	}
	m := &rt.metrics
	out := diag.Metrics{
		Launches:      m.launches.Load(),
		LaunchBatches: m.batches.Load(),
		BatchLaunches: m.batchLaunches.Load(),
		GEMMs:         m.gemms.Load(),
		AttentionRuns: m.ops[opAttentionRun].n.Load(),
		QuantMatmuls:  m.ops[opQuantMatmul].n.Load(),
		GroupedGEMMs:  m.ops[opGroupedGemm].n.Load(),
		Collectives:   m.ops[opCommRun].n.Load(),
		BytesCopied:   make(map[string]uint64, numCopyDirs),
		BufferBytes:   map[int]uint64{},
		Latency:       map[string]diag.LatencyHistogram{},
		Errors:        map[string]uint64{},
		DeviceLost:    m.deviceLost.Load(),
	}
	for d := range m.copied {
		out.BytesCopied[copyDirNames[d]] = m.copied[d].Load()
	}
	for d := range m.buffers {
		if n := m.buffers[d].Load(); n > 0 {
			out.BufferBytes[d] = uint64(n)
		}
	}
	for op := range m.ops {
		s := &m.ops[op]
		n := s.timed.Load()
		if n == 0 {
			continue
		}
		h := diag.LatencyHistogram{Count: n, Sum: time.Duration(s.sumNs.Load()), Buckets: make([]uint64, numLatencyBuckets-1)}
		var cum uint64
		for i := range h.Buckets {
			cum += s.buckets[i].Load()
			h.Buckets[i] = cum
		}
		// The fields are read one by one while calls go on: keep the
		// snapshot consistent (no bucket above the count).
		h.Count = max(h.Count, cum+s.buckets[numLatencyBuckets-1].Load())
		out.Latency[opNames[op]] = h
	}
	for i := range m.errs {
		if n := m.errs[i].Load(); n != 0 {
			out.Errors[ErrorCode(i).String()] = n
		}
	}
	return out
}
