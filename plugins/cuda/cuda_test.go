// SPDX-License-Identifier: Apache-2.0

//go:build linux && (amd64 || arm64)

// Package cuda_test checks the CUDA plugin on a host without a GPU: it
// builds libgpurt_cuda.so with scripts/build_cuda.sh --ci (skipping when
// the CUDA toolchain cannot be had), checks what the library exports and
// needs, and loads it to check that probe reports a missing driver (or, with
// a fake libcuda.so.1 from testdata/, a driver too old and no device)
// without printing, crashing, or disturbing Go's signal handlers.
package cuda_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/testutil"
)

var (
	buildOnce sync.Once
	buildLib  []byte // the built plugin's bytes
	buildSkip string
	buildErr  string
)

// plugin builds the plugin once per test binary (in the first caller's
// t.TempDir) and returns the path of a copy in a private folder of t's own
// t.TempDir.
func plugin(t *testing.T) string {
	t.Helper()
	testutil.CC(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash: %v", err)
	}
	buildOnce.Do(func() {
		dir := t.TempDir()
		script := filepath.Join(testutil.RepoRoot(t), "scripts", "build_cuda.sh")
		out, err := exec.Command("bash", script, "--ci", dir).CombinedOutput()
		switch {
		case err != nil:
			buildErr = fmt.Sprintf("scripts/build_cuda.sh --ci: %v\n%s", err, out)
		case bytes.Contains(out, []byte("SKIP:")):
			buildSkip = string(out)
		default:
			if buildLib, err = os.ReadFile(filepath.Join(dir, "libgpurt_cuda.so")); err != nil {
				buildErr = err.Error()
			}
		}
	})
	if buildSkip != "" {
		t.Skipf("CUDA toolchain unavailable: %s", buildSkip)
	}
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return filepath.Join(testutil.PrivateCopy(t, "libgpurt_cuda.so", buildLib), "libgpurt_cuda.so")
}

// pluginELF is the built plugin opened as an ELF file, closed when the
// test ends.
func pluginELF(t *testing.T) *elf.File {
	f, err := elf.Open(plugin(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestExportsOnlyTheEntry(t *testing.T) {
	f := pluginELF(t)
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var defined []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL && s.Name != "" {
			defined = append(defined, s.Name)
		}
	}
	require.Equal(t, []string{abi.EntrySymbol}, defined)
}

func TestNeedsOnlyTheCLibrary(t *testing.T) {
	f := pluginELF(t)
	needed, err := f.ImportedLibraries()
	require.NoError(t, err)
	for _, n := range needed {
		ok := false
		for _, p := range []string{"libc.so.", "libm.so.", "libdl.so.", "libpthread.so.", "ld-linux"} {
			ok = ok || strings.HasPrefix(n, p)
		}
		require.True(t, ok, "DT_NEEDED %s: only the C library may be needed (libcuda is dlopen'ed)", n)
	}
	imported, err := f.ImportedSymbols()
	require.NoError(t, err)
	for _, s := range imported {
		require.False(t, strings.HasPrefix(s.Name, "cu"), "links against %s", s.Name)
	}
}

// sigactions reads every signal's disposition (raw kernel struct bytes).
func sigactions(t *testing.T) map[int][4]uint64 {
	t.Helper()
	m := map[int][4]uint64{}
	for sig := 1; sig <= 64; sig++ {
		var sa [4]uint64
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&sa)), 8, 0, 0)
		if errno == 0 {
			m[sig] = sa
		}
	}
	return m
}

type loaded struct {
	api *abi.API
}

func load(t *testing.T, lib string) loaded {
	t.Helper()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	entry, err := purego.Dlsym(h, abi.EntrySymbol)
	require.NoError(t, err)
	args := abi.NegotiateArgs{HostABIMajor: abi.Major, HostABIMinor: abi.Minor}
	args.StructSize = uint64(unsafe.Sizeof(args))
	rc, _, _ := purego.SyscallN(entry, uintptr(unsafe.Pointer(&args)))
	runtime.KeepAlive(&args)
	require.Equal(t, uintptr(abi.OK), rc, abi.CString(args.Message[:]))
	require.NotZero(t, args.API)
	require.Equal(t, uint32(abi.Major), args.PluginABIMajor)
	api := (*abi.API)(unsafePtr(args.API))
	require.GreaterOrEqual(t, api.StructSize, uint64(unsafe.Sizeof(abi.API{})))
	return loaded{api: api}
}

