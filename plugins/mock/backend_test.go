// SPDX-License-Identifier: Apache-2.0

package mock_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestBackendTableCheck runs csrc/test/backend_check.c: gp_backend_check
// refuses a backend table (csrc/gp_backend.h) that leaves unset an entry
// its ABI minor promises, naming the entry, and accepts unset optional
// entries and entries of later minors.
func TestBackendTableCheck(t *testing.T) {
	runCsrcTest(t, "backend_check.c")
}

// TestGraphOnce runs csrc/test/graph_once.c: the engine's graphs for a
// backend with gp_backend.graph_once (CUDA's kind) are recorded once at
// graph_create and at each graph_update, replayed from the kept executable
// at every graph_launch after the items' checks, and a refused update or
// recording changes or leaks nothing (ASan and UBSan on).
func TestGraphOnce(t *testing.T) {
	runCsrcTest(t, "graph_once.c", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
}

// runCsrcTest builds csrc/test/NAME with every csrc/*.c (and flags), runs
// it and requires its last line to report no failure.
func runCsrcTest(t *testing.T, name string, flags ...string) {
	cc := testutil.CC(t)
	root := testutil.RepoRoot(t)
	csrc, err := filepath.Glob(filepath.Join(root, "csrc", "*.c"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(name, ".c"))
	args := append([]string{"-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror"}, flags...)
	args = append(args, "-I"+filepath.Join(root, "abi"), "-I"+filepath.Join(root, "csrc"), "-o", bin,
		filepath.Join(root, "csrc", "test", name))
	args = append(append(args, csrc...), "-lm", "-lpthread")
	out, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "compiling %s: %s", name, out)
	out, err = exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "%s failed", name)
	require.Contains(t, string(out), " 0 failed")
}
