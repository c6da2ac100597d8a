// SPDX-License-Identifier: Apache-2.0

package mock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// exportedSymbols lists the defined dynamic symbols of a shared library with
// the platform's nm.
func exportedSymbols(t *testing.T, lib string) []string {
	t.Helper()
	args := []string{"-D", "--defined-only", lib}
	if runtime.GOOS == "darwin" {
		args = []string{"-gU", lib}
	}
	nm, err := exec.LookPath("nm")
	if err != nil {
		t.Skipf("no nm on this host: %v", err)
	}
	out, err := exec.Command(nm, args...).CombinedOutput()
	require.NoError(t, err, "nm %v: %s", args, out)
	var syms []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := strings.TrimPrefix(f[len(f)-1], "_")
		if runtime.GOOS == "darwin" {
			name = strings.TrimPrefix(f[len(f)-1], "_")
		}
		syms = append(syms, name)
	}
	return syms
}

func TestOnlyEntryExported(t *testing.T) {
	lib := testutil.MockPluginPath(t)
	require.FileExists(t, lib)
	require.Equal(t, []string{"gpurt_plugin_negotiate"}, exportedSymbols(t, lib))
}

// TestSelftest compiles plugins/mock/test/mock_selftest.c with `go env CC`
// and runs it against the built plugin; it prints "N passed, M failed".
func TestSelftest(t *testing.T) {
	lib := testutil.MockPluginPath(t)
	cc := testutil.CC(t)
	root := testutil.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "mock_selftest")
	src := filepath.Join(root, "plugins", "mock", "test", "mock_selftest.c")
	base := []string{"-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra",
		"-I" + filepath.Join(root, "abi"), "-o", bin, src, "-lpthread", "-lm"}
	if runtime.GOOS == "linux" {
		base = append(base, "-ldl")
	}
	out, err := exec.Command(cc, base...).CombinedOutput()
	require.NoError(t, err, "compiling the selftest: %s", out)
	cmd := exec.Command(bin, lib)
	cmd.Env = append(os.Environ(), "GPURT_MOCK_DELAY_US=20")
	out, err = cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "mock_selftest failed")
	require.Contains(t, string(out), " 0 failed")
}