// unsafePtr converts an address of C memory (the plugin's static table).
func unsafePtr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

type probeResult struct {
	available bool
	code      int32
	count     uint32
	reason    string
	name      string
	arch      string
}

func (l loaded) probe(t *testing.T) probeResult {
	t.Helper()
	var dev abi.DeviceInfo
	dev.StructSize = uint64(unsafe.Sizeof(dev))
	var a abi.ProbeArgs
	a.StructSize = uint64(unsafe.Sizeof(a))
	a.Devices = &dev
	a.DeviceCapacity = 1
	e, _, _ := purego.SyscallN(l.api.Probe, uintptr(unsafe.Pointer(&a)))
	runtime.KeepAlive(&a)
	runtime.KeepAlive(&dev)
	require.Zero(t, e, "probe returned an error object")
	return probeResult{a.Available == 1, a.ReasonCode, a.DeviceCount, abi.CString(a.Reason[:]),
		abi.CString(dev.Name[:]), abi.CString(dev.Arch[:])}
}

// runtimeCreateFails checks runtime_create returns an error (never a crash)
// when the driver cannot be used, and returns its message.
func (l loaded) runtimeCreateFails(t *testing.T) (int32, string) {
	t.Helper()
	var rt uintptr
	e, _, _ := purego.SyscallN(l.api.RuntimeCreate, 0, uintptr(unsafe.Pointer(&rt)))
	require.NotZero(t, e, "runtime_create succeeded without a usable driver")
	var info abi.ErrorInfo
	info.StructSize = uint64(unsafe.Sizeof(info))
	purego.SyscallN(l.api.ErrorGet, e, uintptr(unsafe.Pointer(&info)))
	msg := string(unsafe.Slice((*byte)(unsafePtr(info.Message)), info.MessageLen))
	purego.SyscallN(l.api.ErrorDestroy, e)
	return info.Code, msg
}

func driverPresent() bool {
	h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return false
	}
	_ = h
	return true
}

// captureStderr runs fn with fd 2 redirected to a pipe and returns what was written.
func captureStdio(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := [2]int{}
	for i, fd := range []int{1, 2} {
		saved[i], err = syscall.Dup(fd)
		require.NoError(t, err)
		require.NoError(t, syscall.Dup2(int(w.Fd()), fd))
	}
	fn()
	for i, fd := range []int{1, 2} {
		require.NoError(t, syscall.Dup2(saved[i], fd))
		syscall.Close(saved[i])
	}
	w.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(r)
	r.Close()
	return buf.String()
}

func TestProbeWithoutDriverKeepsGoSignals(t *testing.T) {
	lib := plugin(t)
	if driverPresent() {
		t.Skip("a CUDA driver (libcuda.so.1) is installed here; this test needs a host without one")
	}
	before := sigactions(t)
	var res probeResult
	var code int32
	var msg string
	out := captureStdio(t, func() {
		l := load(t, lib)
		res = l.probe(t)
		res2 := l.probe(t) // a second probe answers the same
		require.Equal(t, res, res2)
		code, msg = l.runtimeCreateFails(t)
	})
	require.Empty(t, out, "the plugin printed something")
	require.False(t, res.available)
	require.Equal(t, int32(abi.ProbeDriverMissing), res.code)
	require.True(t, strings.HasPrefix(res.reason, "driver missing: libcuda.so.1: "), res.reason)
	require.Equal(t, int32(abi.ErrUnavailable), code)
	require.Contains(t, msg, "driver missing")
	require.Equal(t, before, sigactions(t), "loading and probing the plugin changed signal handlers")

	// Go's SIGSEGV handling still turns a bad access into a panic.
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	recovered := func() (r any) {
		defer func() { r = recover() }()
		p := (*int)(unsafePtr(8))
		return *p
	}()
	require.NotNil(t, recovered)
}

