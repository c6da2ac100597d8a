// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestIntegrityRace: a build with recorded digests checks and hashes the
// plugin beside it; the test hook then swaps another plugin in, between
// the checksum and the probe and load. The swapped file (built with
// RAN_MARK: its initialiser writes a line before anything is called) is
// never run, in this process or in the isolated probe's child, and the
// candidate is refused.
func TestIntegrityRace(t *testing.T) {
	t.Setenv("GPURT_ALLOW_UNVERIFIED", "")
	cases := []struct {
		name      string
		inProcess bool
	}{
		{"renamed into place, probe in process", true},
		{"renamed into place, isolated probe", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exeDir := privDir(t)
			pl := buildPlugin(t, exeDir, "mock", "-DSCORE=1")
			evil := buildPlugin(t, privDir(t), "mock", "-DSCORE=99", "-DRAN_MARK")
			mark := filepath.Join(privDir(t), "ran")
			t.Setenv("GPURT_TEST_RAN_MARK", mark)
			withDigests(t, "mock="+sum(t, pl))
			resetLoaded()
			resetProbeCache()
			swapped := 0
			testHookVerified = func(path string) {
				if path == pl {
					require.NoError(t, os.Rename(evil, pl))
					swapped++
				}
			}
			t.Cleanup(func() { testHookVerified = nil })

			opts := besideOpts(t, exeDir)
			opts.ProbeInProcess = tc.inProcess
			opts.ProbeCacheDir = "-"
			opts.ProbeTimeout = 20 * time.Second
			rep, p, err := Choose(opts)
			require.Equal(t, 1, swapped, "the hook swapped the file once")
			require.Error(t, err)
			assert.Nil(t, p)
			c := find(t, rep, pl)
			assert.Equal(t, StateFailed, c.State)
			assert.Contains(t, c.Reason, "was replaced on disk while it was loaded")
			assert.NotEqual(t, int32(99), c.Score, "the swapped plugin's probe answered")
			_, statErr := os.Stat(mark)
			assert.ErrorIs(t, statErr, os.ErrNotExist, "the swapped plugin ran")

			// The next search sees the new file, checks it against the
			// digest and refuses it before loading anything.
			testHookVerified = nil
			rep, p, err = Choose(opts)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, find(t, rep, pl).Reason, "checksum mismatch")
			_, statErr = os.Stat(mark)
			assert.ErrorIs(t, statErr, os.ErrNotExist, "the swapped plugin ran")
		})
	}
}

// TestIntegrityRewrittenInPlace: the file's owner rewrites it in place
// (same inode) between the checksum and the load: the identity compared
// after loading differs and the candidate is refused before any of its
// functions is called.
func TestIntegrityRewrittenInPlace(t *testing.T) {
	t.Setenv("GPURT_ALLOW_UNVERIFIED", "")
	exeDir := privDir(t)
	pl := buildPlugin(t, exeDir, "mock", "-DSCORE=1")
	evil := buildPlugin(t, privDir(t), "mock", "-DSCORE=99", "-DRAN_MARK")
	evilBytes, err := os.ReadFile(evil)
	require.NoError(t, err)
	fi, err := os.Stat(pl)
	require.NoError(t, err)
	require.NotEqual(t, fi.Size(), int64(len(evilBytes)), "the two builds must differ in size for this test")
	withDigests(t, "mock="+sum(t, pl))
	resetLoaded()
	testHookVerified = func(path string) {
		if path == pl {
			require.NoError(t, os.WriteFile(pl, evilBytes, 0o755))
		}
	}
	t.Cleanup(func() { testHookVerified = nil })
	rep, p, err := Choose(besideOpts(t, exeDir))
	require.Error(t, err)
	assert.Nil(t, p)
	c := find(t, rep, pl)
	assert.Equal(t, StateFailed, c.State)
	assert.Contains(t, c.Reason, "was modified while it was loaded")
	assert.NotEqual(t, int32(99), c.Score)
}

