// SPDX-License-Identifier: Apache-2.0

package bench_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/internal/testutil"
)

// Timings are never asserted: only that each figure is there, positive
// where it must be, and that the hot paths allocate nothing.

func quickOnMock(t *testing.T) bench.Options {
	return bench.Options{Quick: true, Backend: "mock", PluginPaths: []string{testutil.MockPlugin(t)},
		Sizes: []int{64 << 10, 1 << 20}}
}

func TestRunQuickOnMock(t *testing.T) {
	rep, err := bench.Run(quickOnMock(t))
	require.NoError(t, err)
	assert.Equal(t, "mock", rep.Backend)
	positive := []string{"startup_ms", "dispatch_ns", "launch_us", "launch_batch_us", "launch_e2e_us", "launches_per_s",
		"launch_sync_us", "gemm_bf16_256_tflops", "gemm_host_us", "opcache_hits", "opcache_misses"}
	for _, m := range positive {
		t.Run(m, func(t *testing.T) {
			x, ok := rep.Find(m, 0)
			require.True(t, ok, "no %s in the report", m)
			assert.Positive(t, x.Value)
			assert.NotEmpty(t, x.Unit)
		})
	}
	for _, m := range []string{"htod_pageable_gbps", "dtoh_pageable_gbps", "htod_pinned_gbps", "dtoh_pinned_gbps", "dtod_gbps"} {
		for _, n := range []int{64 << 10, 1 << 20} {
			x, ok := rep.Find(m, n)
			require.True(t, ok, "no %s at %d bytes", m, n)
			assert.Positive(t, x.Value, "%s at %d bytes", m, n)
		}
	}
	for _, m := range []string{"dispatch_allocs", "launch_allocs", "launch_batch_allocs", "gemm_allocs"} {
		t.Run(m, func(t *testing.T) {
			x, ok := rep.Find(m, 0)
			require.True(t, ok)
			assert.Zero(t, x.Value, "allocations per call")
		})
	}
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "cgo baseline: not available")
}

func TestWriteJSONAndTable(t *testing.T) {
	rep, err := bench.Run(quickOnMock(t))
	require.NoError(t, err)
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	lines := testutil.JSONLines[map[string]any](t, &js)
	for _, m := range lines {
		for _, k := range []string{"metric", "value", "unit", "baseline", "ratio"} {
			assert.Contains(t, m, k, "%v", m)
		}
	}
	assert.Equal(t, len(rep.Results), len(lines))
	var tab bytes.Buffer
	require.NoError(t, rep.WriteTable(&tab))
	assert.Contains(t, tab.String(), "dispatch_ns")
	assert.Contains(t, tab.String(), "htod_pinned_gbps")
}

func TestParseSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "64K,1M,16MiB,1G", want: []int{64 << 10, 1 << 20, 16 << 20, 1 << 30}},
		{in: "4096, 2KB ,1gib", want: []int{4096, 2048, 1 << 30}},
		{in: "0", bad: true},
		{in: "-5", bad: true},
		{in: "12X", bad: true},
		{in: "17G", bad: true},
		{in: ",", bad: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := bench.ParseSizes(c.in)
			if c.bad {
				assert.ErrorContains(t, err, "bench: ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

// TestCgoBaseline builds gpurt-cgobench (cgo, tag cgobench) and checks
// that Run prints the dispatch figure beside it.
func TestCgoBaseline(t *testing.T) {
	testutil.CC(t)
	bin := filepath.Join(t.TempDir(), bench.CgoBenchName)
	testutil.Go(t, testutil.RepoRoot(t), []string{"CGO_ENABLED=1"}, "build", "-tags", "cgobench", "-o", bin, "./cmd/gpurt-cgobench")
	opts := quickOnMock(t)
	opts.CgoBench = bin
	opts.Sizes = []int{64 << 10}
	rep, err := bench.Run(opts)
	require.NoError(t, err)
	x, ok := rep.Find("dispatch_ns", 0)
	require.True(t, ok)
	require.NotNil(t, x.Baseline, "notes: %v", rep.Notes)
	require.NotNil(t, x.Ratio)
	assert.Positive(t, *x.Baseline)
	for _, m := range []string{"dispatch_cgo_ns", "dispatch_c_ns", "dispatch_cgoproc_ns",
		"launch_host_cgoproc_us", "launch_host_cgo_us", "launch_host_c_us",
		"gemm_host_cgoproc_us", "gemm_host_cgo_us", "gemm_host_c_us"} {
		t.Run(m, func(t *testing.T) {
			x, ok := rep.Find(m, 0)
			require.True(t, ok, "no %s; notes: %v", m, rep.Notes)
			assert.Positive(t, x.Value)
		})
	}
	for _, m := range []string{"launch_host_cgoproc_us", "gemm_host_cgoproc_us"} {
		x, _ := rep.Find(m, 0)
		assert.NotNil(t, x.Ratio, "%s has no ratio", m)
	}
	// the raw driver / cuBLASLt baselines are the cuda backend's only: a
	// note says so, and none of their figures is there
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "cgo baseline: launch_host_raw_us and gemm_host_raw_us skipped: the backend is mock")
	for _, m := range []string{"launch_host_raw_us", "launch_host_vs_raw", "launch_host_c_vs_raw",
		"gemm_host_raw_us", "gemm_host_vs_raw", "gemm_host_c_vs_raw"} {
		_, ok := rep.Find(m, 0)
		assert.False(t, ok, "%s on the mock", m)
	}
	// this process's own figures keep their names and carry no cgo baseline
	for _, m := range []string{"launch_us", "gemm_host_us"} {
		x, ok := rep.Find(m, 0)
		require.True(t, ok, "no %s", m)
		assert.Nil(t, x.Baseline, m)
	}
}
