// SPDX-License-Identifier: Apache-2.0

package core

import "sync/atomic"

// metrics are a runtime's operation counters: plain atomics bumped on the
// call path (no lock, no allocation), read by Runtime.Metrics.
type metrics struct {
	launches      atomic.Uint64
	batches       atomic.Uint64
	batchLaunches atomic.Uint64
	gemms         atomic.Uint64
	deviceLost    atomic.Bool
	errs          [numErrorCodes]atomic.Uint64
}

// numErrorCodes bounds the GPURT_ERR_* codes counted one by one; larger
// (unknown) codes are counted under 0.
const numErrorCodes = 32

// pluginError counts one error object returned by the plugin.
func (m *metrics) pluginError(c ErrorCode) {
	i := int(c)
	if i < 0 || i >= numErrorCodes {
		i = 0
	}
	m.errs[i].Add(1)
	if c == CodeDeviceLost {
		m.deviceLost.Store(true)
	}
}

// Metrics are counters of what a runtime did since Open, for monitoring
// (the package github.com/metrale/gpurt/metrics exports them to
// Prometheus and expvar). Every field only grows, except DeviceLost.
type Metrics struct {
	Launches      uint64 // kernels enqueued by Stream.Launch
	LaunchBatches uint64 // LaunchBatch.Submit calls that enqueued everything
	BatchLaunches uint64 // kernels enqueued through launch batches
	GEMMs         uint64 // GEMMs enqueued by Stream.Gemm
	// Errors counts the error objects returned by the plugin, by code
	// (core-side argument checks that never reach the plugin are not
	// counted). Only codes seen at least once are present.
	Errors map[ErrorCode]uint64
	// DeviceLost is true once any call returned a device-lost error.
	DeviceLost bool
}

// Metrics returns a snapshot of the runtime's counters. It is cheap, safe
// for concurrent use and works on a closed runtime (the counters stay).
func (rt *Runtime) Metrics() Metrics {
	if rt == nil {
		return Metrics{Errors: map[ErrorCode]uint64{}}
	}
	m := &rt.metrics
	out := Metrics{
		Launches:      m.launches.Load(),
		LaunchBatches: m.batches.Load(),
		BatchLaunches: m.batchLaunches.Load(),
		GEMMs:         m.gemms.Load(),
		Errors:        map[ErrorCode]uint64{},
		DeviceLost:    m.deviceLost.Load(),
	}
	for i := range m.errs {
		if n := m.errs[i].Load(); n != 0 {
			out.Errors[ErrorCode(i)] = n
		}
	}
	return out
}