// TestPinFile: the one open of a checked file refuses whatever took the
// file's place after the path checks, without hanging on a FIFO.
func TestPinFile(t *testing.T) {
	cases := []struct {
		name   string
		swap   func(t *testing.T, path string)
		reason string
	}{
		{"unchanged", func(t *testing.T, path string) {}, ""},
		{"FIFO", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, syscall.Mkfifo(path, 0o600))
		}, "no longer a regular file"},
		{"symbolic link", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other")
			require.NoError(t, os.WriteFile(other, []byte("x"), 0o600))
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Symlink(other, path))
		}, "cannot open file"},
		{"another file renamed over it", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other")
			require.NoError(t, os.WriteFile(other, []byte("other contents"), 0o600))
			require.NoError(t, os.Rename(other, path))
		}, "was replaced while it was checked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(privDir(t), "libgpurt_mock"+pluginExt())
			require.NoError(t, os.WriteFile(path, []byte("contents"), 0o600))
			fi, err := os.Lstat(path)
			require.NoError(t, err)
			c := &cand{real: path, ident: identityOf(fi)}
			tc.swap(t, path)
			done := make(chan *refusal, 1)
			go func() { done <- pinFile(c) }()
			var r *refusal
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("pinFile hung")
			}
			defer releaseFile(c)
			if tc.reason == "" {
				require.Nil(t, r)
				require.NotNil(t, c.file)
				return
			}
			require.NotNil(t, r)
			assert.Contains(t, r.reason, tc.reason)
			assert.Nil(t, c.file)
		})
	}
}

// TestProbeChildRunsRunningImage: the isolated probe re-runs the image
// this process runs, not whatever its path names now. A copy of this test
// binary replaces its own file with a script (that leaves a mark), then
// chooses with the probe isolated: the probe answers and the script never
// runs.
func TestProbeChildRunsRunningImage(t *testing.T) {
	if os.Getenv("GPURT_TEST_SELF_REPLACE") == "1" {
		selfReplaceHelper(t)
		return
	}
	requireLinux(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(exe)
	require.NoError(t, err)
	dir := privDir(t)
	cp := filepath.Join(dir, "loader.test")
	require.NoError(t, os.WriteFile(cp, b, 0o755))
	plDir := privDir(t)
	buildPlugin(t, plDir, "mock")
	mark := filepath.Join(privDir(t), "ran")
	out, err := testutil.RunTestChild(cp, "TestProbeChildRunsRunningImage",
		"GPURT_TEST_SELF_REPLACE=1", "GPURT_TEST_PLUGIN_DIR="+plDir, "GPURT_TEST_RAN_MARK="+mark)
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "self-replaced; chose mock")
	_, statErr := os.Stat(mark)
	assert.ErrorIs(t, statErr, os.ErrNotExist, "the file renamed over the executable ran")
}

// selfReplaceHelper runs in the copy: it renames a script over its own
// executable, then chooses with the probe isolated.
func selfReplaceHelper(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	script := exe + ".new"
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho ran >> \"$GPURT_TEST_RAN_MARK\"\nexit 1\n"), 0o755))
	require.NoError(t, os.Rename(script, exe))
	opts, _ := testOpts(t, os.Getenv("GPURT_TEST_PLUGIN_DIR"))
	opts.ProbeCacheDir = "-"
	opts.ProbeTimeout = 20 * time.Second
	rep, p, err := Choose(opts)
	require.NoError(t, err)
	require.NotNil(t, p)
	fmt.Println("self-replaced; chose", rep.Backend)
}

// TestPinnedConcurrentChoose: many goroutines choosing the same plugin at
// once all load it, through one descriptor kept for it (a second name for
// one library would be a descriptor that can never be closed).
func TestPinnedConcurrentChoose(t *testing.T) {
	requireLinux(t) // macOS loads by path: nothing is pinned
	dir := privDir(t)
	pl := buildPlugin(t, dir, "mock")
	resetLoaded()
	opts, _ := testOpts(t, dir)
	opts.ProbeInProcess = true
	const n = 16
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			rep, p, err := Choose(opts)
			if err == nil && (p == nil || rep.Selected != pl) {
				err = fmt.Errorf("selected %q", rep.Selected)
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
	}
	fi, err := os.Stat(pl)
	require.NoError(t, err)
	id := identityOf(fi)
	pinned.Lock()
	kept, ok := pinned.m[[2]uint64{id.dev, id.ino}]
	total := len(pinned.m)
	pinned.Unlock()
	require.True(t, ok, "the loaded file is pinned")
	assert.Equal(t, id, kept.id)
	assert.Equal(t, 1, total, "one descriptor for one file")
}

