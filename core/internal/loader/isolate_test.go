// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// isolatedOpts: testOpts with the probe isolated in a child (this test
// binary, through the package's init) and no disk cache.
func isolatedOpts(t *testing.T, paths ...string) Options {
	opts, _ := testOpts(t, paths...)
	opts.ProbeCacheDir = "-"
	opts.ProbeTimeout = 20 * time.Second
	resetProbeCache()
	return opts
}

func resetProbeCache() {
	probeCache.Lock()
	probeCache.m = map[string]Candidate{}
	probeCache.Unlock()
}

func TestIsolatedProbeCrash(t *testing.T) {
	dir := privDir(t)
	bad := buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DPROBE_CRASH")
	mock := buildPlugin(t, privDir(t), "mock")
	rep, p, err := Choose(isolatedOpts(t, dir, mock))
	require.NoError(t, err, "a crashing probe must cost a reason, not the process")
	require.NotNil(t, p)
	assert.Equal(t, "mock", rep.Backend)
	c := find(t, rep, bad)
	assert.Equal(t, StateFailed, c.State)
	assert.Contains(t, c.Reason, "probe crashed")
	assert.Contains(t, c.Reason, "SIGSEGV")
}

func TestIsolatedProbeHang(t *testing.T) {
	dir := privDir(t)
	bad := buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DPROBE_HANG")
	mock := buildPlugin(t, privDir(t), "mock")
	opts := isolatedOpts(t, dir, mock)
	opts.ProbeTimeout = 4 * time.Second // the race-built child alone can take over a second to start
	rep, _, err := Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, "mock", rep.Backend)
	c := find(t, rep, bad)
	assert.Equal(t, StateFailed, c.State)
	assert.Contains(t, c.Reason, "probe hung")

	// An explicit request for the hanging backend is an error naming it.
	opts.Backend = "cuda"
	_, _, err = Choose(opts)
	require.ErrorIs(t, err, ErrBackendUnavailable)
	assert.Contains(t, err.Error(), "probe hung")
}

func TestIsolatedProbeStdoutNoise(t *testing.T) {
	dir := privDir(t)
	noisy := buildPlugin(t, dir, "mock", "-DPROBE_NOISE")
	rep, p, err := Choose(isolatedOpts(t, dir))
	require.NoError(t, err)
	require.NotNil(t, p)
	c := find(t, rep, noisy)
	assert.Equal(t, StateSelected, c.State)
	require.Len(t, c.Devices, 1)
	assert.Equal(t, "Test Device", c.Devices[0].Name)
}

// probeCounter has a plugin built with -DPROBE_COUNT count its probes
// (GPURT_TEST_PROBE_COUNT, for this test) and returns how many so far.
// countedPlugin builds, in a private folder, a mock plugin that counts
// its probes (probes says how many so far), and returns it with isolated
// options that search the folder and keep a probe cache of their own.
func countedPlugin(t *testing.T) (pl string, probes func() int, opts Options) {
	dir := privDir(t)
	pl = buildPlugin(t, dir, "mock", "-DPROBE_COUNT")
	count := filepath.Join(privDir(t), "count")
	t.Setenv("GPURT_TEST_PROBE_COUNT", count)
	opts = isolatedOpts(t, dir)
	opts.ProbeCacheDir = privDir(t)
	return pl, func() int { b, _ := os.ReadFile(count); return len(b) }, opts
}

func TestIsolatedProbeCache(t *testing.T) {
	pl, probes, opts := countedPlugin(t)
	for i := 0; i < 3; i++ {
		rep, _, err := Choose(opts)
		require.NoError(t, err)
		assert.Equal(t, pl, rep.Selected)
	}
	assert.Equal(t, 1, probes(), "three Choose calls, one probe: the rest are cached")

	// A new process (memory cache empty) reads the disk cache.
	resetProbeCache()
	_, _, err := Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, 1, probes(), "the disk cache answers a new process")

	// The plugin file changes: its identity changes, it is probed again.
	// (This process loaded the old file and would refuse the changed one,
	// TestReplacedPlugin; forget that, as a new process would.)
	now := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(pl, now, now))
	resetLoaded()
	_, _, err = Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, 2, probes())

	// The environment the child sees is part of the key.
	t.Setenv("GPURT_MOCK_DEVICES", "2")
	_, _, err = Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, 3, probes())

	// A variable that cannot change a probe answer (the log level) does
	// not cost a new child.
	t.Setenv("GPURT_LOG_LEVEL", "debug")
	_, _, err = Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, 3, probes())

	// In process: no child, no cache, the probe runs every time.
	opts.ProbeInProcess = true
	for i := 0; i < 2; i++ {
		_, _, err = Choose(opts)
		require.NoError(t, err)
	}
	assert.Equal(t, 5, probes())
}

func TestIsolatedProbeEnvironmentAllowList(t *testing.T) {
	t.Setenv("GPURT_MOCK_DEVICES", "3")
	t.Setenv("SECRET_TOKEN", "x")
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	env := childEnvironment()
	assert.Contains(t, env, "GPURT_MOCK_DEVICES=3")
	assert.Contains(t, env, "CUDA_VISIBLE_DEVICES=0")
	assert.Contains(t, env, childEnv+"=1")
	assert.NotContains(t, env, "SECRET_TOKEN=x")
}

func TestIsolatedRealMock(t *testing.T) {
	dir := testutil.MockPlugin(t)
	rep, p, err := Choose(isolatedOpts(t, dir))
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, "mock", rep.Backend)
	assert.NotEmpty(t, find(t, rep, rep.Selected).Devices)
}

// BenchmarkChoose measures start-up on the real mock: the probe in
// process, isolated in a child (no cache), and isolated with a warm cache.
func BenchmarkChoose(b *testing.B) {
	dir := testutil.MockPlugin(b)
	run := func(b *testing.B, inProcess bool, cache string, reset bool) {
		opts := Options{Paths: []string{dir}, Backend: "mock", ProbeInProcess: inProcess, ProbeCacheDir: cache}
		for i := 0; i < b.N; i++ {
			if reset {
				resetProbeCache()
			}
			if _, _, err := Choose(opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("in-process", func(b *testing.B) { run(b, true, "-", false) })
	b.Run("isolated", func(b *testing.B) { run(b, false, "-", true) })
	b.Run("isolated-cached", func(b *testing.B) { run(b, false, b.TempDir(), false) })
}
