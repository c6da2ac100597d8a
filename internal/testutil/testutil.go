// SPDX-License-Identifier: Apache-2.0

// Package testutil builds plugins and test libraries for tests, with the
// repository's own scripts and `go env CC`, skipping when there is no C
// compiler.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the folder holding go.mod.
func RepoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
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

var (
	mockOnce sync.Once
	mockDir  string
	mockErr  string
)

// PluginExt is the shared-library suffix of this platform.
func PluginExt() string {
	if runtime.GOOS == "darwin" {
		return ".dylib"
	}
	return ".so"
}

// MockPlugin builds libgpurt_mock once per test binary with
// scripts/build_mock.sh and returns the folder holding it (a private
// 0700 folder, as the loader requires). It fails the test when the build
// fails and skips when there is no compiler.
func MockPlugin(t testing.TB) string {
	cc := CC(t)
	mockOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpurt-mock-")
		if err != nil {
			mockErr = err.Error()
			return
		}
		cmd := exec.Command("bash", filepath.Join(RepoRoot(t), "scripts", "build_mock.sh"), dir)
		cmd.Env = append(os.Environ(), "CC="+cc)
		if out, err := cmd.CombinedOutput(); err != nil {
			mockErr = "scripts/build_mock.sh: " + err.Error() + "\n" + string(out)
			return
		}
		mockDir = dir
	})
	if mockErr != "" {
		t.Fatalf("building the mock plugin: %s", mockErr)
	}
	return mockDir
}

// MockPluginPath is the absolute path of the built mock plugin.
func MockPluginPath(t testing.TB) string {
	return filepath.Join(MockPlugin(t), "libgpurt_mock"+PluginExt())
}
