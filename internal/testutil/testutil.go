// SPDX-License-Identifier: Apache-2.0

// Package testutil builds plugins and test libraries for tests, with the
// repository's own scripts and `go env CC`, skipping when there is no C
// compiler.
package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the folder holding gpurt's go.mod.
func RepoRoot(t testing.TB) string {
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	return root
}

// repoRoot is the folder holding gpurt's go.mod: two above this file's,
// or, in a build with -trimpath (whose file names are module paths, as
// make test builds), the first folder above the working one (a test's
// package folder) whose go.mod is gpurt's.
func repoRoot() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == "github.com/metrale/gpurt" {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod of github.com/metrale/gpurt above the working folder (built with -trimpath: %s)", file)
		}
		dir = up
	}
}

// modulePath is the path on a go.mod's module line.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// CC returns the C compiler, or skips the test when there is none.
func CC(t testing.TB) string {
	out, err := exec.Command("go", "env", "CC").Output()
	name := strings.TrimSpace(string(out))
	if err != nil || name == "" {
		name = "cc"
	}
	path, err := exec.LookPath(strings.Fields(name)[0])
	if err != nil {
		t.Skipf("no C compiler (%s): %v", name, err)
	}
	return path
}

// Compile runs the C compiler (CC: the test skips without one) with args;
// a failure ends the test naming what was compiled, the command and the
// compiler's output.
func Compile(t testing.TB, what string, args ...string) {
	t.Helper()
	Run(t, "compiling "+what, CC(t), args...)
}

// Run runs prog with args and returns its output (standard output and
// error together); a failure ends the test naming what it did, the command
// and that output.
func Run(t testing.TB, what, prog string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(prog, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %s %s: %v\n%s", what, prog, strings.Join(args, " "), err, out)
	}
	return out
}

// CProgram compiles the C source src (written to a file of t.TempDir)
// with the C compiler and ccArgs (include folders, more sources,
// libraries), runs it and returns its standard output; what names the
// program in a failure, which ends the test (the test skips without a
// compiler).
func CProgram(t testing.TB, what, src string, ccArgs ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	file, bin := filepath.Join(dir, "prog.c"), filepath.Join(dir, "prog")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	Compile(t, what, append([]string{"-o", bin, file}, ccArgs...)...)
	out, err := exec.Command(bin).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("running %s: %v\n%s", what, err, stderr)
	}
	return out
}

