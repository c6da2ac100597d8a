// SPDX-License-Identifier: Apache-2.0

package mock_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestBackendTableCheck runs csrc/test/backend_check.c: gp_backend_check
// refuses a backend table (csrc/gp_backend.h) that leaves unset an entry
// its ABI minor promises, naming the entry, and accepts unset optional
// entries and entries of later minors.
func TestBackendTableCheck(t *testing.T) {
	cc := testutil.CC(t)
	root := testutil.RepoRoot(t)
	csrc, err := filepath.Glob(filepath.Join(root, "csrc", "*.c"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "backend_check")
	args := []string{"-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
		"-I" + filepath.Join(root, "abi"), "-I" + filepath.Join(root, "csrc"), "-o", bin,
		filepath.Join(root, "csrc", "test", "backend_check.c")}
	args = append(append(args, csrc...), "-lm", "-lpthread")
	out, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "compiling backend_check.c: %s", out)
	out, err = exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "backend_check failed")
	require.Contains(t, string(out), " 0 failed")
}