// TestProbeReasons runs the probe in child processes whose dynamic loader
// finds the fake libcuda.so.1 of testdata/fakecuda.c.
func TestProbeReasons(t *testing.T) {
	lib := plugin(t)
	fakeDir := t.TempDir()
	testutil.Compile(t, "the fake libcuda", "-shared", "-fPIC", "-O1", "-o",
		filepath.Join(fakeDir, "libcuda.so.1"), filepath.Join("testdata", "fakecuda.c"))
	exe, err := os.Executable()
	require.NoError(t, err)
	tests := []struct {
		name      string
		env       []string
		available bool
		code      int32
		reason    []string
	}{
		{"driver too old", []string{"FAKECUDA_VERSION=12040"}, false, abi.ProbeDriverTooOld,
			[]string{"driver too old", "12.4 (12040)", "13.0 (13000)"}},
		{"cuInit fails", []string{"FAKECUDA_INIT=100"}, false, abi.ProbeNoDevice,
			[]string{"no device", "CUDA_ERROR_NO_DEVICE"}},
		{"no device", []string{"FAKECUDA_COUNT=0"}, false, abi.ProbeNoDevice,
			[]string{"no device"}},
		{"one device", nil, true, abi.ProbeOK, []string{"1 CUDA device", "Fake GPU (sm_90a)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := testutil.RunTestChild(exe, "TestProbeChild",
				append([]string{"GPURT_CUDA_PROBE_CHILD=" + lib, "LD_LIBRARY_PATH=" + fakeDir}, tc.env...)...)
			require.NoError(t, err, "%s", out)
			var got struct {
				avail bool
				code  int32
			}
			line := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "PROBE ") {
					line = l
				}
			}
			require.NotEmpty(t, line, "%s", out)
			var rest string
			_, err = fmt.Sscanf(line, "PROBE %t %d", &got.avail, &got.code)
			require.NoError(t, err, line)
			rest = line
			require.Equal(t, tc.available, got.avail, line)
			require.Equal(t, tc.code, got.code, line)
			for _, s := range tc.reason {
				require.Contains(t, rest, s)
			}
		})
	}
}

// TestProbeChild is the child of TestProbeReasons.
func TestProbeChild(t *testing.T) {
	lib := os.Getenv("GPURT_CUDA_PROBE_CHILD")
	if lib == "" {
		t.Skip("only run as a child of TestProbeReasons")
	}
	before := sigactions(t)
	var res probeResult
	out := captureStdio(t, func() {
		l := load(t, lib)
		res = l.probe(t)
		if res.available {
			// The fake driver cannot make a context: an error, not a crash.
			code, msg := l.runtimeCreateFails(t)
			require.Equal(t, int32(abi.ErrUnavailable), code, msg)
			require.Contains(t, msg, "cuDevicePrimaryCtxRetain")
		}
	})
	require.Empty(t, out, "the plugin printed something")
	require.Equal(t, before, sigactions(t))
	fmt.Printf("PROBE %t %d count=%d reason=%q name=%q arch=%q\n", res.available, res.code,
		res.count, res.reason, res.name, res.arch)
}

// TestLaunchBatchWithoutRuntime checks the 1.2 slot launch_batch is in the
// table and answers a bad runtime handle with an error (never a crash),
// writing 0 to out_enqueued first.
func TestLaunchBatchWithoutRuntime(t *testing.T) {
	l := load(t, plugin(t))
	require.GreaterOrEqual(t, l.api.StructSize,
		uint64(unsafe.Offsetof(abi.API{}.LaunchBatch)+unsafe.Sizeof(abi.API{}.LaunchBatch)))
	require.NotZero(t, l.api.LaunchBatch, "launch_batch is not in the table")
	tests := []struct {
		name    string
		runtime uintptr
		count   uint64
	}{
		{"NULL runtime, count 0", 0, 0},
		{"NULL runtime, count 3", 0, 3},
		{"garbage runtime", 0xdeadbeef, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := uint64(99)
			e, _, _ := purego.SyscallN(l.api.LaunchBatch, tc.runtime, 0, uintptr(tc.count), 0,
				uintptr(unsafe.Pointer(&n)))
			require.NotZero(t, e, "launch_batch accepted runtime %#x", tc.runtime)
			var info abi.ErrorInfo
			info.StructSize = uint64(unsafe.Sizeof(info))
			purego.SyscallN(l.api.ErrorGet, e, uintptr(unsafe.Pointer(&info)))
			msg := string(unsafe.Slice((*byte)(unsafePtr(info.Message)), info.MessageLen))
			purego.SyscallN(l.api.ErrorDestroy, e)
			require.Equal(t, int32(abi.ErrInvalidHandle), info.Code, msg)
			require.Contains(t, msg, "cuda: ")
			require.Zero(t, n, "out_enqueued")
		})
	}
}
