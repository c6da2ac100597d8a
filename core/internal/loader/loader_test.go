// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/testutil"
)

// --- helpers -------------------------------------------------------------

// privDir is a private (0700) temporary folder.
func privDir(t *testing.T) string { return testutil.PrivateDir(t) }

// buildPlugin compiles testdata/plugin.c with the given -D flags into
// dir/libgpurt_<backend>.<ext> (mode 0755) and returns its path.
//
// The package's tests build the same few plugins about 90 times: each
// build is compiled once per test binary (the cache below, keyed by the
// backend and flags) and written as a new file (a new inode, as the
// compiler writes it) at each later request.
func buildPlugin(t *testing.T, dir, backend string, defs ...string) string {
	out := filepath.Join(dir, "libgpurt_"+backend+pluginExt())
	key := backend + "\x00" + strings.Join(defs, "\x00")
	builtMu.Lock()
	lib, ok := built[key]
	builtMu.Unlock()
	if ok {
		if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(out, lib, 0o755))
		require.NoError(t, os.Chmod(out, 0o755))
		return out
	}
	args := []string{"-shared", "-fPIC", "-O1", "-I" + filepath.Join(testutil.RepoRoot(t), "abi"),
		`-DBACKEND="` + backend + `"`}
	args = append(args, defs...)
	args = append(args, "-o", out, filepath.Join("testdata", "plugin.c"))
	testutil.Compile(t, "testdata/plugin.c", args...)
	require.NoError(t, os.Chmod(out, 0o755))
	lib, err := os.ReadFile(out)
	require.NoError(t, err)
	builtMu.Lock()
	built[key] = lib
	builtMu.Unlock()
	return out
}

// buildPluginMissingDep builds the mock plugin of testdata/plugin.c into
// dir, linked against libgpurttestdep.so (testdata/dep.c) from a folder
// of its own, then removes that library: the plugin's dependency is
// missing (Linux only: the test skips elsewhere). It returns the plugin's
// path.
func buildPluginMissingDep(t *testing.T, dir string) string {
	requireLinux(t)
	depDir := privDir(t)
	dep := filepath.Join(depDir, "libgpurttestdep.so")
	testutil.Compile(t, "testdata/dep.c", "-shared", "-fPIC", "-o", dep, filepath.Join("testdata", "dep.c"))
	p := buildPlugin(t, dir, "mock", "-L"+depDir, "-Wl,--no-as-needed", "-lgpurttestdep")
	require.NoError(t, os.Remove(dep))
	return p
}

var (
	builtMu sync.Mutex
	built   = map[string][]byte{} // buildPlugin's plugins by backend and flags
)

// writeFile writes a plugin-named file with the given bytes (mode 0644).
func writeFile(t *testing.T, dir, name string, data []byte) string {
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	require.NoError(t, os.Chmod(p, 0o644))
	return p
}

// testOpts searches only the given paths: the environment is cleared and
// the executable is a file in an empty private folder.
func testOpts(t *testing.T, paths ...string) (Options, *bytes.Buffer) {
	t.Setenv("GPURT_PLUGIN_PATH", "")
	t.Setenv("GPURT_BACKEND", "")
	exeDir := privDir(t)
	exe := filepath.Join(exeDir, "gpurt")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: hclog.Trace, Output: &buf})
	return Options{Paths: paths, ExePath: exe, Logger: log}, &buf
}

// choose is Choose(opts), which must succeed.
func choose(t *testing.T, opts Options) (*Report, *bind.Plugin) {
	t.Helper()
	rep, p, err := Choose(opts)
	require.NoError(t, err)
	return rep, p
}

func find(t *testing.T, rep *Report, path string) Candidate {
	t.Helper()
	for _, c := range rep.Candidates {
		if c.Path == path {
			return c
		}
	}
	require.Failf(t, "no candidate", "%s not in report: %+v", path, rep.Candidates)
	return Candidate{}
}

// otherMachine is an ELF machine that is not this process's.
func otherMachine() elf.Machine {
	if runtime.GOARCH == "arm64" {
		return elf.EM_X86_64
	}
	return elf.EM_AARCH64
}

func requireLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ELF-specific case; this host is " + runtime.GOOS)
	}
}

// --- bad plugins ------------------------------------------------------------

