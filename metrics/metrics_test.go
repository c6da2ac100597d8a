// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"encoding/json"
	"expvar"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	gtest "github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/metrics"
)

// workload opens the mock and does a known amount of work: 3 launches,
// one device-lost error. It returns the runtime and one live buffer.
func workload(t *testing.T) (*core.Runtime, *core.Buffer) {
	t.Helper()
	dir := gtest.MockPlugin(t)
	rt, err := core.Open(core.Config{PluginPaths: []string{dir}, Backend: "mock"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	dev, err := rt.Device(0)
	require.NoError(t, err)
	buf, err := dev.Alloc(4096)
	require.NoError(t, err)
	s, err := dev.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	mod, err := dev.BuiltinModule()
	require.NoError(t, err)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, s.Launch(fill, core.Grid1D(1024, 256), core.ArgBuffer(buf), core.ArgF32(1), core.ArgU64(1024)))
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
	assert.Contains(t, body, `gpurt_device_memory_allocated_bytes{backend="mock"}`)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpurt_gemms_total GEMMs enqueued by Stream.Gemm.
# TYPE gpurt_gemms_total counter
gpurt_gemms_total{backend="mock"} 0
`), "gpurt_gemms_total"))

	// Lose the device: the next call fails, the error is counted by code
	// and device_lost turns 1.
	require.NoError(t, rt.Control("lose_device", 0))
	dev, _ := rt.Device(0)
	_, err := dev.Alloc(64)
	require.ErrorIs(t, err, core.ErrDeviceLost)
	body = scrape()
	assert.Contains(t, body, `gpurt_device_lost{backend="mock"} 1`)
	assert.Regexp(t, `gpurt_plugin_errors_total\{backend="mock",code="[a-z_ ]+"\} [1-9]`, body)

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
	out, err := exec.Command("go", "list", "-deps", "github.com/metrale/gpurt/core").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "github.com/metrale/gpurt/core\n")
	assert.NotContains(t, string(out), "prometheus")
}
