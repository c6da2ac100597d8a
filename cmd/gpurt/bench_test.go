// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

func TestBenchCommand(t *testing.T) {
	dir := testutil.MockPlugin(t)
	t.Run("json", func(t *testing.T) {
		stdout, _ := clitest.RunOK(t, runBench, "--quick", "--json", "--backend", "mock", "--plugin-path", dir, "--sizes", "64K")
		seen := map[string]bool{}
		for _, x := range testutil.JSONLines[struct {
			Metric   string   `json:"metric"`
			Value    float64  `json:"value"`
			Unit     string   `json:"unit"`
			Baseline *float64 `json:"baseline"`
			Ratio    *float64 `json:"ratio"`
		}](t, stdout) {
			seen[x.Metric] = true
		}
		for _, m := range []string{"startup_ms", "dispatch_ns", "dispatch_allocs", "htod_pinned_gbps", "launch_us", "gemm_host_us"} {
			assert.True(t, seen[m], "no %s line", m)
		}
	})
	t.Run("table", func(t *testing.T) {
		stdout, _ := clitest.RunOK(t, runBench, "--quick", "--backend", "mock", "--plugin-path", dir, "--sizes", "64K", "--cgobench", "")
		assert.Contains(t, stdout.String(), "dispatch_ns")
		assert.Contains(t, stdout.String(), "backend mock")
	})
	t.Run("benchfmt", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "run.txt")
		stdout, _ := clitest.RunOK(t, runBench, "--quick", "--json", "--benchfmt", file, "--backend", "mock", "--plugin-path", dir, "--sizes", "64K", "--cgobench", "")
		assert.Contains(t, stdout.String(), `"metric":"dispatch_ns"`, "JSON on stdout")
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Regexp(t, `(?m)^BenchmarkDispatch_ns-\d+\t1\t\S+ ns/op$`, string(b))
		assert.Regexp(t, `(?m)^backend: mock$`, string(b))

		stdout, _ = clitest.RunOK(t, runBench, "--quick", "--benchfmt", "-", "--backend", "mock", "--plugin-path", dir, "--sizes", "64K", "--cgobench", "")
		assert.Regexp(t, `(?m)^BenchmarkHtod_pinned_gbps/size=64KiB-\d+\t1\t\S+ B/s$`, stdout.String())
		assert.NotContains(t, stdout.String(), "metric", "no table")
	})
	for _, c := range []struct {
		name string
		args []string
	}{
		{"bad sizes", []string{"--sizes", "lots"}},
		{"stray argument", []string{"now"}},
		{"unknown flag", []string{"--fast"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, stderr := clitest.Run(runBench, c.args...)
			assert.Equal(t, 2, st)
			assert.NotEmpty(t, stderr.String())
		})
	}
	t.Run("unknown backend", func(t *testing.T) {
		st, _, stderr := clitest.Run(runBench, "--quick", "--backend", "nonesuch", "--plugin-path", dir)
		assert.Equal(t, 2, st)
		assert.Contains(t, stderr.String(), "unknown backend")
	})
}