// TestBadPlugins: each bad file is one candidate that fails (or is skipped)
// with its own reason, in the report and in the error; nothing crashes.
func TestBadPlugins(t *testing.T) {
	// built: the mock built with defs.
	built := func(defs ...string) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string { return buildPlugin(t, dir, "mock", defs...) }
	}
	// rewritten: the plugin of backend, built elsewhere, edited, written
	// as the mock's file (on Linux only, where linux is set).
	rewritten := func(backend string, linux bool, edit func(b []byte) []byte) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			if linux {
				requireLinux(t)
			}
			b, err := os.ReadFile(buildPlugin(t, privDir(t), backend))
			require.NoError(t, err)
			return writeFile(t, dir, "libgpurt_mock"+pluginExt(), edit(b))
		}
	}
	// chmodded: the mock with its file (or, with folder set, its folder)
	// set to mode.
	chmodded := func(mode os.FileMode, folder bool) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			p := buildPlugin(t, dir, "mock")
			target := p
			if folder {
				target = dir
			}
			require.NoError(t, os.Chmod(target, mode))
			return p
		}
	}
	cases := []struct {
		name   string
		make   func(t *testing.T, dir string) string // returns the candidate path
		state  State
		reason string // substring of the reason
		err    string // substring of the error ("" = reason)
	}{
		{"empty file", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "libgpurt_mock"+pluginExt(), nil)
		}, StateFailed, "empty file (0 bytes)", ""},
		{"text file", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "libgpurt_mock"+pluginExt(), []byte("this is not a plugin\n"))
		}, StateFailed, "a text file (starts \"this is not a plugin\")", ""},
		{"truncated", rewritten("mock", true, func(b []byte) []byte { return b[:len(b)/2] }), StateFailed, "truncated: the file is", ""},
		{"truncated header", func(t *testing.T, dir string) string {
			requireLinux(t)
			return writeFile(t, dir, "libgpurt_mock"+pluginExt(), []byte("\x7fELF\x02\x01\x01"))
		}, StateFailed, "truncated: 7 bytes, smaller than an ELF header", ""},
		{"other architecture", rewritten("mock", true, func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[18:], uint16(otherMachine()))
			return b
		}), StateFailed, "wrong architecture: built for", ""},
		{"32-bit", rewritten("mock", true, func(b []byte) []byte {
			b[elf.EI_CLASS] = byte(elf.ELFCLASS32)
			return b
		}), StateFailed, "wrong class: a 32-bit ELF file", ""},
		{"no entry symbol", built("-DNO_ENTRY"), StateFailed, "no entry symbol gpurt_plugin_negotiate", ""},
		{"other ABI major", built("-DMAJOR=2"), StateFailed, fmt.Sprintf("ABI major mismatch: the plugin speaks 2.%d, this core speaks 1.%d", abi.Minor, abi.Minor), ""},
		{"entry returns an error", built("-DENTRY_ERROR"), StateFailed, "returned an error (internal): test: entry refuses to load", ""},
		{"probe unavailable", built("-DUNAVAILABLE"), StateSkipped, "probe: unavailable (driver missing): libcuda.so.1 not found (test)", ""},
		{"probe returns an error", built("-DPROBE_ERROR"), StateFailed, "probe returned an error: gpurt: mock: probe: internal: test: probe exploded", ""},
		{"name and backend differ", rewritten("metal", false, func(b []byte) []byte { return b }), StateFailed, `file name says backend "mock" but the plugin says "metal"`, ""},
		{"missing dependency", buildPluginMissingDep, StateFailed, "missing dependency libgpurttestdep.so", ""},
		{"world-writable folder", chmodded(0o777, true), StateFailed, "is writable by group or others (mode drwxrwxrwx)", ""},
		{"group-writable file", chmodded(0o775, false), StateFailed, "is writable by group or others (mode -rwxrwxr-x)", ""},
		{"world-writable file", chmodded(0o666, false), StateFailed, "is writable by group or others (mode -rw-rw-rw-)", ""},
		{"a folder named like a plugin", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "libgpurt_mock"+pluginExt())
			require.NoError(t, os.Mkdir(p, 0o755))
			return p
		}, StateFailed, "not a regular file", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := privDir(t)
			path := tc.make(t, dir)
			opts, logs := testOpts(t, dir)
			rep, p, err := Choose(opts)
			require.Error(t, err)
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrNoBackend)
			c := find(t, rep, path)
			assert.Equal(t, tc.state, c.State)
			assert.Contains(t, c.Reason, tc.reason)
			assert.Contains(t, err.Error(), tc.reason, "the error names the reason")
			assert.Contains(t, err.Error(), dir, "the error names the folder searched")
			var le *Error
			require.True(t, errors.As(err, &le))
			assert.Same(t, rep, le.Report)
			assert.Contains(t, logs.String(), "decision")
		})
	}
}