// RunTestChild runs the test named test (the whole name: it is anchored)
// of the test binary exe in a new process, verbose, with env added to
// this process's environment, and returns its output (standard output and
// error together) and error: for a test whose check needs a fresh process
// (no cache of this one, another environment, a replaced executable).
func RunTestChild(exe, test string, env ...string) ([]byte, error) {
	cmd := exec.Command(exe, "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// CUDATool is the path of a CUDA toolkit program (nvcc, ptxas): the
// environment variable env when set (and env not empty), else name on
// PATH, /usr/local/cuda/bin, or the CUDA packages scripts/build_cuda.sh
// installs into the repository's .cuda-venv/; "" when there is none.
func CUDATool(t testing.TB, name, env string) string {
	if env != "" && os.Getenv(env) != "" {
		return os.Getenv(env)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/local/cuda/bin", name); fileExists(p) {
		return p
	}
	ms, _ := filepath.Glob(filepath.Join(RepoRoot(t), ".cuda-venv", "lib", "python3*", "site-packages", "nvidia", "*", "bin", name))
	if len(ms) > 0 {
		return ms[0]
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var (
	mockOnce sync.Once
	mockLib  []byte // the built plugin's bytes
	mockErr  string
	mockDirs sync.Map // testing.TB -> its folder holding a copy
)

// PluginExt is the shared-library suffix of this platform.
func PluginExt() string {
	if runtime.GOOS == "darwin" {
		return ".dylib"
	}
	return ".so"
}

// MockPlugin builds libgpurt_mock once per test binary with
// scripts/build_mock.sh (in the first caller's t.TempDir) and returns a
// folder of t's own t.TempDir holding a copy (a private 0700 folder, as the
// loader requires; one per test, so nothing is left behind in shared
// folders). It fails the test when the build fails and skips when there is
// no compiler.
//
// When $GPURT_TEST_MOCK_PLUGIN names a built plugin (make test sets it to
// the one `make mock` built, so that its twenty-odd test binaries per pass
// do not build it again, ~6 CPU-s each), its bytes are used instead.
func MockPlugin(t testing.TB) string {
	lib := mockBytes(t)
	if d, ok := mockDirs.Load(t); ok {
		return d.(string)
	}
	dir := PrivateCopy(t, "libgpurt_mock"+PluginExt(), lib)
	mockDirs.Store(t, dir)
	t.Cleanup(func() { mockDirs.Delete(t) })
	return dir
}

// MockPluginBytes is a copy of the built mock plugin's bytes (built, or
// taken from $GPURT_TEST_MOCK_PLUGIN, as MockPlugin says), for a test that
// writes the plugin somewhere of its own: under another name, with other
// modes, in a folder with an odd name.
func MockPluginBytes(t testing.TB) []byte { return bytes.Clone(mockBytes(t)) }

// mockBytes builds the mock plugin once per test binary (or reads
// $GPURT_TEST_MOCK_PLUGIN's) and returns its bytes, shared: not to be
// modified.
func mockBytes(t testing.TB) []byte {
	var cc string
	if os.Getenv(mockEnv) == "" {
		cc = CC(t) // skips the test without a compiler (outside the Once)
	}
	mockOnce.Do(func() {
		if lib, ok, err := prebuiltMock(); err != nil {
			mockErr = err.Error()
			return
		} else if ok {
			mockLib = lib
			return
		}
		dir := t.TempDir()
		cmd := exec.Command("bash", filepath.Join(RepoRoot(t), "scripts", "build_mock.sh"), dir)
		cmd.Env = append(os.Environ(), "CC="+cc)
		if out, err := cmd.CombinedOutput(); err != nil {
			mockErr = "scripts/build_mock.sh: " + err.Error() + "\n" + string(out)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "libgpurt_mock"+PluginExt()))
		if err != nil {
			mockErr = err.Error()
			return
		}
		mockLib = b
	})
	if mockErr != "" {
		t.Fatalf("building the mock plugin: %s", mockErr)
	}
	return mockLib
}

// mockEnv names the prebuilt mock plugin the tests use when it is set.
const mockEnv = "GPURT_TEST_MOCK_PLUGIN"

// prebuiltMock reads the plugin $GPURT_TEST_MOCK_PLUGIN names: ok is false
// when it is unset; an error names the variable and the cause.
func prebuiltMock() (lib []byte, ok bool, err error) {
	p := os.Getenv(mockEnv)
	if p == "" {
		return nil, false, nil
	}
	if want := "libgpurt_mock" + PluginExt(); filepath.Base(p) != want {
		return nil, false, fmt.Errorf("testutil: %s=%s: not a file named %s", mockEnv, p, want)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false, fmt.Errorf("testutil: %s: %w", mockEnv, err)
	}
	return b, true, nil
}

// PrivateCopy writes data as file name (mode 0755) into a new private
// (0700) folder of t.TempDir and returns the folder.
func PrivateCopy(t testing.TB, name string, data []byte) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// MockPluginPath is the absolute path of the built mock plugin.
func MockPluginPath(t testing.TB) string {
	return filepath.Join(MockPlugin(t), "libgpurt_mock"+PluginExt())
}

// RunWithMockPlugin is the body of a TestMain whose runnable examples
// open a runtime as a program would (they have no testing.T): it puts a
// freshly built mock plugin on GPURT_PLUGIN_PATH, runs the tests and
// removes the plugin, and returns the exit code (1, naming pkg, when there
// is no plugin).
//
//	func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "attention")) }
func RunWithMockPlugin(m *testing.M, pkg string) int {
	dir, cleanup, err := MockPluginForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, pkg+" tests: no mock plugin:", err)
		return 1
	}
	defer cleanup()
	if err := os.Setenv("GPURT_PLUGIN_PATH", dir); err != nil {
		fmt.Fprintln(os.Stderr, pkg+" tests:", err)
		return 1
	}
	return m.Run()
}

// MockPluginForMain builds the mock plugin into a new private (0700)
// folder for a TestMain, whose runnable examples have no testing.T: it
// returns the folder and a function that removes it. The error says why
// there is no plugin (no C compiler, a failed build).
func MockPluginForMain() (string, func(), error) {
	dir, err := os.MkdirTemp("", "gpurt-mock-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if lib, ok, err := prebuiltMock(); err != nil || ok {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "libgpurt_mock"+PluginExt()), lib, 0o755)
		}
		if err == nil {
			err = os.Chmod(dir, 0o700)
		}
		if err != nil {
			cleanup()
			return "", nil, err
		}
		return dir, cleanup, nil
	}
	root, err := repoRoot()
	if err != nil {
		cleanup()
		return "", nil, err
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "build_mock.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("scripts/build_mock.sh: %w\n%s", err, out)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		cleanup()
		return "", nil, err
	}
	return dir, cleanup, nil
}

// GoTool is the go command that built this test: $GOROOT/bin/go, or, in
// a build with -trimpath (where runtime.GOROOT is empty), the go on PATH.
func GoTool(t testing.TB) string {
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("testutil: no go command: runtime.GOROOT() is %q and PATH has none: %v", runtime.GOROOT(), err)
	}
	return p
}

// Go runs the go command (GoTool) with args in folder dir (empty: the
// test's folder), with env added to the process's environment, and
// returns its standard output; a failure ends the test naming the command,
// with its standard error.
func Go(t testing.TB, dir string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(GoTool(t), args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// JSONLines decodes each line of r as a T, in order: the output of the
// commands and benchmarks that print one JSON object per line. A line that
// is not a T fails the test, naming the line.
func JSONLines[T any](t testing.TB, r io.Reader) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("JSONLines: line %d %q: %v", len(out)+1, sc.Text(), err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("JSONLines: after line %d: %v", len(out), err)
	}
	return out
}

// QuietEnv clears, for t, the variables that choose a plugin
// (GPURT_PLUGIN_PATH, GPURT_BACKEND), so that a command under test sees
// only its flags, and turns the runtime's log off (GPURT_LOG_LEVEL).
func QuietEnv(t testing.TB) {
	t.Setenv("GPURT_PLUGIN_PATH", "")
	t.Setenv("GPURT_BACKEND", "")
	t.Setenv("GPURT_LOG_LEVEL", "off")
}

// PrivateDir is a new temporary folder of t with mode 0700, as the loader
// requires of a plugin folder.
func PrivateDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatalf("PrivateDir: %v", err)
	}
	return d
}
