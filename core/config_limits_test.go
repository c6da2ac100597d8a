// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConfigRefusesSilentChanges: Config values a C plugin or the loader
// would silently read otherwise (a NUL cutting the options or a path
// short, a negative watchdog becoming the default, a relative cache
// folder) are errors naming the field and the value, from Open and Probe
// alike, before anything is loaded.
func TestConfigRefusesSilentChanges(t *testing.T) {
	dir := testutil.MockPlugin(t)
	cases := []struct {
		name string
		cfg  core.Config
		env  map[string]string
		msg  string
	}{
		{"NUL in PluginOptions", core.Config{PluginOptions: "devices=2\x00devices=9"},
			nil, `Config.PluginOptions="devices=2\x00devices=9": NUL byte at offset 9 (the plugin would see only "devices=2")`},
		{"NUL in a plugin path", core.Config{PluginPaths: []string{dir, "/opt/x\x00y"}},
			nil, `Config.PluginPaths[1]="/opt/x\x00y": want a path without NUL bytes`},
		{"negative ProbeTimeout", core.Config{ProbeTimeout: -time.Second},
			nil, `Config.ProbeTimeout="-1s": want a positive duration, or 0 for the default (30s)`},
		{"relative ProbeCacheDir", core.Config{ProbeCacheDir: "cache"},
			nil, `Config.ProbeCacheDir="cache": want an absolute folder, or "off"`},
		{"relative GPURT_PROBE_CACHE", core.Config{},
			map[string]string{"GPURT_PROBE_CACHE": "./cache"}, `GPURT_PROBE_CACHE="./cache": want an absolute folder, or "off"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg := tc.cfg
			if cfg.PluginPaths == nil {
				cfg.PluginPaths = []string{dir}
			}
			cfg.Backend = "mock"
			rt, err := core.Open(cfg)
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Nil(t, rt)
			assert.Contains(t, err.Error(), "gpurt: open: invalid argument: "+tc.msg)
			rep, err := inspect.Probe(cfg)
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Nil(t, rep)
			assert.Contains(t, err.Error(), "gpurt: probe: invalid argument: "+tc.msg)
		})
	}

	t.Run("valid probe cache settings open", func(t *testing.T) {
		for _, cfg := range []core.Config{
			{ProbeCacheDir: "off"},
			{ProbeCacheDir: t.TempDir()},
			{ProbeTimeout: 5 * time.Second},
			{PluginOptions: "devices=2"},
		} {
			cfg.PluginPaths, cfg.Backend = []string{dir}, "mock"
			rt, err := core.Open(cfg)
			require.NoError(t, err, "%+v", cfg)
			require.NoError(t, rt.Close())
		}
	})
}

// TestKVCacheSizeOverflow: a shape whose byte count does not fit an int
// is ErrOutOfRange from AllocKVCache and NewKVCache, naming the sizes,
// and nothing is allocated (a wrapped product would make a cache smaller
// than its shape says).
func TestKVCacheSizeOverflow(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	small := alloc(t, d, 4096)
	base := attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 16, NumKVHeads: 8, HeadDim: 128, NumPages: 4}
	cases := []struct {
		name string
		edit func(*attention.KVCacheDesc)
		msg  string
	}{
		// 2^62 pages of 32 KiB wrap to 0 bytes in 64 bits.
		{"pages x page bytes wraps to zero", func(d *attention.KVCacheDesc) { d.NumPages = 1 << 62 }, "pages of 32768 bytes overflow the byte count"},
		{"pages x page bytes past MaxInt", func(d *attention.KVCacheDesc) { d.NumPages = math.MaxInt / 32768 * 2 }, "overflow the byte count"},
		{"one page overflows", func(d *attention.KVCacheDesc) {
			d.PageSize, d.NumKVHeads, d.HeadDim = math.MaxInt32, math.MaxInt32, math.MaxInt32
		}, "overflows the byte count"},
		{"one page wraps to a small count", func(d *attention.KVCacheDesc) {
			d.PageSize, d.NumKVHeads, d.HeadDim = 1<<30, 1<<30, 1<<3 // x 2 bytes = 2^64: wraps to 0
		}, "overflows the byte count"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			desc := base
			tc.edit(&desc)
			before, err := inspect.Stats(rt)
			require.NoError(t, err)
			c, err := attention.AllocKVCache(d, desc)
			require.ErrorIs(t, err, core.ErrOutOfRange)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.msg)
			after, err := inspect.Stats(rt)
			require.NoError(t, err)
			assert.Equal(t, before, after, "nothing allocated")
			c, err = attention.NewKVCache(desc, small, small)
			require.ErrorIs(t, err, core.ErrOutOfRange)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// TestKVCacheOverlap: K and V whose pages share bytes of one buffer are
// refused (AppendKV would write V over K); disjoint views of one buffer
// are fine.
func TestKVCacheOverlap(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	desc := attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 4, NumKVHeads: 2, HeadDim: 64, NumPages: 2}
	need := desc.NumPages * desc.PageBytes()
	buf := alloc(t, d, 3*need)
	view := func(off, n int) core.View {
		v, err := buf.View(off, n)
		require.NoError(t, err)
		return v
	}
	cases := []struct {
		name string
		k, v core.Region
		msg  string // "" = accepted
	}{
		{"the same buffer twice", buf, buf, "overlap in one buffer"},
		{"the same view twice", view(0, need), view(0, need), "overlap in one buffer"},
		{"V starts inside K", view(0, need), view(need-2, need), "overlap in one buffer"},
		{"K starts inside V", view(need/2, need), view(0, need), "overlap in one buffer"},
		{"adjacent", view(0, need), view(need, need), ""},
		{"apart, larger views", view(0, need), view(2*need, need), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := attention.NewKVCache(desc, tc.k, tc.v)
			if tc.msg == "" {
				require.NoError(t, err)
				require.NotNil(t, c)
				return
			}
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Nil(t, c)
		})
	}
}

// TestProbeCacheDirWiring: Config.ProbeCacheDir reaches the isolated
// probe's disk cache (Probe writes one entry there), and an entry turned
// into a FIFO or a link to /dev/zero afterwards costs a new probe, not a
// hang or a forged answer.
func TestProbeCacheDirWiring(t *testing.T) {
	dir := testutil.MockPlugin(t)
	cache := filepath.Join(t.TempDir(), "probe")
	cfg := core.Config{PluginPaths: []string{dir}, Backend: "mock", ProbeCacheDir: cache}
	_, err := inspect.Probe(cfg)
	require.NoError(t, err)
	entries, err := filepath.Glob(filepath.Join(cache, "*.json"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "one entry in Config.ProbeCacheDir")
	for _, odd := range []struct {
		name string
		make func(p string) error
		why  string
	}{
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "the entry is not a regular file"},
		{"link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "the entry is a symbolic link"},
	} {
		t.Run(odd.name, func(t *testing.T) {
			require.NoError(t, os.Remove(entries[0]))
			require.NoError(t, odd.make(entries[0]))
			// A new process (this process's memory cache would answer),
			// given the folder by GPURT_PROBE_CACHE.
			type res struct {
				out []byte
				err error
			}
			done := make(chan res, 1)
			go func() {
				out, err := testutil.RunTestChild(os.Args[0], "TestProbeCacheDirWiringChild",
					"GPURT_TEST_PROBE_CHILD_DIR="+dir, "GPURT_PROBE_CACHE="+cache, "GPURT_LOG_LEVEL=debug")
				done <- res{out, err}
			}()
			select {
			case r := <-done:
				require.NoError(t, r.err, "%s", r.out)
				assert.Contains(t, string(r.out), "--- PASS: TestProbeCacheDirWiringChild")
				assert.Contains(t, string(r.out), "probe cache: miss")
				assert.Contains(t, string(r.out), odd.why)
			case <-time.After(60 * time.Second):
				t.Fatal("probe hung on the odd cache entry")
			}
			fi, err := os.Lstat(entries[0])
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the entry was written again as a regular file (mode %s)", fi.Mode())
		})
	}
}

// TestProbeCacheDirWiringChild is TestProbeCacheDirWiring's new process.
func TestProbeCacheDirWiringChild(t *testing.T) {
	dir := os.Getenv("GPURT_TEST_PROBE_CHILD_DIR")
	if dir == "" {
		t.Skip("run by TestProbeCacheDirWiring")
	}
	rep, err := inspect.Probe(core.Config{PluginPaths: []string{dir}, Backend: "mock"})
	require.NoError(t, err)
	require.Equal(t, "mock", rep.Backend)
}