// TestBadPluginDetails checks the details that come with some reasons.
func TestBadPluginDetails(t *testing.T) {
	t.Run("missing dependency names dlerror in detail", func(t *testing.T) {
		dir := privDir(t)
		p := buildPluginMissingDep(t, dir)
		opts, _ := testOpts(t, dir)
		rep, _, err := Choose(opts)
		require.Error(t, err)
		c := find(t, rep, p)
		assert.Contains(t, c.Detail, "dlopen: ")
		assert.Contains(t, c.Detail, "libgpurttestdep.so (not found)")
		assert.Contains(t, c.Detail, "libc.so.6 (/", "found dependencies are named with their path")
	})
	t.Run("ELF file on macOS", func(t *testing.T) {
		p := buildPlugin(t, privDir(t), "mock")
		fi, err := os.Stat(p)
		require.NoError(t, err)
		if runtime.GOOS == "darwin" {
			r := checkFormatFor(p, fi.Size(), "linux", "arm64")
			assert.Contains(t, r.reason, "a Mach-O file (built for macOS)")
		} else {
			r := checkFormatFor(p, fi.Size(), "darwin", "arm64")
			assert.Contains(t, r.reason, "an ELF file (built for Linux)")
		}
	})
}

// --- minors -----------------------------------------------------------------

func TestMinors(t *testing.T) {
	cases := []struct {
		name    string
		defs    []string
		abi     string
		hasGemm bool
	}{
		{"older minor (1.0 table, ends after launch)", []string{"-DMINOR=0", "-DOLD_TABLE"}, "1.0", false},
		{"newer minor (one above this core's, larger table)", []string{fmt.Sprintf("-DMINOR=%d", abi.Minor+1), "-DNEW_TABLE"}, fmt.Sprintf("1.%d", abi.Minor+1), true},
		{"same minor", nil, fmt.Sprintf("1.%d", abi.Minor), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := privDir(t)
			path := buildPlugin(t, dir, "mock", tc.defs...)
			opts, _ := testOpts(t, dir)
			rep, p := choose(t, opts)
			require.NotNil(t, p)
			c := find(t, rep, path)
			assert.Equal(t, StateSelected, c.State)
			assert.Equal(t, tc.abi, c.ABI)
			assert.Equal(t, "mock", rep.Backend)
			assert.Equal(t, path, rep.Selected)
			assert.Equal(t, tc.hasGemm, p.API.GemmRun != 0, "slots beyond the table stay zero")
			require.Len(t, c.Devices, 1)
			assert.Equal(t, "Test Device", c.Devices[0].Name)
			assert.Equal(t, uint64(1<<30), c.Devices[0].MemoryTotal)
			assert.Equal(t, 1, c.Devices[0].ComputeMajor)
			assert.Equal(t, 2, c.Devices[0].ComputeMinor)
		})
	}
}

// --- choosing ---------------------------------------------------------------

