// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"encoding/json"
	"expvar"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/core/pool"
	gtestutil "github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/metrics"
)

// workload opens the mock and does a known amount of work: 3 launches,
// one device-lost error. It returns the runtime and one live buffer.
func workload(t *testing.T) (*core.Runtime, *core.Buffer) {
	t.Helper()
	rt := mockrt.Open(t, "")
	dev := mockrt.Device0(t, rt)
	buf, err := dev.Alloc(4096)
	require.NoError(t, err)
	s := mockrt.Stream(t, dev)
	fill := mockrt.Builtin(t, dev, "fill_f32")
	for i := 0; i < 3; i++ {
		require.NoError(t, s.Launch(fill, core.Grid1D(1024, 256), core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1024)))
	}
	require.NoError(t, s.Synchronize())
	return rt, buf
}

func TestPrometheusCollector(t *testing.T) {
	rt, _ := workload(t)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(rt)))

	// Scrape over HTTP, as Prometheus would.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	scrape := func() string {
		resp, err := srv.Client().Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	body := scrape()
	for _, want := range []string{
		`gpurt_up{backend="mock"} 1`,
		`gpurt_kernel_launches_total{backend="mock"} 3`,
		`gpurt_live_objects{backend="mock",kind="buffers"}`,
		`gpurt_device_memory_total_bytes{backend="mock",device="0"}`,
		`gpurt_device_memory_free_bytes{backend="mock",device="0"}`,
		`gpurt_device_lost{backend="mock"} 0`,
		`gpurt_opcache_capacity{backend="mock"}`,
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "gpurt_plugin_errors_total")
	assert.Contains(t, body, `gpurt_device_memory_allocated_bytes{backend="mock",device="all"}`)
	assert.Contains(t, body, `gpurt_device_buffer_bytes{backend="mock",device="0"} 4096`)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpurt_gemms_total GEMMs enqueued by Stream.Gemm.
# TYPE gpurt_gemms_total counter
gpurt_gemms_total{backend="mock"} 0
`), "gpurt_gemms_total"))

	// Lose the device: the next call fails, the error is counted by code
	// and device_lost turns 1.
	require.NoError(t, inspect.Control(rt, "lose_device", 0))
	dev, _ := rt.Device(0)
	_, err := dev.Alloc(64)
	require.ErrorIs(t, err, core.ErrDeviceLost)
	body = scrape()
	assert.Contains(t, body, `gpurt_device_lost{backend="mock"} 1`)
	assert.Regexp(t, `gpurt_plugin_errors_total\{backend="mock",code="device_lost"\} [1-9]`, body)

	// A closed runtime still scrapes: up 0, the counters stay.
	require.NoError(t, rt.Close())
	body = scrape()
	assert.Contains(t, body, `gpurt_up{backend="mock"} 0`)
	assert.Contains(t, body, `gpurt_kernel_launches_total{backend="mock"} 3`)
}

func TestExpvar(t *testing.T) {
	rt, _ := workload(t)
	metrics.Publish("gpurt_test", rt)
	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	var vars map[string]json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&vars))
	require.Contains(t, vars, "gpurt_test")
	var v struct {
		Backend  string            `json:"backend"`
		Up       bool              `json:"up"`
		Launches uint64            `json:"launches"`
		Live     map[string]uint64 `json:"live"`
		Errors   map[string]uint64 `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(vars["gpurt_test"], &v))
	assert.Equal(t, "mock", v.Backend)
	assert.True(t, v.Up)
	assert.EqualValues(t, 3, v.Launches)
	assert.GreaterOrEqual(t, v.Live["buffers"], uint64(1))
	assert.Empty(t, v.Errors)
}

// TestCoreHasNoMetricsDependency: the Prometheus client stays out of core.
func TestCoreHasNoMetricsDependency(t *testing.T) {
	out := gtestutil.Go(t, "", nil, "list", "-deps", "github.com/metrale/gpurt/core")
	assert.Contains(t, string(out), "github.com/metrale/gpurt/core\n")
	assert.NotContains(t, string(out), "prometheus")
}