// TestPinnedNoDescriptorLeak: choosing again and again, with plugins that
// load, fail or are skipped, leaves no descriptor open beyond the one kept
// per loaded file.
func TestPinnedNoDescriptorLeak(t *testing.T) {
	requireLinux(t)
	dir := privDir(t)
	buildPlugin(t, dir, "mock")
	buildPlugin(t, dir, "cuda", "-DUNAVAILABLE", "-DPRIORITY=300")
	writeFile(t, dir, "libgpurt_metal"+pluginExt(), []byte("not a plugin"))
	opts, _ := testOpts(t, dir)
	opts.ProbeInProcess = true
	fds := func() int {
		des, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(des)
	}
	_, _, err := Choose(opts) // the first load pins the files it loads
	require.NoError(t, err)
	before := fds()
	for i := 0; i < 20; i++ {
		_, _, err := Choose(opts)
		require.NoError(t, err)
	}
	assert.Equal(t, before, fds())
}

// TestOriginPluginLoadsByPath: a plugin whose RUNPATH names $ORIGIN is
// loaded by its path (through /proc/self/fd, $ORIGIN would name
// /proc/self/fd), and still checked: it loads when nothing moved; a file
// swapped in before the load is refused before loading, one swapped in
// during the load is refused after it (its initialiser has run: the
// price of $ORIGIN, said in pin_unix.go), and none of its functions is
// called.
func TestOriginPluginLoadsByPath(t *testing.T) {
	requireLinux(t)
	cases := []struct {
		name   string
		hook   func(pl, evil string) // installs the swap
		reason string                // "" = selected
		ran    bool                  // the swapped file's initialiser ran
	}{
		{"unchanged", func(pl, evil string) {}, "", false},
		{"swapped before the load", func(pl, evil string) {
			testHookVerified = func(path string) {
				if path == pl {
					_ = os.Rename(evil, pl)
				}
			}
		}, "was replaced on disk before loading", false},
		{"swapped during the load", func(pl, evil string) {
			testHookBeforePathLoad = func(path string) {
				if path == pl {
					_ = os.Rename(evil, pl)
				}
			}
		}, "was replaced on disk while it was loaded", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := privDir(t)
			pl := buildPlugin(t, dir, "mock", "-Wl,-rpath,$ORIGIN")
			evil := buildPlugin(t, privDir(t), "mock", "-DSCORE=99", "-DRAN_MARK", "-Wl,-rpath,$ORIGIN")
			mark := filepath.Join(privDir(t), "ran")
			t.Setenv("GPURT_TEST_RAN_MARK", mark)
			resetLoaded()
			tc.hook(pl, evil)
			t.Cleanup(func() { testHookVerified, testHookBeforePathLoad = nil, nil })
			opts, logs := testOpts(t, dir)
			opts.ProbeInProcess = true
			rep, p, err := Choose(opts)
			c := find(t, rep, pl)
			if tc.reason == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				assert.Equal(t, StateSelected, c.State)
				assert.Contains(t, logs.String(), "origin_rpath=true", "the $ORIGIN RUNPATH was seen")
				return
			}
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Equal(t, StateFailed, c.State)
			assert.Contains(t, c.Reason, tc.reason)
			assert.NotEqual(t, int32(99), c.Score)
			b, _ := os.ReadFile(mark)
			assert.NotContains(t, string(b), "negotiated", "a function of the swapped file was called")
			assert.Equal(t, tc.ran, len(b) > 0, "initialiser marks: %q", b)
		})
	}
}

// TestMappedIsPinned: /proc/self/maps names the file a loaded library
// was mapped from; another file's identity does not match it.
func TestMappedIsPinned(t *testing.T) {
	requireLinux(t)
	pl := buildPlugin(t, privDir(t), "mock")
	fi, err := os.Stat(pl)
	require.NoError(t, err)
	h, err := purego.Dlopen(pl, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	c := &cand{real: pl, ident: identityOf(fi)}
	assert.Nil(t, c.mappedIsPinned(h))
	c.ident.ino++
	r := c.mappedIsPinned(h)
	require.NotNil(t, r)
	assert.Contains(t, r.reason, "is not the file checked")
	assert.Contains(t, r.detail, fmt.Sprintf("inode %d", c.ident.ino-1))
}