func TestChoice(t *testing.T) {
	t.Run("no plugin at all", func(t *testing.T) {
		dir := privDir(t)
		opts, _ := testOpts(t, dir)
		rep, p, err := Choose(opts)
		require.ErrorIs(t, err, ErrNoBackend)
		require.Nil(t, p)
		assert.Empty(t, rep.Candidates)
		assert.Contains(t, err.Error(), "no plugin files found")
		for _, s := range rep.Searched {
			assert.Contains(t, err.Error(), s)
		}
		assert.Contains(t, err.Error(), filepath.Dir(opts.ExePath))
	})
	t.Run("GPURT_BACKEND=cuda without a cuda plugin", func(t *testing.T) {
		dir := privDir(t)
		mock := buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		t.Setenv("GPURT_BACKEND", "cuda")
		rep, p, err := Choose(opts)
		require.ErrorIs(t, err, ErrBackendUnavailable)
		require.Nil(t, p)
		assert.Contains(t, err.Error(), `backend "cuda" requested (GPURT_BACKEND) cannot run here: no libgpurt_cuda`+pluginExt()+" found")
		c := find(t, rep, mock)
		assert.Equal(t, StateSkipped, c.State)
		assert.Equal(t, "not requested (GPURT_BACKEND=cuda)", c.Reason)
		assert.Equal(t, "cuda", rep.Requested)
	})
	t.Run("GPURT_BACKEND=cuda with a cuda plugin whose driver is missing", func(t *testing.T) {
		dir := privDir(t)
		cuda := buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DUNAVAILABLE")
		buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		t.Setenv("GPURT_BACKEND", "cuda")
		rep, _, err := Choose(opts)
		require.ErrorIs(t, err, ErrBackendUnavailable)
		c := find(t, rep, cuda)
		assert.Equal(t, StateSkipped, c.State)
		assert.Contains(t, c.Reason, "unavailable (driver missing)")
		assert.Contains(t, err.Error(), "unavailable (driver missing)")
		var le *Error
		require.True(t, errors.As(err, &le))
		assert.Len(t, le.Report.Candidates, 2, "the error carries the whole report")
	})
	t.Run("unknown GPURT_BACKEND", func(t *testing.T) {
		dir := privDir(t)
		buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		t.Setenv("GPURT_BACKEND", "vulkan")
		rep, p, err := Choose(opts)
		require.ErrorIs(t, err, ErrUnknownBackend)
		require.Nil(t, p)
		assert.Contains(t, err.Error(), `unknown backend "vulkan" (from GPURT_BACKEND); valid values: auto, cuda, metal, mock`)
		assert.Equal(t, "vulkan", rep.Requested)
	})
	t.Run("a backend gpurt does not ship, found on disk, can be requested", func(t *testing.T) {
		dir := privDir(t)
		rocm := buildPlugin(t, dir, "rocm", "-DPRIORITY=250")
		buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		assert.Equal(t, []string{"mock", "rocm"}, Found(opts), "in search order (ReadDir sorts by name)")
		opts.Backend = "rocm"
		rep, p := choose(t, opts)
		require.NotNil(t, p)
		assert.Equal(t, "rocm", rep.Backend)
		assert.Equal(t, rocm, rep.Selected)
		// auto takes it at the priority it announces (above mock's 100)
		opts.Backend = "auto"
		rep, _ = choose(t, opts)
		assert.Equal(t, "rocm", rep.Backend)
		// an unknown name lists the found one among the valid values
		opts.Backend = "vulkan"
		_, _, err := Choose(opts)
		require.ErrorIs(t, err, ErrUnknownBackend)
		assert.Contains(t, err.Error(), `unknown backend "vulkan" (from Config.Backend); valid values: auto, cuda, metal, mock, rocm`)
	})
	t.Run("Options.Backend beats GPURT_BACKEND", func(t *testing.T) {
		dir := privDir(t)
		buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		t.Setenv("GPURT_BACKEND", "cuda")
		opts.Backend = "MOCK"
		rep, p := choose(t, opts)
		require.NotNil(t, p)
		assert.Equal(t, "mock", rep.Backend)
		assert.Equal(t, "requested (Config.Backend=mock)", rep.Candidates[0].Reason)
	})
	t.Run("two mock plugins in two folders: the first wins", func(t *testing.T) {
		d1, d2 := privDir(t), privDir(t)
		first := buildPlugin(t, d1, "mock")
		second := buildPlugin(t, d2, "mock", "-DSCORE=50")
		opts, _ := testOpts(t, d1, d2)
		rep, p := choose(t, opts)
		assert.Equal(t, first, p.Path)
		assert.Equal(t, StateSelected, find(t, rep, first).State)
		c := find(t, rep, second)
		assert.Equal(t, StateSkipped, c.State)
		assert.Equal(t, "shadowed by "+first, c.Reason)
	})
	t.Run("auto prefers priority, then score", func(t *testing.T) {
		dir := privDir(t)
		cuda := buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DSCORE=1")
		mock := buildPlugin(t, dir, "mock")
		opts, logs := testOpts(t, dir)
		rep, p := choose(t, opts)
		assert.Equal(t, cuda, p.Path)
		assert.Equal(t, "cuda", rep.Backend)
		assert.Equal(t, StateSelected, find(t, rep, cuda).State)
		m := find(t, rep, mock)
		assert.Equal(t, StateAvailable, m.State)
		assert.Equal(t, "not chosen: cuda has a higher priority (300 > 100)", m.Reason)
		assert.Equal(t, 1, strings.Count(logs.String(), "[INFO]"), "one info line")
		assert.Contains(t, logs.String(), "backend chosen")
	})
	t.Run("auto passes over an unavailable better backend and says why", func(t *testing.T) {
		dir := privDir(t)
		buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DUNAVAILABLE")
		mock := buildPlugin(t, dir, "mock")
		opts, logs := testOpts(t, dir)
		rep, p := choose(t, opts)
		assert.Equal(t, mock, p.Path)
		assert.Equal(t, "mock", rep.Backend)
		var info string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "[INFO]") {
				info = l
			}
		}
		assert.Contains(t, info, "backend chosen: backend=mock")
		assert.Contains(t, info, "unavailable (driver missing)")
	})
	t.Run("NoMockFallback", func(t *testing.T) {
		dir := privDir(t)
		mock := buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, dir)
		opts.NoMockFallback = true
		rep, p, err := Choose(opts)
		require.ErrorIs(t, err, ErrNoBackend)
		require.Nil(t, p)
		c := find(t, rep, mock)
		assert.Equal(t, StateSkipped, c.State)
		assert.Contains(t, c.Reason, "mock fallback disabled")
		// An explicit mock request is not a fallback.
		opts.Backend = "mock"
		_, p, err = Choose(opts)
		require.NoError(t, err)
		require.NotNil(t, p)
	})
	t.Run("an explicit plugin file", func(t *testing.T) {
		dir := privDir(t)
		p1 := buildPlugin(t, dir, "mock")
		opts, _ := testOpts(t, p1)
		rep, p := choose(t, opts)
		assert.Equal(t, p1, p.Path)
		assert.Equal(t, []string{p1}, rep.Searched[:1])
	})
	t.Run("an explicit plugin file that is not there", func(t *testing.T) {
		missing := filepath.Join(privDir(t), "libgpurt_mock"+pluginExt())
		opts, _ := testOpts(t, missing)
		rep, _, err := Choose(opts)
		require.ErrorIs(t, err, ErrBackendUnavailable, "a plugin file given must load (TestExplicitPluginFile)")
		assert.Equal(t, "no such file", find(t, rep, missing).Reason)
	})
	t.Run("every candidate ends in exactly one state", func(t *testing.T) {
		d1, d2 := privDir(t), privDir(t)
		buildPlugin(t, d1, "cuda", "-DPRIORITY=300", "-DUNAVAILABLE")
		buildPlugin(t, d1, "mock")
		buildPlugin(t, d2, "mock")
		writeFile(t, d2, "libgpurt_metal"+pluginExt(), nil)
		opts, _ := testOpts(t, d1, d2)
		rep, _, err := Choose(opts)
		require.NoError(t, err)
		require.Len(t, rep.Candidates, 4)
		valid := map[State]bool{StateSelected: true, StateAvailable: true, StateSkipped: true, StateFailed: true}
		n := 0
		for _, c := range rep.Candidates {
			assert.True(t, valid[c.State], "%s: state %q", c.Path, c.State)
			assert.NotEmpty(t, c.Reason, c.Path)
			assert.NotNil(t, c.Devices)
			if c.State == StateSelected {
				n++
			}
		}
		assert.Equal(t, 1, n)
	})
}