// TestOpMetrics: with a collector registered (op timing on), copies,
// synchronizes, GEMMs, quantized and grouped matmuls and collectives fill
// their counters and latency histograms; every label value is snake_case.
func TestOpMetrics(t *testing.T) {
	rt := mockrt.Open(t, "devices=2;delay_us=0")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(rt)))
	devs := rt.Devices()
	dev := devs[0]
	alloc := func(d *core.Device, n int) *core.Buffer {
		b, err := d.Alloc(n)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Free() })
		require.NoError(t, core.Memset(b, 0))
		return b
	}
	s := mockrt.Stream(t, dev)

	// copies: 1000 up, 600 down, 256 device to device
	buf := alloc(dev, 4096)
	require.NoError(t, core.CopyFromHost(buf, make([]byte, 1000)))
	require.NoError(t, core.CopyToHost(make([]byte, 600), buf))
	v, err := buf.View(0, 256)
	require.NoError(t, err)
	w, err := buf.View(1024, 256)
	require.NoError(t, err)
	require.NoError(t, core.Copy(w, v))
	// a bf16 GEMM 16x16x16
	a, b, d := alloc(dev, 512), alloc(dev, 512), alloc(dev, 512)
	require.NoError(t, s.Gemm(core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, M: 16, N: 16, K: 16},
		core.GemmOperands{A: a, B: b, D: d, Alpha: 1}))
	// an int8 matmul (MLX, group 64) and a grouped bf16 GEMM of two groups
	const m, k = 4, 64
	require.NoError(t, matmul.Quant(s, matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, Bits: 8, GroupSize: 64, M: m, N: 1, K: k},
		matmul.QuantOperands{W: alloc(dev, m*k), Scales: alloc(dev, 2*m*k/64), Biases: alloc(dev, 2*m*k/64),
			X: alloc(dev, 2*k), Y: alloc(dev, 2*m)}))
	require.NoError(t, matmul.Grouped(s, matmul.GroupedDesc{ABType: core.BF16, DType: core.BF16, N: 8, K: 16, MSizes: []int{2, 3}},
		matmul.GroupedOperands{A: alloc(dev, 5*16*2), B: alloc(dev, 2*8*16*2), D: alloc(dev, 5*8*2)}))
	// an all-reduce over the two devices
	c, err := collective.New(rt, devs...)
	require.NoError(t, err)
	defer c.Close()
	ops := mockrt.AllReduceOps(t, devs, 16)
	require.NoError(t, c.Run(ops...))
	for _, o := range ops {
		require.NoError(t, o.Stream.Synchronize())
	}
	require.NoError(t, s.Synchronize())

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpurt_bytes_copied_total Bytes of successful copies, by direction.
# TYPE gpurt_bytes_copied_total counter
gpurt_bytes_copied_total{backend="mock",direction="device_to_device"} 256
gpurt_bytes_copied_total{backend="mock",direction="device_to_host"} 600
gpurt_bytes_copied_total{backend="mock",direction="host_to_device"} 1000
# HELP gpurt_gemms_total GEMMs enqueued by Stream.Gemm.
# TYPE gpurt_gemms_total counter
gpurt_gemms_total{backend="mock"} 1
# HELP gpurt_quant_matmuls_total Quantized matmuls enqueued by matmul.Quant.
# TYPE gpurt_quant_matmuls_total counter
gpurt_quant_matmuls_total{backend="mock"} 1
# HELP gpurt_grouped_gemms_total Grouped GEMMs enqueued by matmul.Grouped.
# TYPE gpurt_grouped_gemms_total counter
gpurt_grouped_gemms_total{backend="mock"} 1
# HELP gpurt_collectives_total Collectives enqueued by Comm.Run.
# TYPE gpurt_collectives_total counter
gpurt_collectives_total{backend="mock"} 1
# HELP gpurt_attention_runs_total Attention runs enqueued by Stream.RunAttention.
# TYPE gpurt_attention_runs_total counter
gpurt_attention_runs_total{backend="mock"} 0
`), "gpurt_bytes_copied_total", "gpurt_gemms_total", "gpurt_quant_matmuls_total", "gpurt_grouped_gemms_total",
		"gpurt_collectives_total", "gpurt_attention_runs_total"))

	// one histogram series per op that ran, each with its count
	mfs, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.Regexp(t, `^[a-z0-9_]+$`, l.GetValue(), "%s{%s}: label values are snake_case", mf.GetName(), l.GetName())
			}
			if mf.GetName() != "gpurt_op_latency_seconds" {
				continue
			}
			h := m.GetHistogram()
			require.NotNil(t, h)
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					counts[l.GetValue()] = h.GetSampleCount()
				}
			}
			assert.Len(t, h.GetBucket(), len(diag.LatencyBounds()))
		}
	}
	for op, n := range map[string]uint64{"copy_from_host": 1, "copy_to_host": 1, "copy_device": 1, "gemm": 1,
		"quant_matmul": 1, "grouped_gemm": 1, "comm_run": 1} {
		assert.Equal(t, n, counts[op], op)
	}
	assert.GreaterOrEqual(t, counts["stream_synchronize"], uint64(3))
	assert.Equal(t, 1, testutil.CollectAndCount(metrics.NewCollector(rt), "gpurt_device_memory_allocated_bytes"))
	assert.Equal(t, 2, testutil.CollectAndCount(metrics.NewCollector(rt), "gpurt_device_buffer_bytes"), "one per device")
}

func TestPoolMetrics(t *testing.T) {
	rt, _ := workload(t)
	assert.Empty(t, metrics.Read(rt).Pools, "a pool never used is left out")
	dev, err := rt.Device(0)
	require.NoError(t, err)
	s := mockrt.Stream(t, dev)
	b, err := pool.Of(dev).Alloc(s, 1000)
	require.NoError(t, err)
	require.NoError(t, b.Free(s))
	b, err = pool.Of(dev).Alloc(s, 900) // a hit (class 1024), 900 of 1024 in use
	require.NoError(t, err)
	defer b.Free(s)

	snap := metrics.Read(rt)
	require.Len(t, snap.Pools, 1)
	assert.Equal(t, uint64(900), snap.Pools[0].Stats.InUse)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector(rt)))
	for name, want := range map[string]float64{
		`gpurt_pool_hits_total`:   1,
		`gpurt_pool_misses_total`: 1,
	} {
		n, err := testutil.GatherAndCount(reg, name)
		require.NoError(t, err)
		require.Equal(t, 1, n, name)
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name {
				assert.Equal(t, want, mf.GetMetric()[0].GetCounter().GetValue(), name)
			}
		}
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" {
					key += "/" + l.GetValue()
				}
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, 1024.0, got["gpurt_pool_bytes/reserved"])
	assert.Equal(t, 900.0, got["gpurt_pool_bytes/in_use"])
	assert.InDelta(t, 124.0/1024, got["gpurt_pool_fragmentation_ratio"], 1e-12)
	assert.Equal(t, 1.0, got["gpurt_pool_blocks/live"])

	v := metrics.Read(rt)
	require.Len(t, v.Pools, 1)
	js, err := json.Marshal(v.Pools[0].Stats)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"InUse":900`)
}