// --- the search -------------------------------------------------------------

func TestSearchOrder(t *testing.T) {
	t.Run("paths, then GPURT_PLUGIN_PATH, then the executable's folders", func(t *testing.T) {
		opt1, env1, env2 := privDir(t), privDir(t), privDir(t)
		a := buildPlugin(t, opt1, "mock")
		b := buildPlugin(t, env1, "mock")
		opts, logs := testOpts(t, opt1)
		t.Setenv("GPURT_PLUGIN_PATH", env1+"::relative/dir:"+env2)
		rep, p := choose(t, opts)
		exeDir := filepath.Dir(opts.ExePath)
		assert.Equal(t, []string{opt1, env1, env2, exeDir, filepath.Join(exeDir, "lib", "gpurt"),
			filepath.Join(filepath.Dir(exeDir), "lib", "gpurt")}, rep.Searched)
		assert.Equal(t, a, p.Path)
		assert.Equal(t, "shadowed by "+a, find(t, rep, b).Reason)
		assert.Contains(t, logs.String(), "ignoring relative GPURT_PLUGIN_PATH entry")
		for _, s := range rep.Searched {
			assert.Contains(t, logs.String(), s, "every folder is logged at debug level")
		}
	})
	t.Run("the working directory is never searched", func(t *testing.T) {
		wd := privDir(t)
		buildPlugin(t, wd, "mock")
		t.Chdir(wd)
		opts, _ := testOpts(t)
		t.Setenv("GPURT_PLUGIN_PATH", ".")
		rep, _, err := Choose(opts)
		require.ErrorIs(t, err, ErrNoBackend)
		assert.NotContains(t, rep.Searched, wd)
	})
	t.Run("symlinked executable: its real folder is searched", func(t *testing.T) {
		real, link := privDir(t), privDir(t)
		exe := filepath.Join(real, "gpurt")
		require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
		lib := filepath.Join(real, "lib", "gpurt")
		require.NoError(t, os.MkdirAll(lib, 0o755))
		require.NoError(t, os.Chmod(filepath.Join(real, "lib"), 0o755))
		require.NoError(t, os.Chmod(lib, 0o755))
		pl := buildPlugin(t, lib, "mock")
		require.NoError(t, os.Symlink(exe, filepath.Join(link, "gpurt")))
		opts, _ := testOpts(t)
		opts.ExePath = filepath.Join(link, "gpurt")
		rep, p := choose(t, opts)
		realDir, _ := filepath.EvalSymlinks(real)
		assert.Equal(t, realDir, rep.Searched[0])
		assert.NotContains(t, rep.Searched, link)
		assert.Equal(t, filepath.Join(realDir, "lib", "gpurt", filepath.Base(pl)), p.Path)
	})
	t.Run("<exe dir>/../lib/gpurt", func(t *testing.T) {
		root := privDir(t)
		bin, lib := filepath.Join(root, "bin"), filepath.Join(root, "lib", "gpurt")
		for _, d := range []string{bin, filepath.Join(root, "lib"), lib} {
			require.NoError(t, os.MkdirAll(d, 0o755))
			require.NoError(t, os.Chmod(d, 0o755))
		}
		exe := filepath.Join(bin, "gpurt")
		require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
		pl := buildPlugin(t, lib, "mock")
		opts, _ := testOpts(t)
		opts.ExePath = exe
		_, p, err := Choose(opts)
		require.NoError(t, err)
		rp, _ := filepath.EvalSymlinks(pl)
		rpp, _ := filepath.EvalSymlinks(p.Path)
		assert.Equal(t, rp, rpp)
	})
}

func TestIgnorePluginPathEnv(t *testing.T) {
	cases := []struct {
		name                 string
		uid, euid, gid, egid int
		ignore               bool
	}{
		{"plain process", 1000, 1000, 1000, 1000, false},
		{"root", 0, 0, 0, 0, false},
		{"setuid root", 1000, 0, 1000, 1000, true},
		{"setuid other user", 1000, 1001, 1000, 1000, true},
		{"setgid", 1000, 1000, 1000, 0, true},
		{"both", 1000, 0, 1000, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.ignore, ignorePluginPathEnv(tc.uid, tc.euid, tc.gid, tc.egid))
		})
	}
}

func TestPluginBackendName(t *testing.T) {
	ext := pluginExt()
	cases := map[string]string{"libgpurt_cuda" + ext: "cuda", "libgpurt_mock" + ext: "mock",
		"libgpurt_" + ext: "", "libgpurt_mock.txt": "", "gpurt_mock" + ext: "", "libgpurt_x" + ext + ".1": ""}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			be, ok := pluginBackend(name)
			assert.Equal(t, want, be)
			assert.Equal(t, want != "", ok)
		})
	}
}

func TestLDCache(t *testing.T) {
	requireLinux(t)
	if _, err := os.Stat("/etc/ld.so.cache"); err != nil {
		t.Skip("no /etc/ld.so.cache")
	}
	m := ldCache(runtime.GOARCH)
	p, ok := m["libc.so.6"]
	require.True(t, ok, "libc.so.6 in ld.so.cache (%d entries)", len(m))
	assert.True(t, fileExists(p), p)
	assert.Empty(t, parseLDCache([]byte("garbage"), runtime.GOARCH))
	assert.Empty(t, parseLDCache(nil, runtime.GOARCH))
}

// --- the real mock ----------------------------------------------------------

func TestRealMockPlugin(t *testing.T) {
	dir := testutil.MockPlugin(t)
	opts, _ := testOpts(t, dir)
	rep, p := choose(t, opts)
	require.NotNil(t, p)
	assert.Equal(t, "mock", rep.Backend)
	assert.Equal(t, testutil.MockPluginPath(t), rep.Selected)
	c := find(t, rep, rep.Selected)
	assert.NotEmpty(t, c.Devices)
	assert.True(t, strings.HasPrefix(c.ABI, "1."), c.ABI)
}
